#!/usr/bin/env bash
# Guide 001: an AMP (fp16) bi-encoder, a query tower and a document tower, trained at batch
# 128 on a 24 GB GPU; nvtop showed 79% compute and 14% memory, and the guide answered
# "raise the batch": 512 x 2 for "~18-20 GB". vramfit plans the run from workload.yaml
# (two 6-layer towers, tower.json), and `watch` (on a fake NVML playing the 24 GB GPU at
# 14%, gpu.nvml) says the memory is unused and what the plan recommends instead.
source "$(dirname "$0")/../lib.sh"
FAKE=${FAKE_NVML_LIB:-$ROOT/build/tests/libfake_nvml.so}
[ -f "$FAKE" ] || fail "no fake NVML at $FAKE (build the tests, or set FAKE_NVML_LIB)"
cp "$EXAMPLE"/workload.yaml "$EXAMPLE"/tower.json "$EXAMPLE"/config.yaml "$EXAMPLE"/gpu.nvml \
  "$EXAMPLE"/train.sh "$WORK/"
cd "$WORK" || fail "no scratch folder"

# 1. As trained: batch 128 holds about 14% of the GPU, as nvtop showed.
vf plan --workload workload.yaml --gpu 24GiB --json
check "plan --workload at batch 128 should hold 10-20% of 24 GiB, as nvtop's 14% (exit $rc)" "
assert rc == 0, err.strip()[:200]
s = j['stages'][0]
assert s['batch'] == 128 and s['accumulation'] == 1, (s['batch'], s['accumulation'])
share = s['peak_device_bytes'] / (24 * 2**30)
assert 0.10 <= share <= 0.20, share"

# 2. At the guide's effective batch of 1024: the micro batch the GPU holds, no accumulation
# needed where the guide used 512 x 2.
vf plan --workload workload.yaml --gpu 24GiB --target-effective-batch 1024 --json
check "plan --target-effective-batch 1024 should take a micro batch of at least 512 that fits" "
assert rc == 0, err.strip()[:200]
s = j['stages'][0]
assert s['effective_batch'] == 1024 and s['batch'] >= 512 and s['fits'], (s['batch'], s['accumulation'], s['fits'])
assert s['peak_device_bytes'] <= 0.90 * 24 * 2**30, s['peak_device_bytes']"
planned=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['recommended']['batch'])" "$WORK/out")

# 3. watch the run (the stand-in holds 3.30 GiB after warm-up): the memory headroom line,
# once, with the last plan made for this project.
VRAMFIT_NVML=$FAKE FAKE_NVML_SCRIPT=gpu.nvml timeout 30 "$VRAMFIT" watch --interval 0.05 --warmup 0.3 \
  --window 0.4 --plain --log watch.jsonl -- ./train.sh --batch-size 128 >"$WORK/out" 2>"$WORK/err" </dev/null
rc=$?
check "watch should name the memory headroom (14% of 24 GiB) once, with the plan's batch $planned" "
assert rc == 0, 'exit %d: %s' % (rc, err[-200:])
lines = [l for l in out.splitlines() if 'memory headroom' in l]
assert len(lines) == 1, lines
l = lines[0]
assert 'held at most 3.30 GiB (14% of 24.00 GiB)' in l, l
assert 'the batch could grow at least 6.5x' in l, l
assert 'the last plan made for this project' in l and 'recommends batch $planned ' in l, l"
check "watch's log should carry the memory headroom warning" "
rows = [json.loads(l) for l in open('watch.jsonl')]
assert sum('memory headroom' in w for r in rows for w in r['warnings']) == 1, rows[-1]"

pass "batch 128 holds 14% of 24 GiB; watch names the headroom and the plan's batch $planned"
