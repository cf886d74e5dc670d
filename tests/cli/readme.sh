#!/usr/bin/env bash
# Every README example that shows output ("    $ vramfit ..." followed by indented lines) is
# run, and its output must match what the README shows. A line "..." stands for any number
# of lines and "..." inside a line for any text: the README's own abbreviations. Only what
# must vary is normalized: the folder the example runs in (shown as /home/me/run), the
# time and peak of each probe launch, and the dates of the run history. Examples run in a folder holding the files they name
# (tests/data/readme, the apply example's configs, a log), with the fake NVML playing the
# machine the example describes and a stand-in `python` for the probe's training script.
NAME=readme
source "$(dirname "$0")/lib/harness.sh"
source "$(dirname "$0")/lib/nvml.sh"
DATA=$SRC/tests/data/readme
RUN=$TMP/run

# setup: the folder every example runs in.
mkdir -p "$RUN/configs" "$RUN/my-llama"
cp "$DATA/broken.json" "$RUN/"
cp "$SRC/tests/data/apply/deepspeed/train.yaml" "$RUN/"
cp "$SRC/tests/data/apply/deepspeed/configs/ds_zero2.json" "$RUN/configs/"
cp "$SRC/tests/data/apply/litgpt_lora/lora.yaml" "$RUN/"
cp "$SRC/tests/data/oom/pytorch-1.13-fragmentation.log" "$RUN/train.log"
cp "$SRC/data/models/llama-3.2-1b.json" "$RUN/my-llama/config.json"
mkdir -p "$RUN/examples" && cp -r "$SRC/examples/contrastive-embedder" "$RUN/examples/"
rm -f "$RUN"/examples/contrastive-embedder/*.trace.json # as checked out: planned from its parts

# scenario COMMAND: the fake machine an example runs on.
scenario() {
  case "$1" in
  gpus*) echo "$DATA/gpus.nvml" ;;
  *) echo "$DATA/h100.nvml" ;;
  esac
}

# The examples, one record each: README and line, the folder it runs in (run: the folder
# above; example: a fresh copy of examples/contrastive-embedder, whose README walks through
# it), the command, then the expected lines.
python3 - "$SRC" "$TMP/examples" <<'PY' || bad "README examples could not be read"
import os, sys
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
n = 0
for readme, where in (("README.md", "run"), ("examples/contrastive-embedder/README.md", "example")):
  lines = open(os.path.join(sys.argv[1], readme), encoding="utf-8").read().splitlines()
  i = 0
  def indented(k):
    return k < len(lines) and lines[k].startswith("    ")
  while i < len(lines):
      if not lines[i].startswith("    $ vramfit"):
          i += 1
          continue
      start, cmd = i + 1, lines[i][6:]
      while cmd.endswith("\\"):
          i += 1
          cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
      i += 1
      shown = []
      while i < len(lines) and not lines[i].startswith("    $ "):
          if indented(i):
              shown.append(lines[i][4:])
          elif lines[i].strip() == "" and indented(i + 1) and not lines[i + 1].startswith("    $ "):
              shown.append("")
          else:
              break
          i += 1
      if shown:
          n += 1
          with open(os.path.join(out, "%03d" % n), "w", encoding="utf-8") as f:
              f.write("%s:%d\n%s\n%s\n%s\n" % (readme, start, where, cmd, "\n".join(shown)))
PY

# matches EXPECTED ACTUAL: the README's lines against the output, "..." as described above.
matches() {
  python3 - "$1" "$2" <<'PY'
import re, sys
from functools import lru_cache
exp = open(sys.argv[1], encoding="utf-8").read().splitlines()
act = open(sys.argv[2], encoding="utf-8").read().splitlines()
pat = [None if e.strip() == "..." else
       re.compile("^" + ".*".join(re.escape(p) for p in e.split("...")) + "$") for e in exp]
@lru_cache(maxsize=None)
def m(i, j):
    if i == len(exp):
        return j == len(act)
    if pat[i] is None:
        return any(m(i + 1, k) for k in range(j, len(act) + 1))
    return j < len(act) and bool(pat[i].match(act[j])) and m(i + 1, j + 1)
sys.exit(0 if m(0, 0) else 1)
PY
}

count=0
for rec in "$TMP"/examples/*; do
  [ -f "$rec" ] || continue
  count=$((count + 1))
  line=$(sed -n 1p "$rec")
  where=$(sed -n 2p "$rec")
  cmd=$(sed -n 3p "$rec")
  tail -n +4 "$rec" >"$TMP/expected"
  dir=$RUN
  if [ "$where" = example ]; then # a fresh copy, as a user's checkout of the example
    dir=$TMP/contrastive-embedder
    rm -rf "$dir" && cp -r "$SRC/examples/contrastive-embedder" "$dir" && rm -f "$dir"/*.trace.json
  fi
  # The example's own words, run by the shell in the example folder (the one that traces
  # runs the tracer at five points: about 40 s alone, minutes on a busy machine).
  (cd "$dir" && PATH="$DATA/bin:$PATH" FAKE_NVML_SCRIPT=$(scenario "${cmd#vramfit }") \
    timeout 180 bash -c "vramfit() { \"\$VRAMFIT\" \"\$@\"; }; $cmd" >"$TMP/actual" 2>&1 </dev/null)
  sed -i -e "s|$RUN|/home/me/run|g" -e "s|$TMP/contrastive-embedder|/home/me/contrastive-embedder|g" "$TMP/actual"
  sed -i -e 's/^\(batch [0-9]*: [a-z]*\( ([^)]*)\)\?\), .* peak, [0-9.]* s$/\1, PEAK peak, TIME s/' \
    -e 's/^20[0-9][0-9]-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]  /WHEN  /' \
    -e 's/, 20[0-9][0-9]-[01][0-9]-[0-3][0-9]; this estimate/, WHEN; this estimate/' "$TMP/actual" "$TMP/expected"
  # A fresh copy of the configs for the next example that edits them.
  cp "$SRC/tests/data/apply/deepspeed/train.yaml" "$RUN/"
  cp "$SRC/tests/data/apply/deepspeed/configs/ds_zero2.json" "$RUN/configs/"
  rm -f "$RUN"/*.backup* "$RUN"/configs/*.backup*
  if matches "$TMP/expected" "$TMP/actual"; then
    ok
  else
    bad "$line: \$ $cmd: the output differs from the README:"
    diff -u "$TMP/expected" "$TMP/actual" | head -60 >&2
  fi
done
# The README has examples with output: finding none means this script lost them.
if [ "$count" -ge 10 ]; then ok; else bad "only $count README examples with output found"; fi

finish
