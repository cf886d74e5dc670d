#!/usr/bin/env bash
# vramfit estimate: golden output of the demo scenario, the contract's JSON, each peak's
# range, the fit verdict (on the high end) and its exit codes, and one-line errors for
# impossible setups, bad flags and a bad uncertainty file.
NAME=estimate
source "$(dirname "$0")/lib/harness.sh"

DEMO=(estimate qwen2.5-7b --weights bf16 --method lora --lora-r 128 --lora-targets all-linear
      --batch 1 --seq 1536 --grad-ckpt full --gpu 24GiB)

# ---- golden output -------------------------------------------------------------------------
# The demo's LoRA fine-tune does not fit 24 GiB at the high end of its range: exit 1.
GOLDEN_EXIT=1 golden estimate-demo.txt "${DEMO[@]}"
GOLDEN_EXIT=1 golden estimate-demo.json "${DEMO[@]}" --json

# ---- the contract's JSON -------------------------------------------------------------------
# Every field the contract names is there, and the breakdown sums to device_bytes.
run estimate llama-3.1-8b --weights bf16 --method lora --gpu a100-40gb --json
json_ok=$(python3 - "$TMP/out" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
assert set(d["model"]) >= {"name", "params", "trainable_params"}
assert set(d["peak"]) >= {"allocated_bytes", "reserved_bytes", "device_bytes", "phase"}
keys = {"weights", "gradients", "optimizer", "activations", "temporaries", "allocator_slack", "runtime"}
assert set(d["breakdown"]) >= keys
assert sum(d["breakdown"][k] for k in keys) == d["peak"]["device_bytes"]
assert d["peak"]["allocated_bytes"] <= d["peak"]["reserved_bytes"] <= d["peak"]["device_bytes"]
assert d["capacity_bytes"] == 40960 * 2**20 and d["fits"] is True
assert d["peak"]["phase"] in ("forward", "loss", "backward", "optimizer")
print("ok")
PY
)
if [ "$rc" -eq 0 ] && [ "$json_ok" = ok ]; then ok; else bad "estimate --json: $json_ok"; fi
# Each peak has a range around it, from the group of setups named.
run estimate llama-3.2-1b --weights bf16 --method lora --json
range_ok=$(python3 - "$TMP/out" <<'PY' 2>&1
import json, sys
p = json.load(open(sys.argv[1]))["peak"]
for kind in ("allocated", "reserved", "device"):
    r = p[kind + "_range"]
    assert list(r) == ["low", "high"] and all(isinstance(v, int) for v in r.values()), r
    assert r["low"] < p[kind + "_bytes"] < r["high"], (kind, r, p[kind + "_bytes"])
assert p["range_group"] == "hf/lora", p["range_group"]
print("ok")
PY
)
if [ "$rc" -eq 0 ] && [ "$range_ok" = ok ]; then ok; else bad "estimate --json ranges: $range_ok"; fi
succeeds '^  nvidia-smi \(device\) .* \([0-9.]+ - [0-9.]+ GiB\)$' estimate llama-3.2-1b --weights bf16 --method lora
succeeds 'how far off the estimator has been on hf/lora runs' estimate llama-3.2-1b --weights bf16 --method lora
# Without --gpu there is no verdict.
succeeds '"capacity_bytes": null' estimate gpt2 --json
succeeds '"fits": null' estimate gpt2 --json

# ---- the verdict --------------------------------------------------------------------------
# Full fp32 AdamW of a 7B model (16 B/param = 100 GiB) does not fit a 24 GiB card: exit 1.
exits 1 estimate llama-2-7b --gpu rtx-4090
grep -q 'does not fit on rtx-4090' "$TMP/out" && ok || bad "no 'does not fit' verdict: $(tail -1 "$TMP/out")"
exits 0 estimate gpt2 --gpu rtx-4090
grep -q '^fits on rtx-4090' "$TMP/out" && ok || bad "no 'fits' verdict: $(tail -1 "$TMP/out")"
# The verdict is the high end's: a GPU between the estimate and the high end of its range
# does not fit (exit 1), and the text says the estimate itself would.
run estimate llama-3.2-1b --weights bf16 --method lora --json
read -r between above < <(python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))["peak"]
mib = 2**20
print((p["device_bytes"] + p["device_range"]["high"]) // 2 // mib, p["device_range"]["high"] // mib + 1)' "$TMP/out")
exits 1 estimate llama-3.2-1b --weights bf16 --method lora --gpu "${between}MiB"
grep -q '^does not fit on the GPU (.*) at the high end, .*: .* short; the estimate itself, .*, fits' "$TMP/out" && ok ||
  bad "no high-end verdict: $(tail -1 "$TMP/out")"
exits 1 estimate llama-3.2-1b --weights bf16 --method lora --gpu "${between}MiB" --json
grep -q '"fits": false' "$TMP/out" && ok || bad "--json fits is not false between the estimate and the high end"
exits 0 estimate llama-3.2-1b --weights bf16 --method lora --gpu "${above}MiB"
grep -q '^fits on the GPU (.*) even at the high end, .*: .* to spare$' "$TMP/out" && ok ||
  bad "no fit at the high end: $(tail -1 "$TMP/out")"
# More memory never makes a setup need less: batch 8 peaks above batch 1.
run estimate llama-3.2-1b --weights bf16 --batch 1 --json
one=$(grep -o '"device_bytes": [0-9]*' "$TMP/out" | grep -o '[0-9]*$')
run estimate llama-3.2-1b --weights bf16 --batch 8 --json
eight=$(grep -o '"device_bytes": [0-9]*' "$TMP/out" | grep -o '[0-9]*$')
[ "$eight" -gt "$one" ] && ok || bad "batch 8 ($eight) not above batch 1 ($one)"
# Batches padded to their longest sample reserve more than fixed-length ones, and say so.
run estimate llama-3.2-1b --weights bf16 --lengths varied --json
varied=$(grep -o '"reserved_bytes": [0-9]*' "$TMP/out" | head -1 | grep -o '[0-9]*$')
grep -q '"lengths": "varied"' "$TMP/out" && ok || bad "no assumed lengths in --json"
run estimate llama-3.2-1b --weights bf16 --lengths fixed --json
fixed=$(grep -o '"reserved_bytes": [0-9]*' "$TMP/out" | head -1 | grep -o '[0-9]*$')
[ "$varied" -gt "$fixed" ] && ok || bad "varied lengths ($varied) not above fixed ($fixed)"
succeeds '^torchtune 0.6 \(torch 2.13\): sdpa attention, 8 micro batches per optimizer step, varied lengths' estimate gpt2 --framework torchtune

# ---- nothing hidden: every value used, and those that came from a default ------------------
# field JSON_FILE EXPR: a Python expression over j (the JSON), printed.
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>&1; }
# transformers 5 loads a checkpoint in its own dtype (qwen2.5-7b: bf16); 4.x in float32; the
# user's --weights is not among the values assumed.
run estimate qwen2.5-7b --method lora --json
[ "$(field "$TMP/out" 'j["setup"]["weights"], j["assumed"]["weights"], "method" in j["assumed"]')" = "bf16 bf16 False" ] &&
  ok || bad "hf 5.23 default weights: $(field "$TMP/out" 'j["setup"]["weights"]')"
run estimate qwen2.5-7b --method lora --framework hf@4.46 --json
[ "$(field "$TMP/out" 'j["setup"]["weights"], j["assumed"]["weights"]')" = "fp32 fp32" ] && ok ||
  bad "hf 4.46 default weights: $(field "$TMP/out" 'j["setup"]["weights"]')"
run estimate qwen2.5-7b --weights fp32 --json
[ "$(field "$TMP/out" 'j["setup"]["weights"], "weights" in j["assumed"], j["read_from"]')" = "fp32 False {}" ] && ok ||
  bad "--weights given: $(field "$TMP/out" 'j["assumed"]')"
run estimate qwen2.5-7b --json
[ "$(field "$TMP/out" 'sorted(set(j["setup"]) - set(j["assumed"]))')" = "['model']" ] && ok ||
  bad "with no option, all but the model should be assumed: $(field "$TMP/out" 'sorted(j["assumed"])')"
succeeds '^assumed \(no option or config gave them\): .*weights bf16 \(the checkpoint.s dtype\), .*batch 1, .*seq 2048' \
  estimate qwen2.5-7b --method lora
succeeds 'weights fp32' estimate qwen2.5-7b --framework litgpt
# What the framework runs, not what was asked: Gemma 2's soft-capped attention runs eager
# under litgpt, and the setup says so with a note.
run estimate gemma-2-2b --framework litgpt --attention sdpa --json
[ "$(field "$TMP/out" 'j["setup"]["attention"], any("soft-capped" in n for n in j["notes"])')" = "eager True" ] && ok ||
  bad "gemma-2 under litgpt: $(field "$TMP/out" 'j["setup"]["attention"], j["notes"]')"
# --compile yes: torchtitan compiles its layers (they keep less) and, from 0.1.0, its loss
# (less again), each said in a note.
run estimate llama-3.2-1b --framework torchtitan --amp bf16 --seq 4096 --json
eager=$(field "$TMP/out" 'j["peak"]["allocated_bytes"]')
run estimate llama-3.2-1b --framework torchtitan --amp bf16 --seq 4096 --compile yes --json
compiled=$(field "$TMP/out" 'j["peak"]["allocated_bytes"]')
[ "$(field "$TMP/out" 'j["setup"]["compile"], any("the loss is compiled; the layers keep" in n for n in j["notes"])')" = "yes True" ] &&
  ok || bad "torchtitan --compile yes: $(field "$TMP/out" 'j["notes"]')"
run estimate llama-3.2-1b --framework torchtitan@0.0.2 --amp bf16 --seq 4096 --compile yes --json
[ "$(field "$TMP/out" "$compiled"' < j["peak"]["allocated_bytes"] < '"$eager"', any("the loss is eager" in n for n in j["notes"])')" = "True True" ] &&
  ok || bad "torchtitan@0.0.2 --compile yes: $(field "$TMP/out" 'j["peak"]["allocated_bytes"], j["notes"]') (eager $eager, 0.1.0 $compiled)"
fails 2 "--compile: 'maybe' is not one of no, yes" estimate llama-3.2-1b --compile maybe
fails 2 '--compile yes: the tracer runs the framework eager on the CPU' trace llama-3.2-1b --compile yes
# A learned position table ends the default length, and refuses a longer one.
run estimate gpt2 --json
[ "$(field "$TMP/out" 'j["assumed"]["seq"]')" = 1024 ] && ok || bad "gpt2's default seq: $(field "$TMP/out" 'j["setup"]["seq"]')"
fails 2 "--seq 100000 is longer than the model's 1024 learned positions" estimate gpt2 --seq 100000
fails 2 "--seq 513 is longer than the model's 512 learned positions" plan bert-base-uncased --seq 513 --gpu 24GiB

# ---- impossible or contradictory setups: exit 2 with the reason ---------------------------
fails 2 'contradicts --quant none' estimate llama-2-7b --method qlora --quant none
fails 2 '--tp 3 does not divide the 32 attention heads' estimate llama-2-7b --tp 3 --gpus 3
fails 2 '--seq must be at least 1' estimate llama-2-7b --seq 0
fails 2 '--gpus must be at least 1' estimate llama-2-7b --gpus 0
fails 2 '--tp larger than --gpus' estimate llama-2-7b --shard zero3 --tp 8 --gpus 4
fails 2 '--offload params needs --shard zero3, fsdp or hsdp' estimate llama-2-7b --offload params
fails 2 '--task causal-lm does not apply to an encoder' estimate bert-base-uncased --task causal-lm

# ---- parallel layouts: the layout shown, and the ones a framework cannot run refused --------
succeeds '^pipeline: 1f1b, 8 micro batches; the peak is rank 1.s \(16 blocks\), 7 micro batches in flight$' \
  estimate llama-3.1-405b --framework torchtitan --weights fp32 --amp bf16 --batch 4 --accumulation 8 --seq 8192 --grad-ckpt full \
  --gpus 512 --shard fsdp --tp 8 --pp 8
run estimate llama-3.1-405b --framework torchtitan --accumulation 8 --gpus 512 --shard fsdp --tp 8 --pp 8 --pp-schedule gpipe --json
layout=$(python3 -c 'import json, sys; l = json.load(open(sys.argv[1]))["layout"]
print(l["gpus"], l["dp"], l["tp"], l["pp"], l["cp"], l["pp_schedule"], l["micro_batches_in_flight"])' "$TMP/out")
[ "$rc" -eq 0 ] && [ "$layout" = "512 8 8 8 1 gpipe 8.0" ] && ok || bad "estimate --json layout: '$layout'"
fails 2 '^vramfit estimate: --pp 5 does not divide the 126 layers: megatron gives every stage as many$' \
  estimate llama-3.1-405b --framework megatron --gpus 320 --tp 8 --pp 5
fails 2 '^vramfit estimate: --gpus 500 is not a multiple of --tp 8 x --pp 8 x --cp 1' estimate llama-3.1-405b --framework torchtitan --gpus 500 --tp 8 --pp 8
fails 2 '^vramfit estimate: --pp 4: hf has no pipeline parallelism$' estimate llama-2-7b --gpus 4 --pp 4
fails 2 '^vramfit estimate: --pp-schedule gpipe: megatron runs 1f1b, interleaved-1f1b$' estimate llama-2-7b --framework megatron --gpus 4 --pp 4 --pp-schedule gpipe
fails 2 '^vramfit estimate: --pp-schedule needs --pp 2 or more$' estimate llama-2-7b --framework torchtitan --pp-schedule 1f1b
fails 2 "^vramfit estimate: --pp-schedule: 'zb' is not one of gpipe, 1f1b, interleaved-1f1b$" estimate llama-2-7b --pp-schedule zb
fails 2 "^vramfit estimate: --sequence-parallel: 'maybe' is not one of no, yes$" estimate llama-2-7b --sequence-parallel maybe
fails 2 '^vramfit estimate: --ep 3 does not divide the 8 experts$' estimate mixtral-8x7b --gpus 8 --ep 3
fails 2 '^vramfit estimate: --ep needs a mixture-of-experts model$' estimate llama-2-7b --gpus 8 --ep 2
succeeds '^layout: tp 2 with sequence parallelism x pp 2 x dp 2 = 8 GPUs, experts over ep 2$' estimate mixtral-8x7b --framework megatron --weights bf16 \
  --gpus 8 --tp 2 --pp 2 --ep 2 --sequence-parallel yes

# ---- bad flags and values -----------------------------------------------------------------
fails 2 "^vramfit estimate: --batch expects a whole number, got 'x'$" estimate gpt2 --batch x
fails 2 "^vramfit estimate: --optimizer: 'adam' is not one of" estimate gpt2 --optimizer adam
fails 2 "^vramfit estimate: --lora-targets: 'q,zz'" estimate gpt2 --method lora --lora-targets q,zz
fails 2 "^vramfit estimate: --weights: 'int4' is not one of fp32, bf16, fp16$" estimate gpt2 --weights int4
fails 2 "^vramfit estimate: --lengths: 'random' is not one of fixed, varied$" estimate gpt2 --lengths random
fails 2 "^vramfit estimate: --gpu: unknown GPU 'nope'" estimate gpt2 --gpu nope
fails 2 "^vramfit estimate: --alloc-conf: byte 0: Unrecognized key 'foo'" estimate gpt2 --alloc-conf foo:1
fails 2 "^vramfit estimate: unknown framework 'jax'" estimate gpt2 --framework jax
fails 2 "^vramfit estimate: unknown model 'nosuchmodel'" estimate nosuchmodel
fails 2 '^vramfit estimate: MODEL is missing' estimate
fails 2 "^vramfit estimate: unknown option '--bogus'; see 'vramfit estimate --help'$" estimate gpt2 --bogus
fails 2 '^vramfit estimate: --batch needs a value$' estimate gpt2 --batch
# A copy of data/ (VRAMFIT_DATA_DIR) with a broken or no uncertainty file: one line, exit 2.
cp -r "$SRC/data" "$TMP/data"
printf '{"groups": [' >"$TMP/data/uncertainty.json"
VRAMFIT_DATA_DIR=$TMP/data fails 2 '^vramfit estimate: uncertainty.json:1:[0-9]+: invalid JSON' estimate gpt2
printf '{"groups": []}' >"$TMP/data/uncertainty.json"
VRAMFIT_DATA_DIR=$TMP/data fails 2 '^vramfit estimate: uncertainty.json: no group for every setup' estimate gpt2
rm "$TMP/data/uncertainty.json"
VRAMFIT_DATA_DIR=$TMP/data fails 2 '^vramfit estimate: uncertainty.json: missing from the data folder' estimate gpt2
# --gpu auto without a driver: the environment lacks something, exit 3.
VRAMFIT_NVML=$TMP/no-such-libnvidia-ml.so fails 3 'cannot load the NVML library' estimate gpt2 --gpu auto

# ---- the allocator configuration is read from the environment -----------------------------
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run estimate llama-3.2-1b --weights bf16 --json
exp=$(grep -o '"reserved_bytes": [0-9]*' "$TMP/out" | head -1 | grep -o '[0-9]*$')
PYTORCH_CUDA_ALLOC_CONF= run estimate llama-3.2-1b --weights bf16 --json
def=$(grep -o '"reserved_bytes": [0-9]*' "$TMP/out" | head -1 | grep -o '[0-9]*$')
[ "$exp" -le "$def" ] && ok || bad "expandable segments reserve more ($exp) than the default ($def)"
PYTORCH_ALLOC_CONF=bogus:1 fails 2 "PYTORCH_ALLOC_CONF.*Unrecognized key 'bogus'" estimate gpt2

# ---- --loss: the fused kernels never make the logits whole ----------------------------------
LORA=(llama-3.1-8b --weights bf16 --method lora --batch 4 --grad-ckpt full)
run estimate "${LORA[@]}" --json
whole=$(grep -o '"allocated_bytes": [0-9]*' "$TMP/out" | head -1 | grep -o '[0-9]*$')
for loss in fused cce chunked default; do
  run estimate "${LORA[@]}" --loss "$loss" --json
  got=$(grep -o '"allocated_bytes": [0-9]*' "$TMP/out" | head -1 | grep -o '[0-9]*$')
  said=$(grep -o '"loss": "[a-z]*"' "$TMP/out" | head -1)
  # 8,192 tokens x 128,256 logits x 10 bytes the Trainer's loss holds at once
  case $loss in
  fused | cce) [ $((whole - got)) -ge 10506731520 ] && [ "$said" = "\"loss\": \"$loss\"" ] && ok || bad "--loss $loss: $got of $whole ($said)" ;;
  chunked) [ "$got" -lt "$whole" ] && [ $((whole - got)) -lt 10506731520 ] && ok || bad "--loss chunked: $got of $whole" ;;
  default) [ "$got" = "$whole" ] && ok || bad "--loss default: $got, not $whole" ;;
  esac
done
fails 2 "^vramfit estimate: --loss: 'liger' is not one of default, chunked, fused, cce$" estimate gpt2 --loss liger
fails 2 '^vramfit estimate: --loss fused: litgpt 0.5 has no such loss \(it runs: default, chunked\)$' estimate gpt2 --framework litgpt --loss fused
fails 2 "replaces a causal LM's head and loss" estimate bert-base-uncased --loss fused
fails 2 "^vramfit trace: --loss fused: the tracer runs the framework's own loss on the CPU" trace gpt2 --loss fused

# --events keeps the streams' part: FSDP1's units gathered on their stream, recorded on
# the computation stream, the rate limiter's events and waits
exits 0 estimate qwen2.5-0.5b --framework lightning --weights bf16 --gpus 8 --shard fsdp --events "$TMP/fsdp.events"
for line in '^a [0-9]* [0-9]* [1-9]$' '^r [0-9]* 0$' '^m [0-9]* 0$' '^w [0-9]*$'; do
  grep -q "$line" "$TMP/fsdp.events" && ok || bad "--events under FSDP: no line matching $line"
done

succeeds '^usage: vramfit estimate MODEL \[options\]' estimate --help
finish
