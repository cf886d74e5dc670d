#!/usr/bin/env bash
# Guide 003: Qwen2.5-7B, LoRA r128 on every linear layer, 2 x 2,048 tokens, accumulation 8,
# checkpointed, on 24 GiB. Its authors kept the model (rank and method) and set
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, but cut seq 2,048 -> 1,536. vramfit,
# held to the same model and to seq 2,048, must find a setting that fits with the allocator
# setting chosen and stated.
source "$(dirname "$0")/../lib.sh"

GUIDE=(qwen2.5-7b --weights bf16 --method lora --lora-r 128 --lora-targets all-linear --batch 2
  --accumulation 8 --seq 2048 --grad-ckpt full --gpu 24GiB)

# The given setting does not fit: the guide's out-of-memory error.
vf estimate "${GUIDE[@]}" --json
check "the guide's setting (seq 2048, batch 2) should not fit 24 GiB" "
assert rc == 1, 'exit %d' % rc
assert j['fits'] is False, j['fits']"

# The plan keeps the model and seq 2048, and states the allocator setting it chose.
vf plan "${GUIDE[@]}" --keep capacity,seq --json
check "plan --keep capacity,seq: no tier fits at seq 2048 (exit $rc)" "
assert rc == 0, 'exit %d: %s' % (rc, err.strip()[:120])
r = j['recommended']
assert r is not None, 'nothing recommended'"
check "plan --keep capacity,seq: the recommended setting changes the model or seq" "
r = j['recommended']
assert (r['seq'], r['method'], r['lora_r'], r['quant']) == (2048, 'lora', 128, 'none'), r
assert r['effective_batch'] == 16, r['effective_batch']"
check "plan --keep capacity,seq: the allocator setting (alloc_conf expandable_segments) is not chosen" "
assert 'expandable_segments:True' in (j['recommended'].get('alloc_conf') or ''), j['recommended'].get('alloc_conf')"
check "plan --keep capacity,seq: the recommended peak's high end is over 90% of 24 GiB" "
r = j['recommended']
assert r['peak_device_range']['high'] <= 0.90 * 24 * 2**30, r['peak_device_range']"

# The text output states it too, as the line under the tier.
vf plan "${GUIDE[@]}" --keep capacity,seq
check "plan's text does not state PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" "
assert 'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True' in out, out[-400:]"

pass "seq 2048 fits 24 GiB with expandable segments, rank 128 and the method kept"
