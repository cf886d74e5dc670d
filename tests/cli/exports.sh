#!/usr/bin/env bash
# libvramfit.so exports the public API and nothing else: every function declared VF_API in
# include/, and no internal name of src/ (the library is built with -fvisibility=hidden).
NAME=exports
source "$(dirname "$0")/lib/harness.sh"

lib=${VF_BUILD_DIR:?}/libvramfit.so
nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "D" || $2 == "B" || $2 == "R" {print $3}' | sort >"$TMP/exported"
grep -rhoE 'VF_API[^(]*[^a-z0-9_]vf_[a-z0-9_]+\(' "$SRC/include" | grep -oE 'vf_[a-z0-9_]+\($' | tr -d '(' |
  sort -u >"$TMP/declared"

if [ -s "$TMP/declared" ] && cmp -s "$TMP/exported" "$TMP/declared"; then
  ok
else
  bad "exported symbols differ from the VF_API declarations (< exported only, > declared only):"
  diff "$TMP/exported" "$TMP/declared" | grep '^[<>]' | head -20 >&2
fi
# The binding's entry point is among them.
if grep -qx vf_cli_json "$TMP/exported"; then ok; else bad "vf_cli_json is not exported"; fi

finish
