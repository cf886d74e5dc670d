# Shared by the guides' run.sh: sourced, never run. Sets ROOT (the repository), VRAMFIT (an
# absolute path: $VRAMFIT as given, else build/vramfit of the repository), WORK (a scratch
# folder removed on exit, which also holds the run history of these commands, never the
# user's), and the checks: `vf ARGS` runs vramfit into $WORK/out, $WORK/err and $rc;
# `fail WHY` ends the example with one line and exit 1; `check WHY PYTHON` runs PYTHON with
# `j` the JSON of the last output (and `out`, its text) and fails with WHY unless it holds.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
EXAMPLE=$(cd "$(dirname "$0")" && pwd)
VRAMFIT=${VRAMFIT:-build/vramfit}
case $VRAMFIT in
/*) ;;
*) if [ -x "$VRAMFIT" ]; then VRAMFIT=$PWD/$VRAMFIT; else VRAMFIT=$ROOT/$VRAMFIT; fi ;;
esac
SEED=$(basename "$EXAMPLE")

fail() {
  echo "seeds/$SEED: FAIL: $*" >&2
  exit 1
}

[ -x "$VRAMFIT" ] || fail "no vramfit binary at $VRAMFIT (build it, or set VRAMFIT)"
command -v python3 >/dev/null || fail "python3 is needed to read vramfit's --json"
mkdir -p "${TMPDIR:-/tmp}" && WORK=$(mktemp -d "${TMPDIR:-/tmp}/vramfit-seed-$SEED.XXXXXX") || fail "no scratch folder"
trap 'rm -rf "$WORK"' EXIT
export XDG_STATE_HOME=$WORK/state NO_COLOR=1
unset VRAMFIT_DATA_DIR

vf() {
  "$VRAMFIT" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null
  rc=$?
}

# check WHY CODE: CODE (Python, with j = the last output's JSON or None, out = its text,
# err = its stderr, rc = its exit status) must not raise; else the example fails with WHY.
CHECK_PY='
import json, sys
out, err, rc = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3])
try:
    j = json.loads(out)
except ValueError:
    j = None
try:
    exec(sys.argv[4])
except Exception as e:
    print(("%s: %s" % (type(e).__name__, e)).replace("\n", " ")[:300])
    sys.exit(1)
'
check() {
  local why
  why=$(python3 -c "$CHECK_PY" "$WORK/out" "$WORK/err" "$rc" "$2" 2>&1) || fail "$1${why:+ ($why)}"
}

pass() {
  echo "seeds/$SEED: ok: $*"
  exit 0
}
