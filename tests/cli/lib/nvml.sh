# Shared by the tests that run vramfit against the fake NVML (gpus.sh, watch.sh,
# doctor.sh); sourced after lib/harness.sh.
#
# Provides: $FAKE (the fake library, also in VRAMFIT_NVML), `under` to run vramfit with a
# fake script, and checks on what the last run left: expect, has, hasnt, pycheck.
FAKE=${FAKE_NVML_LIB:?set FAKE_NVML_LIB to the fake NVML library (tests/fake_nvml)}
export VRAMFIT_NVML=$FAKE
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER

# under SCRIPT ARGS...: vramfit with the fake NVML playing SCRIPT, no stdin, at most 20 s,
# so that a hang fails instead of blocking; $TMP/out, $TMP/err and $rc as `run` leaves them.
under() {
  local script=$1
  shift
  FAKE_NVML_SCRIPT=$script timeout 20 "$VRAMFIT" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
}

# expect CODE WHAT: the last run exited with CODE.
expect() {
  if [ "$rc" = "$1" ]; then ok; else bad "$2: exit $rc, want $1 ($(head -c 300 "$TMP/err"))"; fi
}

# has TEXT WHAT [FILE]: FILE (default: the last stdout) holds TEXT; hasnt: it does not.
has() {
  local file=${3:-$TMP/out}
  if grep -qF -- "$1" "$file"; then ok; else bad "$2: '$1' not in: $(head -c 800 "$file")"; fi
}
hasnt() {
  local file=${3:-$TMP/out}
  if grep -qF -- "$1" "$file"; then bad "$2: '$1' in: $(head -c 800 "$file")"; else ok; fi
}

# pycheck WHAT FILE CODE: Python CODE runs with `j`, FILE parsed as JSON (a list of rows for
# a .jsonl file), and must print ok.
pycheck() {
  local why
  why=$(python3 -c "import json, sys
t = open(sys.argv[1]).read()
j = [json.loads(l) for l in t.splitlines()] if sys.argv[1].endswith('.jsonl') else json.loads(t)
$3" "$2" 2>&1)
  if [ "$why" = ok ]; then ok; else bad "$1: $why"; fi
}
