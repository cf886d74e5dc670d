#!/usr/bin/env bash
# Guide 004: "Memory (GB) = params x 16 / 1e9 + activations", activations = batch x seq x
# hidden x layers x 4 x 2 bytes in fp32; then a binary search for the largest batch and
# "use 90% of the max". Here on gpt2-large (774M parameters, the guide's "Large" row) at
# 8 x 512 tokens in fp32 with AdamW on a 24 GB GPU, against vramfit's estimate, plan and
# probe (on a stand-in training script and a fake NVML: no GPU needed).
source "$(dirname "$0")/../lib.sh"
FAKE=${FAKE_NVML_LIB:-$ROOT/build/tests/libfake_nvml.so}
[ -f "$FAKE" ] || fail "no fake NVML at $FAKE (build the tests, or set FAKE_NVML_LIB)"

# 1. The formula says 13.9 GB: it fits 24 GB. vramfit's estimate says it does not.
vf estimate gpt2-large --batch 8 --seq 512 --gpu 24GiB --json
check "estimate gpt2-large 8 x 512 fp32 should not fit 24 GiB, far above the guide's formula" "
p = j['model']['params']
guide = (p * 16 + 8 * 512 * 1280 * 36 * 4 * 2) / 1e9
assert 13.5 < guide < 14.5, guide
assert guide < 24, guide
assert rc == 1 and j['fits'] is False, (rc, j['fits'])
peak = j['peak']['device_bytes'] / 1e9
assert peak > 2 * guide, (peak, guide)
b = j['breakdown']
assert (b['activations'] + b['temporaries']) / 1e9 > 10 * (8 * 512 * 1280 * 36 * 8) / 1e9, b"

# 2. What would fit: the plan changes what leaves the model as it is.
vf plan gpt2-large --batch 8 --seq 512 --gpu 24GiB --json
check "plan gpt2-large 8 x 512 on 24 GiB finds no setting at batch 8 and seq 512" "
assert rc == 0, 'exit %d' % rc
r = j['recommended']
assert (r['seq'], r['method'], r['effective_batch']) == (512, 'full', 8), r
assert r['peak_device_range']['high'] <= 0.90 * 24 * 2**30, r['peak_device_range']"

# 3. The binary search, as probe: the stand-in fits 29 samples (9 GiB + 0.5 GiB each).
cp "$EXAMPLE/train.sh" "$EXAMPLE/gpu.nvml" "$WORK/"
probe() {
  (cd "$WORK" && VRAMFIT_NVML=$FAKE FAKE_NVML_SCRIPT=gpu.nvml timeout 120 "$VRAMFIT" probe "$@" \
    >"$WORK/out" 2>"$WORK/err" </dev/null)
  rc=$?
}
probe --max 512 --margin 0.10 --target-effective-batch 64 --json -- ./train.sh --batch {batch}
check "probe should find 29 in fewer launches than the guide's 9, and recommend under a 10% margin of the peak" "
assert rc == 0, 'exit %d: %s' % (rc, err[-200:])
assert j['max_batch'] == 29, j['max_batch']
assert j['launches'] < 9, j['launches']
r = j['recommended']
guide = int(29 * 0.9)
assert guide == 26 and (9 + 0.5 * guide) * 1.10 > 23.65, 'the guide keeps 10%'
assert (9 + 0.5 * r['batch']) * (1 + r['margin']) <= 23.65, r
assert r['margin'] == 0.10 and r['margin_source'] == 'option', r
assert r['batch'] * r['accumulation'] >= 64 and (r['batch'] - 1) * r['accumulation'] < 64, r
assert not j['warnings'], j['warnings']"

# 4. A command that ignores {batch}: the guide's search would answer its max; probe warns.
probe --max 512 --json -- ./train.sh
check "probe of a command that ignores {batch} should warn that peaks do not grow and that --max fits" "
assert rc == 0, 'exit %d' % rc
assert j['max_batch'] == 512, j['max_batch']
w = ' '.join(j['warnings'])
assert 'did not grow with the batch' in w and 'the --max, fits' in w, w"

pass "the formula is under half of vramfit's peak; probe finds the boundary in fewer launches and keeps the margin on the peak"
