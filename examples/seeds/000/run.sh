#!/usr/bin/env bash
# Guide 000: a contrastive embedder (four LoRA channel encoders, a mixture of experts, a
# curriculum of five stages) tuned by a script of its own for a 24 GB GPU: micro batch 45,
# accumulation 5 (effective 225), stage 01 with 32 positives and 24 negatives, "~19.8 GB
# (83%)". vramfit plans the same run from examples/contrastive-embedder/workload.yaml:
# every stage under the budget at the configs' effective batch of 256, then writes the
# plan into the configs (the guide's --apply).
source "$(dirname "$0")/../lib.sh"
cp -r "$ROOT/examples/contrastive-embedder" "$WORK/embedder"
rm -f "$WORK"/embedder/*.trace.json # planned from its parts, as checked out
WL=$WORK/embedder/workload.yaml

vf plan --workload "$WL" --gpu 24GiB --json
check "plan --workload on 24 GiB should plan every stage (exit $rc)" "
assert rc == 0, err.strip()[:200]
assert [s['name'] for s in j['stages']] == ['01', '02', '03', '04', '05'], j['stages']"
check "every stage should fit 24 GiB at the configs' effective batch of 256" "
for s in j['stages']:
    assert s['fits'] and s['effective_batch'] == 256, (s['name'], s['fits'], s['effective_batch'])
    assert s['peak_device_bytes'] <= s['budget_bytes'] <= 24 * 2**30, s['name']"
check "stage 01 should keep at least 16 positives and 16 negatives, more than stages 02-05" "
k = j['stages'][0]['knobs']
assert k['n_positives'] >= 16 and k['n_negatives'] >= 16, k
assert all(s['knobs']['n_negatives'] <= k['n_negatives'] for s in j['stages'][1:]), j['stages']"
cp "$WORK/out" "$WORK/plan.json"

# The plan into the configs, in place (backups kept), as the guide's script --apply does.
vf apply "$WORK/embedder/conf/config.yaml" "$WORK"/embedder/conf/text_curriculum/*.yaml --plan "$WORK/plan.json"
check "apply --plan should write the micro batch, the accumulation and stage 01's knobs" "
assert rc == 0, err.strip()[:200]
import re
p = json.load(open(sys.argv[1].rsplit('/', 1)[0] + '/plan.json'))
cfg = open(sys.argv[1].rsplit('/', 1)[0] + '/embedder/conf/config.yaml').read()
assert re.search(r'batch_size: %d\b' % p['stages'][0]['batch'], cfg), 'batch_size'
assert re.search(r'accumulate_grad_batches: %d\b' % p['stages'][0]['accumulation'], cfg), 'accumulation'
st = open(sys.argv[1].rsplit('/', 1)[0] + '/embedder/conf/text_curriculum/01_stage.yaml').read()
assert re.search(r'n_negatives: %d\b' % p['stages'][0]['knobs']['n_negatives'], st), 'n_negatives'"

# Planned again, the configs hold the plan.
vf plan --workload "$WL" --gpu 24GiB
check "a second plan should find the configs hold it already" "
assert rc == 0 and 'the configs hold this plan already' in out, out[-300:]"

pass "every stage fits 24 GiB at effective batch 256; the plan is in the configs"
