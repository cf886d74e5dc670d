#!/usr/bin/env bash
# vramfit probe against a fake trainer (a shell script: batch <= $T fits, above it prints
# PyTorch's out-of-memory report and exits 1): the batch found, the launches spent, {batch}
# and VRAMFIT_BATCH, timeouts (SIGTERM, and SIGKILL for a trainer that ignores it), a
# non-OOM failure with its stderr tail, no fit, a missing command, bad flags, and the peak
# read from the fake NVML.
NAME=probe
source "$(dirname "$0")/lib/harness.sh"
export VRAMFIT_NVML=/nonexistent/libnvidia-ml.so.1 # peaks unknown unless a test says so

TRAINER=$TMP/train.sh
cat >"$TRAINER" <<'EOF'
#!/bin/sh
# train.sh --batch-size=N: the batch comes as an argument and in VRAMFIT_BATCH.
b=${1#--batch-size=}
echo "$b $VRAMFIT_BATCH" >>"$LAUNCHES"
[ "$b" = "$VRAMFIT_BATCH" ] || { echo "argument $b, VRAMFIT_BATCH $VRAMFIT_BATCH" >&2; exit 9; }
case "${MODE:-}" in
error) if [ "$b" -gt 4 ]; then
         echo "Traceback (most recent call last):" >&2
         echo "ValueError: sequence length 4096 exceeds max_position_embeddings" >&2
         exit 3
       fi ;;
slow) [ "$b" = 8 ] && exec sleep 5 ;;
stubborn) [ "$b" = 8 ] && { trap '' TERM; exec sleep 5; } ;;
esac
if [ "$b" -gt "$T" ]; then
  echo "Traceback (most recent call last):" >&2
  echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use." >&2
  exit 1
fi
echo "step 1 loss 2.31"
EOF
chmod +x "$TRAINER"
export LAUNCHES=$TMP/launches

# probe_with T ARGS...: runs vramfit probe with the fake trainer's threshold at T.
probe_with() {
  local t=$1
  shift
  : >"$LAUNCHES"
  T=$t timeout 30 "$VRAMFIT" probe "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
}

check() { # check WHAT CODE: python CODE with j = the JSON output must print ok
  local why
  why=$(python3 -c "import json, sys
j = json.load(open(sys.argv[1]))
launched = [l.split() for l in open(sys.argv[2]).read().splitlines()]
$2" "$TMP/out" "$LAUNCHES" 2>&1)
  if [ "$why" = ok ]; then ok; else bad "$1: $why ($(head -c 300 "$TMP/err"))"; fi
}

# ---- the search finds the threshold: doubling to 64, then bisecting to 37 --------------------
probe_with 37 --json -- "$TRAINER" --batch-size={batch}
if [ "$rc" = 0 ]; then ok; else bad "probe T=37: exit $rc: $(cat "$TMP/err")"; fi
check "T=37 json" "
assert j['max_batch'] == 37, j['max_batch']
assert j['launches'] == 12 == len(j['trials']), j['launches']
assert [t['batch'] for t in j['trials']] == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
for t in j['trials']:
    assert set(t) >= {'batch', 'outcome', 'peak_device_bytes'}, t
    assert t['outcome'] == ('ok' if t['batch'] <= 37 else 'oom'), t
    assert t['peak_device_bytes'] == 0, t
assert [l[0] for l in launched] == [str(t['batch']) for t in j['trials']], launched
assert all(a == b for a, b in launched), launched
print('ok')"

probe_with 5 -- "$TRAINER" --batch-size={batch}
if [ "$rc" = 0 ]; then ok; else bad "probe text: exit $rc"; fi
grep -qx "largest batch that fits: 5 (6 launches)" "$TMP/out" && ok || bad "text result: $(cat "$TMP/out")"
grep -qx "batch 8: oom (PyTorch), [0-9.]* s" "$TMP/out" && ok || bad "text trial: $(cat "$TMP/out")"

# --min and --max bound every launch; a fit at --max ends the search.
probe_with 37 --min 3 --max 20 --json -- "$TRAINER" --batch-size={batch}
check "min/max" "
assert j['max_batch'] == 20 and [t['batch'] for t in j['trials']] == [3, 6, 12, 20], j
print('ok')"

# ---- from the estimate: its largest fitting batch first, then a few launches ------------------
SETUP=(--model gpt2 --seq 1024 --amp bf16)
probe_with 1 "${SETUP[@]}" --gpu 24GiB --json -- "$TRAINER" --batch-size={batch}
est=$(python3 -c "import json; print(json.load(open('$TMP/out'))['estimate_batch'])")
# The probe starts from the estimate itself (not the high end of its range).
device() { grep -o '"device_bytes": [0-9]*' "$TMP/out" | grep -o '[0-9]*$'; }
run estimate gpt2 --seq 1024 --amp bf16 --gpu 24GiB --batch "$est" --json
at=$(device)
run estimate gpt2 --seq 1024 --amp bf16 --gpu 24GiB --batch $((est + 1)) --json
above=$(device)
cap=$((24 * 1024 * 1024 * 1024))
if [ "$at" -le "$cap" ] && [ "$above" -gt "$cap" ]; then ok; else bad "estimate_batch $est is not the estimate's largest fit"; fi
# The real limit one above the estimate: a few launches (the estimate, then steps of an
# eighth of it, growing, and a bisection), where doubling from 1 takes more.
probe_with $((est + 1)) "${SETUP[@]}" --gpu 24GiB --json -- "$TRAINER" --batch-size={batch}
from_estimate=$(python3 -c "import json; print(json.load(open('$TMP/out'))['launches'])")
check "from the estimate" "
assert j['max_batch'] == $est + 1 and j['trials'][0]['batch'] == $est, j
assert j['launches'] <= 4, j['launches']
print('ok')"
probe_with $((est + 1)) --json -- "$TRAINER" --batch-size={batch}
check "without the estimate" "
assert j['max_batch'] == $est + 1 and j['estimate_batch'] is None and j['launches'] > $from_estimate, j
print('ok')"
probe_with 4 "${SETUP[@]}" --gpu 24GiB -- "$TRAINER" --batch-size={batch}
grep -qx "starting at batch $est, the estimate's largest on 24GiB (24.00 GiB)" "$TMP/out" && ok ||
  bad "start line: $(head -1 "$TMP/out")"
fails 2 "model 'no-such-model'|no-such-model" probe --model no-such-model --gpu 24GiB -- true

# ---- timeouts count as fitting ----------------------------------------------------------------
MODE=slow probe_with 37 --timeout 0.3 --json -- "$TRAINER" --batch-size={batch}
check "timeout" "
t8 = [t for t in j['trials'] if t['batch'] == 8][0]
assert t8['outcome'] == 'timeout' and t8['seconds'] < 2, t8
assert j['max_batch'] == 37, j
print('ok')"
# A trainer that ignores SIGTERM gets SIGKILL a second later.
MODE=stubborn probe_with 8 --timeout 0.2 --min 8 --max 8 --json -- "$TRAINER" --batch-size={batch}
check "SIGKILL after the grace period" "
t = j['trials'][0]
assert t['outcome'] == 'timeout' and 1.0 <= t['seconds'] < 3, t
print('ok')"

# ---- failures ---------------------------------------------------------------------------------
# Not out of memory: exit 2, one line naming the batch and status, then the stderr tail.
MODE=error probe_with 37 -- "$TRAINER" --batch-size={batch}
if [ "$rc" = 2 ]; then ok; else bad "non-OOM failure: exit $rc, want 2"; fi
head -1 "$TMP/err" | grep -q "^vramfit probe: batch 8 failed with exit status 3 and no out-of-memory report" &&
  ok || bad "failure line: $(cat "$TMP/err")"
grep -q "ValueError: sequence length 4096" "$TMP/err" && ok || bad "stderr tail: $(cat "$TMP/err")"
MODE=error probe_with 37 --json -- "$TRAINER" --batch-size={batch}
check "failure json" "
assert j['trials'][-1]['outcome'] == 'error' and j['trials'][-1]['batch'] == 8, j
print('ok')"

# Not even --min fits: exit 1.
probe_with 2 --min 3 --json -- "$TRAINER" --batch-size={batch}
if [ "$rc" = 1 ]; then ok; else bad "no fit: exit $rc, want 1"; fi
check "no fit" "
assert j['max_batch'] == 0 and j['launches'] == 1 and j['trials'][0]['outcome'] == 'oom', j
print('ok')"

fails 3 "command not found: no-such-trainer" probe -- no-such-trainer --batch {batch}

# ---- flags ------------------------------------------------------------------------------------
succeeds "^usage: vramfit probe" probe --help
fails 2 "unknown option '--bogus'" probe --bogus -- true
fails 2 "--min needs a value" probe --min
fails 2 "--min expects a whole number" probe --min x -- true
fails 2 "--timeout expects seconds" probe --timeout 0 -- true
fails 2 "--grace expects seconds from 0, got '-1'" probe --grace -1 -- true
fails 2 "--min must be at least 1" probe --min 0 -- true
fails 2 "--min must be at least 1 and at most --max" probe --min 9 --max 8 -- true
fails 2 "put the command after '--'" probe true
fails 2 "no command after '--'" probe --
fails 2 "no command" probe
fails 2 "--batch is what probe finds" probe --model gpt2 --batch 4 -- true
fails 2 "--seq is an estimate option: it needs --model" probe --seq=512 -- true
fails 2 "--method: 'x' is not one of" probe --model gpt2 --method x -- true

# ---- the advice: the boundary, the batch under the margin, the accumulation --------------------
# Without peaks the batch under the margin is the boundary divided by 1 + margin.
probe_with 37 --json -- "$TRAINER" --batch-size={batch}
check "advice without peaks" "
r = j['recommended']
assert (r['batch'], r['accumulation'], r['effective_batch']) == (33, 1, 33), r   # 37 / 1.1
assert (r['margin'], r['margin_source'], r['peak_device_bytes']) == (0.1, 'default', 0), r
assert j['warnings'] == [], j['warnings']
print('ok')"
probe_with 37 --margin 0.25 --target-effective-batch 256 --json -- "$TRAINER" --batch-size={batch}
check "advice with a margin and a target" "
r = j['recommended']
# 37 / 1.25 = 29; 256 takes 9 micro batches of 29, and 29 of them 9 reach 256 too.
assert (r['batch'], r['accumulation'], r['effective_batch']) == (29, 9, 261), r
assert (r['margin'], r['margin_source']) == (0.25, 'option'), r
print('ok')"
probe_with 37 --target-effective-batch 64 -- "$TRAINER" --batch-size={batch}
grep -qx "recommended: batch 32, accumulation 2 (effective batch 64 for --target-effective-batch 64): the largest fit less a 10% margin (the default); no peaks were measured" \
  "$TMP/out" && ok || bad "advice line: $(cat "$TMP/out")"
# With --model, the estimate's range is the margin.
probe_with 37 "${SETUP[@]}" --gpu 24GiB --json -- "$TRAINER" --batch-size={batch}
check "margin from the estimate's range" "
r = j['recommended']
assert r['margin_source'] == 'estimate' and 0.01 <= r['margin'] < 0.5, r
assert r['batch'] == int(37 / (1 + r['margin'])), r
print('ok')"
# The answer at --max: a larger batch may fit.
probe_with 37 --max 20 -- "$TRAINER" --batch-size={batch}
grep -q "^vramfit probe: warning: batch 20, the --max, fits: a larger batch may fit too; raise --max" "$TMP/err" &&
  ok || bad "--max warning: $(cat "$TMP/err")"
fails 2 "--margin expects a share of the peak from 0 to below 1" probe --margin 1 -- true
fails 2 "--margin expects a share of the peak" probe --margin 10% -- true
fails 2 "--target-effective-batch expects at least 1" probe --target-effective-batch 0 -- true
fails 2 "--target-effective-batch expects a whole number" probe --target-effective-batch x -- true

# ---- the peak, from the fake NVML -------------------------------------------------------------
FAKE=${FAKE_NVML_LIB:-${VF_BUILD_DIR:-}/tests/libfake_nvml.so}
if [ -f "$FAKE" ]; then
  cat >"$TMP/gpu.nvml" <<'EOF'
gpu index=0 name="NVIDIA H100 80GB HBM3" uuid=GPU-a total=80GiB
proc gpu=0 pid=1 used=5GiB
proc gpu=0 pid=child used=3GiB
EOF
  VRAMFIT_NVML=$FAKE FAKE_NVML_SCRIPT=$TMP/gpu.nvml probe_with 4 --max 4 --json -- "$TRAINER" --batch-size={batch}
  check "peak from NVML" "
assert [t['peak_device_bytes'] for t in j['trials']] == [3 * 2**30] * 2, j['trials']
print('ok')"
  # Without --gpu the estimate is fitted to the GPU NVML finds.
  VRAMFIT_NVML=$FAKE FAKE_NVML_SCRIPT=$TMP/gpu.nvml probe_with 4 "${SETUP[@]}" -- "$TRAINER" --batch-size={batch}
  has_start=$(head -1 "$TMP/out")
  case $has_start in
  "starting at batch "*", the estimate's largest on NVIDIA H100 80GB HBM3 ("*) ok ;;
  *) bad "--gpu auto start: $has_start $(cat "$TMP/err")" ;;
  esac

  # Peaks that grow (3000 + 700 x batch MiB on 24 GiB): the boundary is 30, and the batch
  # under a 10% margin the largest whose peak x 1.1 stays under 24 GiB: 27.
  export VRAMFIT_NVML=$FAKE FIXED=3000 PER=700
  source "$(dirname "$0")/lib/trainer.sh"
  trainer "$TMP" 24
  timeout 60 "$VRAMFIT" probe --json -- "$TMP/train.sh" {batch} >"$TMP/out" 2>"$TMP/err" </dev/null
  check "advice by the peaks" "
r = j['recommended']
assert j['max_batch'] == 30, j['max_batch']
assert (r['batch'], r['accumulation']) == (27, 1), r
assert abs(r['peak_device_bytes'] - (3000 + 700 * 27) * 2**20) < 2**20, r
print('ok')"
  timeout 60 "$VRAMFIT" probe --margin 0.2 --target-effective-batch 256 -- "$TMP/train.sh" {batch} \
    >"$TMP/out" 2>"$TMP/err" </dev/null
  # (3000 + 700 b) x 1.2 <= 24576 MiB: 24; 256 in 11 micro batches of 24, or of 24 again.
  grep -qx "recommended: batch 24, accumulation 11 (effective batch 264 for --target-effective-batch 256): peak 19.34 GiB, under the 24.00 GiB a launch can hold with a 20% margin (--margin)" \
    "$TMP/out" && ok || bad "advice line by the peaks: $(cat "$TMP/out")"
  # A command that ignores the batch: the peaks stay where they are, and probe says so
  # (before, it answered 4096 without a word).
  PER=0 timeout 60 "$VRAMFIT" probe -- "$TMP/train.sh" >"$TMP/out" 2>"$TMP/err" </dev/null
  grep -qx "largest batch that fits: 4096 ([0-9]* launches)" "$TMP/out" && ok || bad "ignored batch: $(cat "$TMP/out")"
  grep -q "^vramfit probe: warning: the peaks did not grow with the batch (2.93 GiB at batch 1, 2.93 GiB at batch 4096): the command seems to ignore the batch it is given" \
    "$TMP/err" && ok || bad "flat peaks warning: $(cat "$TMP/err")"
  grep -q "warning: batch 4096, the --max, fits" "$TMP/err" && ok || bad "--max warning, flat: $(cat "$TMP/err")"
  PER=0 timeout 60 "$VRAMFIT" probe --json -- "$TMP/train.sh" >"$TMP/out" 2>/dev/null </dev/null
  check "warnings in --json" "
assert len(j['warnings']) == 2 and 'did not grow' in j['warnings'][0], j['warnings']
print('ok')"
fi

finish
