#!/usr/bin/env bash
# The library's layers (scripts/check_layers.py): the tree as it is passes; a copy with a
# planted back-edge, a foreign internal header, a CLI reaching past the API, a public header
# reaching into src/ or an unnamed room fails, naming the file and line.
NAME=layers
source "$(dirname "$0")/lib/harness.sh"

check="$SRC/scripts/check_layers.py"

# layers_of DIR: runs the check on DIR, output in $TMP/out, exit code in $rc.
layers_of() {
  python3 "$check" "$1" >"$TMP/out" 2>&1
  rc=$?
}

layers_of "$SRC"
if [ "$rc" -eq 0 ]; then ok; else bad "the tree breaks its layers: $(cat "$TMP/out")"; fi

# planted FILE LINE PATTERN [WHERE]: a copy of src/ and include/ with LINE added to FILE must
# fail, with one complaint, at WHERE (default: FILE:LINE:) and matching PATTERN.
planted() {
  local file=$1 line=$2 pattern=$3 where=${4:-$1:[0-9]+:} tree=$TMP/tree
  rm -rf "$tree" && mkdir -p "$tree"
  cp -r "$SRC/src" "$SRC/include" "$tree/"
  mkdir -p "$(dirname "$tree/$file")"
  printf '%s\n' "$line" >>"$tree/$file"
  layers_of "$tree"
  if [ "$rc" -ne 1 ]; then
    bad "planting '$line' in $file: exit $rc, want 1"
  elif [ "$(wc -l <"$TMP/out")" -ne 1 ] || ! grep -Eq -- "^$where $pattern" "$TMP/out"; then
    bad "planting '$line' in $file: $(cat "$TMP/out")"
  else
    ok
  fi
}

planted src/core/setup.c '#include "cli/cli.h"' 'core/ is below cli/'
planted src/base/grow.c '#include "core/params.h"' 'base/ is below core/'
planted src/io/gguf.c '#include "edit/internal.h"' '"edit/internal.h" is internal to src/edit/'
planted src/core/plan/plan.c '#include "core/estimate/internal.h"' '"core/estimate/internal.h" is internal to src/core/estimate/'
planted src/cli/cmd_models.c '#include "io/data.h"' 'the command-line tool uses the public API and base/ only'
planted include/vramfit/model.h '#include "core/params.h"' 'a public header includes "core/params.h"'
planted src/sys/nvml.c '#include "python/x.h"' '"python/x.h" is in no room of src/'
planted src/gui/window.c '/* a room nobody placed */' 'a room the layers do not name' src/gui/:

finish
