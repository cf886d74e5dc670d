# Shared by the CLI test scripts (tests/cli/*.sh): sourced after setting NAME.
#
# Provides: $VRAMFIT, $SRC, $GOLDEN, $TMP (removed on exit), counters and the checks
# run, golden, fails, succeeds, exits; `finish` prints 'N passed, N failed' and sets the
# exit status (a script that ran no check fails: a test that cannot fail is a defect). UPDATE_GOLDEN=1 rewrites golden files from the current output instead of
# comparing (look at git diff tests/data/golden before committing).
set -u

VRAMFIT=${VRAMFIT:?set VRAMFIT to the vramfit binary}
SRC=${VF_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}
GOLDEN=$SRC/tests/data/golden
TMP=${VF_TEST_TMP:-/tmp}/${NAME:-cli}.$$
rm -rf "$TMP" && mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
# The run history of probe, watch and plan goes to the test's own folder, never the user's.
export XDG_STATE_HOME=$TMP/state
# Goldens are of the embedded data, uncoloured.
unset VRAMFIT_DATA_DIR
# Hub ids are looked up in the test's own Hub cache (none, unless a test makes one), never
# in the user's.
export HF_HUB_CACHE=$TMP/hub-cache
unset HF_HOME
export NO_COLOR=1

passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}

# run ARGS...: runs vramfit, leaving stdout in $TMP/out, stderr in $TMP/err, exit code in $rc.
run() {
  "$VRAMFIT" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
}

# exits CODE ARGS...: exit CODE and nothing on stderr; stdout is left in $TMP/out.
exits() {
  local want=$1
  shift
  run "$@"
  if [ "$rc" -ne "$want" ]; then
    bad "vramfit $*: exit $rc, want $want ($(head -c 300 "$TMP/err"))"
  elif [ -s "$TMP/err" ]; then
    bad "vramfit $*: unexpected stderr: $(head -c 300 "$TMP/err")"
  else
    ok
  fi
}

# golden NAME ARGS...: stdout must equal tests/data/golden/NAME byte for byte, exit 0 (or
# $GOLDEN_EXIT: `GOLDEN_EXIT=1 golden ...` for a "no" answer), nothing on stderr.
golden() {
  local name=$1
  shift
  run "$@"
  if [ "${UPDATE_GOLDEN:-}" = 1 ]; then
    mkdir -p "$GOLDEN"
    cp "$TMP/out" "$GOLDEN/$name"
    echo "updated $GOLDEN/$name"
  fi
  if [ "$rc" -ne "${GOLDEN_EXIT:-0}" ]; then
    bad "vramfit $*: exit $rc, want ${GOLDEN_EXIT:-0} ($(head -c 300 "$TMP/err"))"
  elif [ -s "$TMP/err" ]; then
    bad "vramfit $*: unexpected stderr: $(head -c 300 "$TMP/err")"
  elif ! cmp -s "$TMP/out" "$GOLDEN/$name"; then
    bad "vramfit $*: output differs from golden/$name:"
    diff -u "$GOLDEN/$name" "$TMP/out" | head -40 >&2
  else
    ok
  fi
}

# fails CODE PATTERN ARGS...: exit CODE, nothing on stdout, exactly one line on stderr
# matching the extended regex PATTERN.
fails() {
  local want=$1 pattern=$2
  shift 2
  run "$@"
  local lines
  lines=$(wc -l <"$TMP/err")
  if [ "$rc" -ne "$want" ]; then
    bad "vramfit $*: exit $rc, want $want ($(head -c 300 "$TMP/err"))"
  elif [ -s "$TMP/out" ]; then
    bad "vramfit $*: unexpected stdout: $(head -c 300 "$TMP/out")"
  elif [ "$lines" -ne 1 ]; then
    bad "vramfit $*: $lines lines on stderr, want 1:"
    cat "$TMP/err" >&2
  elif ! grep -Eq -- "$pattern" "$TMP/err"; then
    bad "vramfit $*: stderr '$(cat "$TMP/err")' does not match '$pattern'"
  else
    ok
  fi
}

# succeeds PATTERN ARGS...: exit 0, stdout matches PATTERN, nothing on stderr.
succeeds() {
  local pattern=$1
  shift
  run "$@"
  if [ "$rc" -ne 0 ]; then
    bad "vramfit $*: exit $rc, want 0 ($(head -c 300 "$TMP/err"))"
  elif [ -s "$TMP/err" ]; then
    bad "vramfit $*: unexpected stderr: $(head -c 300 "$TMP/err")"
  elif ! grep -Eq -- "$pattern" "$TMP/out"; then
    bad "vramfit $*: stdout does not match '$pattern': $(head -c 300 "$TMP/out")"
  else
    ok
  fi
}

finish() {
  echo "$passed passed, $failed failed"
  [ $((passed + failed)) -gt 0 ] || { echo "FAIL: no check ran" >&2; return 1; }
  [ "$failed" -eq 0 ]
}
