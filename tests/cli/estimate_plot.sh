#!/usr/bin/env bash
# vramfit estimate --plot FILE.svg: the file is written (with --events, with --json, when the
# run does not fit), it is the same for the same estimate, rsvg-convert renders it, a 405B
# run's stays small, and a path that cannot be written is a one-line error, exit 2, with
# nothing left behind. The drawing itself is checked in unit/test_plot_svg.
NAME=estimate_plot
source "$(dirname "$0")/lib/harness.sh"

SETUP=(estimate llama-3.2-1b --weights bf16 --method lora)

# is_svg FILE: an SVG document with the peak marked and the phases drawn.
is_svg() {
  if [ ! -s "$1" ]; then
    bad "$1: not written"
  elif ! head -2 "$1" | grep -q '^<svg xmlns="http://www.w3.org/2000/svg"'; then
    bad "$1: not an SVG document: $(head -c 200 "$1")"
  elif ! grep -q 'id="peak"' "$1" || ! grep -q 'class="band" data-phase="backward"' "$1"; then
    bad "$1: no peak marker or no backward band"
  else
    ok
  fi
}

# ---- written, and the output is what --events gives (both replay every layer) -------------
exits 0 "${SETUP[@]}" --events "$TMP/a.events"
cp "$TMP/out" "$TMP/events.out"
exits 0 "${SETUP[@]}" --plot "$TMP/a.svg"
is_svg "$TMP/a.svg"
cmp -s "$TMP/out" "$TMP/events.out" && ok || bad "--plot changed the text output: $(diff "$TMP/events.out" "$TMP/out" | head -5)"
# The same estimate draws the same bytes.
exits 0 "${SETUP[@]}" --plot "$TMP/b.svg"
cmp -s "$TMP/a.svg" "$TMP/b.svg" && ok || bad "two runs drew different files"
# The title names the model and the setup.
grep -q '<title>llama-3.2-1b: GPU memory over the run' "$TMP/a.svg" && ok || bad "no title naming the model"
grep -q 'hf, sdpa attention, bf16 weights, lora r 8, adamw' "$TMP/a.svg" && ok || bad "no setup line"

# ---- with --events and --json together -----------------------------------------------------
rm -f "$TMP/a.svg" "$TMP/a.events"
run "${SETUP[@]}" --json --plot "$TMP/a.svg" --events "$TMP/a.events"
[ "$rc" -eq 0 ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))["peak"]["allocated_bytes"]' "$TMP/out" &&
  ok || bad "--json --plot: exit $rc, stdout not the JSON object: $(head -c 200 "$TMP/out")"
is_svg "$TMP/a.svg"
head -1 "$TMP/a.events" | grep -qx "vramfit-trace-events 1" && ok || bad "--events not written beside --plot"

# ---- the GPU: its capacity drawn; a run that does not fit is drawn too, exit 1 -------------
exits 1 estimate llama-2-7b --gpu rtx-4090 --plot "$TMP/nofit.svg"
is_svg "$TMP/nofit.svg"
grep -q 'id="capacity"' "$TMP/nofit.svg" && grep -q 'GPU capacity 23.99 GiB (rtx-4090)' "$TMP/nofit.svg" &&
  ok || bad "no capacity line for --gpu rtx-4090"
grep -q 'id="capacity"' "$TMP/a.svg" && bad "a capacity line without --gpu" || ok

# ---- an existing file is replaced whole --------------------------------------------------
head -c 500000 /dev/zero | tr '\0' x >"$TMP/old.svg"
exits 0 "${SETUP[@]}" --plot "$TMP/old.svg"
is_svg "$TMP/old.svg"
grep -q xxx "$TMP/old.svg" && bad "the old file's bytes remain" || ok

# A link is followed: it still leads to the plot.
mkdir "$TMP/real"
echo old >"$TMP/real/p.svg"
ln -s real/p.svg "$TMP/link.svg"
exits 0 "${SETUP[@]}" --plot "$TMP/link.svg"
[ -L "$TMP/link.svg" ] && ok || bad "--plot replaced the link with a file"
is_svg "$TMP/real/p.svg"
[ "$(ls -A "$TMP/real")" = p.svg ] && ok || bad "files left beside the link's target: $(ls -A "$TMP/real")"

# ---- rendered by rsvg-convert (librsvg2-bin: a test prerequisite, never skipped) ----------
if ! command -v rsvg-convert >/dev/null; then
  bad "rsvg-convert is missing: install librsvg2-bin ('make deps' does)"
elif ! rsvg-convert -o "$TMP/a.png" "$TMP/a.svg" 2>"$TMP/rsvg.err"; then
  bad "rsvg-convert refused the plot: $(head -c 300 "$TMP/rsvg.err")"
else
  [ "$(head -c 8 "$TMP/a.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && ok || bad "rsvg-convert wrote no PNG"
fi

# ---- a 405B run (every one of its 126 layers replayed) stays small ------------------------
exits 0 estimate llama-3.1-405b --weights bf16 --gpus 8 --shard fsdp --accumulation 4 --plot "$TMP/405b.svg"
is_svg "$TMP/405b.svg"
size=$(wc -c <"$TMP/405b.svg")
[ "$size" -lt 300000 ] && ok || bad "405B plot is $size bytes, want < 300 KB"

# ---- paths that cannot be written: one line, exit 2, no file and no temporary left --------
mkdir "$TMP/bad"
fails 2 "^vramfit estimate: $TMP/bad/missing/p.svg: cannot create a file next to it: No such file or directory\$" \
  "${SETUP[@]}" --plot "$TMP/bad/missing/p.svg"
touch "$TMP/bad/file"
fails 2 "^vramfit estimate: $TMP/bad/file/p.svg: cannot write it: Not a directory\$" \
  "${SETUP[@]}" --plot "$TMP/bad/file/p.svg"
mkdir "$TMP/bad/dir"
fails 2 "^vramfit estimate: $TMP/bad/dir: is a directory\$" "${SETUP[@]}" --plot "$TMP/bad/dir"
fails 2 "^vramfit estimate: $TMP/bad/dir/: is a directory\$" "${SETUP[@]}" --plot "$TMP/bad/dir/"
# A device is never replaced by a file.
fails 2 "^vramfit estimate: /dev/null: is not a regular file\$" "${SETUP[@]}" --plot /dev/null
[ -c /dev/null ] && ok || bad "/dev/null is no longer a device"
[ "$(ls -A "$TMP/bad" | tr '\n' ' ')" = "dir file " ] && [ -z "$(ls -A "$TMP/bad/dir")" ] && ok ||
  bad "files left behind: $(ls -AR "$TMP/bad" | tr '\n' ' ')"
fails 2 '^vramfit estimate: --plot needs a value$' "${SETUP[@]}" --plot
# A bad setup fails before anything is drawn.
fails 2 '--seq must be at least 1' "${SETUP[@]}" --seq 0 --plot "$TMP/bad/never.svg"
[ -e "$TMP/bad/never.svg" ] && bad "a plot written for a refused setup" || ok

# ---- documented ----------------------------------------------------------------------------
succeeds '--plot FILE.svg' estimate --help

finish
