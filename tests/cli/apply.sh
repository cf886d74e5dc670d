#!/usr/bin/env bash
# Golden tests for `vramfit apply` on real-looking configs of each ecosystem.
# Each tests/data/apply/CASE/ holds the input files, `args` (the command line after
# `apply`), expected/ (every input file as it must be afterwards, byte for byte) and
# stdout.expected (the diff), and stderr.expected (the notes a dry run prints) where the
# case has notes to check. A case passes when the edited files equal expected/, each
# changed file's backup equals its input, unchanged files get no backup, a second run
# changes nothing, and --dry-run prints the same diff and writes nothing.
set -u
VRAMFIT=${VRAMFIT:?set VRAMFIT to the vramfit binary}
SRC=${VF_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TMP=${VF_TEST_TMP:-/tmp/vramfit-test}/apply-golden
pass=0
fail=0

check() { # check NAME COMMAND...: one assertion
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else echo "FAIL: $name"; fail=$((fail + 1)); fi
}

# copy CASE_DIR WORK: the case's input files only
copy_inputs() {
  rm -rf "$2" && mkdir -p "$2"
  (cd "$1" && find . -type f ! -name args ! -name '*.expected' ! -path './expected/*') |
    while read -r f; do mkdir -p "$2/$(dirname "$f")" && cp -p "$1/$f" "$2/$f"; done
}

run_apply() { # run_apply WORK ARGS OUT: exit status of vramfit apply ARGS in WORK
  (cd "$1" && eval "\"$VRAMFIT\" apply $2" >"$3.stdout" 2>"$3.stderr")
}

files_match() { # every expected file equals the result; backups hold the inputs
  local case_dir=$1 work=$2 f
  while read -r f; do
    cmp -s "$case_dir/expected/$f" "$work/$f" || { echo "  $f differs from expected"; return 1; }
    if cmp -s "$case_dir/$f" "$case_dir/expected/$f"; then
      [ ! -e "$work/$f.backup" ] || { echo "  $f unchanged but backed up"; return 1; }
    else
      cmp -s "$case_dir/$f" "$work/$f.backup" || { echo "  $f.backup is not the input"; return 1; }
    fi
  done < <(cd "$case_dir/expected" && find . -type f | sed 's|^\./||')
}

no_new_backups() { ! find "$1" -name '*.backup.1' | grep -q .; }

same_tree_as_input() { # nothing written: the inputs are untouched and no backup exists
  local case_dir=$1 work=$2 f
  while read -r f; do cmp -s "$case_dir/$f" "$work/$f" || return 1; done \
    < <(cd "$case_dir/expected" && find . -type f | sed 's|^\./||')
  ! find "$work" -name '*.backup*' | grep -q .
}

mkdir -p "$TMP"
for case_dir in "$SRC"/tests/data/apply/*/; do
  case_dir=${case_dir%/}
  name=$(basename "$case_dir")
  args=$(cat "$case_dir/args")
  work=$TMP/$name
  out=$TMP/$name

  copy_inputs "$case_dir" "$work"
  run_apply "$work" "$args" "$out"
  rc=$?
  check "$name: exit 0 (got $rc: $(head -c 300 "$out.stderr"))" test $rc -eq 0
  check "$name: files as expected" files_match "$case_dir" "$work"
  check "$name: diff on stdout" cmp -s "$case_dir/stdout.expected" "$out.stdout"

  run_apply "$work" "$args" "$out.again"
  check "$name: second run exits 0" test $? -eq 0
  check "$name: second run changes nothing" files_match "$case_dir" "$work"
  check "$name: second run prints no diff" test ! -s "$out.again.stdout"
  check "$name: second run makes no backup" no_new_backups "$work"

  copy_inputs "$case_dir" "$work"
  run_apply "$work" "$args --dry-run" "$out.dry"
  check "$name: dry run exits 0" test $? -eq 0
  check "$name: dry run prints the diff" cmp -s "$case_dir/stdout.expected" "$out.dry.stdout"
  check "$name: dry run writes nothing" same_tree_as_input "$case_dir" "$work"
  if [ -f "$case_dir/stderr.expected" ]; then
    check "$name: notes on stderr" cmp -s "$case_dir/stderr.expected" "$out.dry.stderr"
  fi
done

# Numbers must read back as numbers in PyYAML, the strictest loader (1e-5 is a string there).
# PyYAML is a test prerequisite (python3-yaml in the Makefile's APT_PACKAGES): missing, it fails.
check "PyYAML is installed (python3-yaml)" python3 -c 'import yaml'
if python3 -c 'import yaml' 2>/dev/null; then
  check "trl_yaml: learning_rate is a float for PyYAML" python3 -c '
import sys, yaml
v = yaml.safe_load(open(sys.argv[1]))["learning_rate"]
sys.exit(0 if isinstance(v, float) and v == 1e-5 else 1)' "$SRC/tests/data/apply/trl_yaml/expected/sft.yaml"
  check "crlf_bom_anchors: PyYAML sees only the edited values change" python3 -c '
import sys, yaml
old = yaml.safe_load(open(sys.argv[1], encoding="utf-8-sig"))
new = yaml.safe_load(open(sys.argv[2], encoding="utf-8-sig"))
old["eval"]["batch_size"] = 32                               # its alias set: &bs keeps 8 in train
old["defaults"]["lr"] = old["train"]["lr"] = 0.0005          # merged through <<
old["train"]["note"] = "déjà lu"
old["train"]["tags"][1] = "printemps"
old["eval"]["flags"]["seq"] = 256
sys.exit(0 if old == new else 1)' "$SRC/tests/data/apply/crlf_bom_anchors/run.yaml" \
    "$SRC/tests/data/apply/crlf_bom_anchors/expected/run.yaml"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
