#!/usr/bin/env bash
# Every example that shows output ("    $ vramfit ..." followed by indented lines) in the
# README, the manual (docs/*.md, in the order docs/README.md links them) and the examples'
# READMEs (examples/*/README.md and the guides' examples/seeds/*/README.md) is run, and its output must match what the page shows. A line "..." stands for
# any number of lines and "..." inside a line for any text: the pages' own abbreviations.
# Only what must vary is normalized: the folder the example runs in (shown as
# /home/me/run), the time and peak of each probe launch, and the dates of the run history.
# Examples run in a folder holding the files they name (tests/data/readme, the apply
# example's configs, a log, the examples), with the fake NVML playing the machine the
# example describes (a guide's own gpu.nvml) and a stand-in `python` for the probe's
# training script. The pages' links are checked
# first.
NAME=readme
source "$(dirname "$0")/lib/harness.sh"
source "$(dirname "$0")/lib/nvml.sh"
DATA=$SRC/tests/data/readme
RUN=$TMP/run

# setup: the folder every example runs in.
mkdir -p "$RUN/configs" "$RUN/my-llama"
cp "$DATA/broken.json" "$DATA/bad_batch.yaml" "$DATA/pretrain_512m.yaml" "$DATA/launch.sh" "$RUN/"
cp "$SRC/tests/data/apply/deepspeed/train.yaml" "$RUN/"
cp "$SRC/tests/data/apply/deepspeed/configs/ds_zero2.json" "$RUN/configs/"
cp "$SRC/tests/data/apply/litgpt_lora/lora.yaml" "$RUN/"
cp "$SRC/tests/data/oom/pytorch-1.13-fragmentation.log" "$RUN/train.log"
cp "$SRC/data/models/llama-3.2-1b.json" "$RUN/my-llama/config.json"
# The same model downloaded into a Hub cache, as huggingface_hub lays it out.
export HF_HUB_CACHE=$TMP/hub
hub=$HF_HUB_CACHE/models--my-org--My-Llama
mkdir -p "$hub/refs" "$hub/blobs" "$hub/snapshots/0123abcd"
printf 0123abcd >"$hub/refs/main"
cp "$SRC/data/models/llama-3.2-1b.json" "$hub/blobs/c0ffee"
ln -s ../../blobs/c0ffee "$hub/snapshots/0123abcd/config.json"
mkdir -p "$RUN/examples" && cp -r "$SRC/examples/contrastive-embedder" "$SRC/examples/configs" "$SRC/examples/seeds" "$RUN/examples/"
rm -f "$RUN"/examples/contrastive-embedder/*.trace.json # as checked out: planned from its parts

# scenario PAGE COMMAND: the fake machine an example runs on: a guide's own (its folder's
# gpu.nvml), else the one the command describes.
scenario() {
  local own=$SRC/${1%/README.md}/gpu.nvml
  case "$1" in examples/seeds/*) [ -f "$own" ] && { echo "$own"; return; } ;; esac
  case "$2" in
  gpus*) echo "$DATA/gpus.nvml" ;;
  *) echo "$DATA/h100.nvml" ;;
  esac
}

# Every relative link of the pages points to a file that exists and, for a heading
# (page.md#anchor), to a heading of that page as GitHub names it. Every page of the manual
# is linked from its index.
if python3 - "$SRC" <<'PY'; then ok; else bad "broken links in the README, the manual or bench/ (above)"; fi
import glob, os, re, sys
src = sys.argv[1]
pages = (["README.md"] + sorted(glob.glob("docs/*.md", root_dir=src)) +
         sorted(glob.glob("examples/**/README.md", root_dir=src, recursive=True)) + ["bench/README.md", "bench/NOTES.md"])

def prose(path):
    """The page's lines outside code blocks, with code spans blanked."""
    out, fence = [], False
    for line in open(os.path.join(src, path), encoding="utf-8").read().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    ") or line.startswith("\t"):
            continue
        out.append(re.sub(r"`[^`]*`", "``", line))
    return out

def heading_text(path):
    """Headings with their code spans kept, for anchors (GitHub keeps a span's text)."""
    out, fence = [], False
    for line in open(os.path.join(src, path), encoding="utf-8").read().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and not line.startswith("    ") and re.match(r"#{1,6}\s", line):
            out.append(line)
    return out

def slugs(path):
    seen, names = {}, set()
    for line in heading_text(path):
        text = re.match(r"#{1,6}\s+(.*?)\s*#*$", line).group(1)
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        names.add(slug if n == 0 else "%s-%d" % (slug, n))
    return names

broken = []
for page in pages:
    for line in prose(page):
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(src, os.path.dirname(page), path)) if path else os.path.join(src, page)
            if not os.path.exists(full):
                broken.append("%s: %s: no such file" % (page, target))
            elif anchor and full.endswith(".md") and anchor not in slugs(os.path.relpath(full, src)):
                broken.append("%s: %s: no such heading" % (page, target))
index = open(os.path.join(src, "docs/README.md"), encoding="utf-8").read()
for page in glob.glob("docs/*.md", root_dir=src):
    name = os.path.basename(page)
    if name != "README.md" and "](%s" % name not in index:
        broken.append("docs/README.md does not link %s" % name)
for b in broken:
    print(b, file=sys.stderr)
sys.exit(1 if broken else 0)
PY

# The pages whose examples run, in order: the README, the manual in the order its index
# links it (the history page's examples show what the probe page's ran), the examples'.
pages() {
  echo README.md
  python3 - "$SRC" <<'PY'
import glob, os, re, sys
src = sys.argv[1]
index = open(os.path.join(src, "docs/README.md"), encoding="utf-8").read()
order = ["docs/README.md"]
for name in re.findall(r"\]\(([\w.-]+\.md)", index):
    if os.path.exists(os.path.join(src, "docs", name)) and "docs/" + name not in order:
        order.append("docs/" + name)
order += sorted(p for p in glob.glob("docs/*.md", root_dir=src) if p not in order)
print("\n".join(order))
PY
  (cd "$SRC" && ls examples/*/README.md examples/seeds/*/README.md)
}

# The examples, one record each: page and line, the folder it runs in (run: the folder
# above; NAME: a fresh copy of examples/NAME, whose README walks through it), the command,
# then the expected lines.
pages >"$TMP/pages"
python3 - "$SRC" "$TMP/examples" "$TMP/pages" <<'PY' || bad "the pages' examples could not be read"
import os, sys
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
n = 0
for readme in open(sys.argv[3], encoding="utf-8").read().split():
  # An example's page runs in a fresh copy of its folder; the guides' pages (examples/seeds)
  # name their files from the repository's root, as the run folder holds them.
  where = readme.split("/")[1] if readme.startswith("examples/") and not readme.startswith("examples/seeds/") else "run"
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

# matches EXPECTED ACTUAL: the page's lines against the output, "..." as described above.
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
  if [ "$where" != run ]; then # a fresh copy, as a user's checkout of the example
    dir=$TMP/$where
    rm -rf "$dir" && cp -r "$SRC/examples/$where" "$dir" && rm -f "$dir"/*.trace.json
  fi
  # The example's own words, run by the shell in the example folder (the one that traces
  # runs the tracer at five points: about 40 s alone, minutes on a busy machine).
  (cd "$dir" && PATH="$DATA/bin:$PATH" FAKE_NVML_SCRIPT=$(scenario "${line%%:*}" "${cmd#vramfit }") \
    timeout 180 bash -c "vramfit() { \"\$VRAMFIT\" \"\$@\"; }; $cmd" >"$TMP/actual" 2>&1 </dev/null)
  sed -i -e "s|$RUN|/home/me/run|g" -e "s|$TMP/$where|/home/me/$where|g" "$TMP/actual"
  sed -i -e 's/^\(batch [0-9]*: [a-z]*\( ([^)]*)\)\?\), .* peak, [0-9.]* s$/\1, PEAK peak, TIME s/' \
    -e 's/^\(batch [0-9]*: .*\), [0-9.]* s$/\1, TIME s/' \
    -e 's/^20[0-9][0-9]-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]  /WHEN  /' \
    -e 's/, 20[0-9][0-9]-[01][0-9]-[0-3][0-9]; this estimate/, WHEN; this estimate/' "$TMP/actual" "$TMP/expected"
  # A fresh copy of the configs for the next example that edits them.
  cp "$SRC/tests/data/apply/deepspeed/train.yaml" "$RUN/"
  cp "$SRC/tests/data/apply/deepspeed/configs/ds_zero2.json" "$RUN/configs/"
  rm -f "$RUN"/*.backup* "$RUN"/configs/*.backup*
  if matches "$TMP/expected" "$TMP/actual"; then
    ok
  else
    bad "$line: \$ $cmd: the output differs from the page:"
    diff -u "$TMP/expected" "$TMP/actual" | head -60 >&2
  fi
done
# The pages have dozens of examples with output: finding few means this script lost them.
if [ "$count" -ge 30 ]; then ok; else bad "only $count examples with output found"; fi

finish
