#!/usr/bin/env bash
# Guide 002: a custom 512M model (gated sparse attention, its own knobs k_base and k_max) on
# 4 GPUs of 44 GB at a global batch of 256, tuned by hand in three tiers: safe 2 x 32,
# medium 3 x 21 (x 4 GPUs = 252, "close to 256") and aggressive 4 x 16. vramfit plans it
# from workload.yaml (the model in model.json, the guide's config beside it) at its three
# budgets: safe 80%, balanced 90% (the recommendation), aggressive 97% of each GPU.
source "$(dirname "$0")/../lib.sh"
cp "$EXAMPLE"/workload.yaml "$EXAMPLE"/model.json "$EXAMPLE"/pretrain_512m_low_memory.yaml "$WORK/"
cd "$WORK" || fail "no scratch folder"

tier() { # tier SAFETY: the workload's plan on 4 x 44 GiB under that budget, into $WORK/SAFETY.json
  vf plan --workload workload.yaml --gpu 44GiB --gpus 4 --target-effective-batch 256 --safety "$1" --json
  cp "$WORK/out" "$WORK/$1.json"
}

tier 0.90
check "balanced (90%): plan --workload --gpus 4 should fit (exit $rc)" "
assert rc == 0, err.strip()[:200]
assert j['stages'][0]['fits'], j['stages'][0]"
check "balanced (90%): the plan should count the 4 GPUs in the effective batch" "
s = j['stages'][0]
assert s['batch'] * s['accumulation'] * 4 == s['effective_batch'], (s['batch'], s['accumulation'], s['effective_batch'])"
check "balanced (90%): micro batch 3 x accumulation 21 x 4 GPUs = 252 should be the nearest to 256 that fits (as the guide's medium tier)" "
s = j['stages'][0]
assert (s['batch'], s['accumulation'], s['effective_batch']) == (3, 21, 252), (s['batch'], s['accumulation'], s['effective_batch'])
assert s['knobs'] == {'k_base': 512, 'k_max': 1024, 'max_seq_len': 1024}, s['knobs']"

tier 0.80
check "safe (80%): the plan should fit with a micro batch no larger than balanced's (exit $rc)" "
assert rc == 0, err.strip()[:200]
s = j['stages'][0]
assert s['fits'] and s['batch'] <= 3, (s['batch'], s['fits'])
assert abs(s['effective_batch'] - 256) <= 256 * 0.05, s['effective_batch']"

tier 0.97
check "aggressive (97%): the plan should fit with a micro batch at least balanced's (exit $rc)" "
assert rc == 0, err.strip()[:200]
s = j['stages'][0]
assert s['fits'] and s['batch'] >= 3, (s['batch'], s['fits'])
assert abs(s['effective_batch'] - 256) <= 256 * 0.05, s['effective_batch']"

# The knobs are the workload's own: the plan writes them back where the guide's config keeps them.
vf apply pretrain_512m_low_memory.yaml --plan 0.90.json --dry-run
check "apply --plan --dry-run should write micro_batch_size 3 and gradient_accumulation_steps 21" "
assert rc == 0, err.strip()[:200]
assert '+micro_batch_size: 3 ' in out and '+gradient_accumulation_steps: 21 ' in out, out[-500:]"

pass "4 x 44 GiB: balanced plans 3 x 21 x 4 = 252, the guide's medium tier"
