#!/usr/bin/env bash
# The user's own training config as MODEL (tests/data/configs/, one folder per ecosystem):
# estimate and plan read the setup from it (trace too: cli/trace), each value with its place (read_from),
# the command line over it; what vramfit cannot model is warned about; a bad config is one
# line naming file:line, exit 2; and a plan of a config goes back into the keys it was read
# from (apply --plan, plan --write), changing the values and nothing else.
NAME=configs
source "$(dirname "$0")/lib/harness.sh"
DATA=$SRC/tests/data/configs
cp -r "$DATA" "$TMP/c"
cd "$TMP/c" || exit 1

# field JSON_FILE EXPR: a Python expression over j (the JSON), printed.
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>&1; }
# is NAME WANT EXPR: the last output's JSON gives WANT for EXPR.
is() {
  local got
  got=$(field "$TMP/out" "$3")
  if [ "$got" = "$2" ]; then ok; else bad "$1: $3 is '$got', want '$2' ($(head -c 300 "$TMP/err"))"; fi
}

# ---- each ecosystem: the values read, and where -----------------------------------------
run estimate hf/train.yaml --json
is "hf + DeepSpeed" "hf qwen2.5-7b 2 16 4096 zero3 optimizer,params bf16 bf16 full sdpa" \
  'j["setup"]["framework"], j["setup"]["model"], j["setup"]["batch"], j["setup"]["accumulation"], j["setup"]["seq"], j["setup"]["shard"], j["setup"]["offload"], j["setup"]["weights"], j["setup"]["amp"], j["setup"]["grad_ckpt"], j["setup"]["attention"]'
is "hf read_from" "hf/train.yaml:11 hf/train.yaml:8 hf/ds_z3_offload.json:8 hf/train.yaml:3" \
  'j["read_from"]["batch"], j["read_from"]["seq"], j["read_from"]["shard"], j["read_from"]["model"]'
is "hf assumed" "True False" '"optimizer" in j["assumed"], "batch" in j["assumed"]'
succeeds '^read from hf/ds_z3_offload.json \(deepspeed\): shard zero3 \(line 8\), offload optimizer,params \(line 9\)$' \
  estimate hf/train.yaml
run estimate hf/fsdp.json --json
is "hf fsdp" "fsdp optimizer,params full adamw" 'j["setup"]["shard"], j["setup"]["offload"], j["setup"]["grad_ckpt"], j["setup"]["optimizer"]'
is "hf fsdp warnings" "1" 'len(j["warnings"])'
grep -q '^warning: hf/fsdp.json:8: optim: galore_adamw is not an optimizer vramfit models; vramfit assumes optimizer adamw$' \
  "$TMP/err" && ok || bad "no warning for galore_adamw: $(cat "$TMP/err")"
is "hf fsdp Liger loss" "fused hf/fsdp.json:12" 'j["setup"]["loss"], j["read_from"]["loss"]'
# torch_compile: true is --compile yes, whose note says what of it the estimate models.
is "hf fsdp torch_compile" "yes hf/fsdp.json:13 True" \
  'j["setup"]["compile"], j["read_from"]["compile"], any(n.startswith("--compile yes: the loss is eager") for n in j["notes"])'
run estimate trl/sft_qlora.yaml --json
is "trl qlora" "qlora nf4-dq 16 q,k,v,o flash varied trl/sft_qlora.yaml:10" \
  'j["setup"]["method"], j["setup"]["quant"], j["setup"]["lora_r"], j["setup"]["lora_targets"], j["setup"]["attention"], j["setup"]["lengths"], j["read_from"]["method"]'
run estimate trl/sft_lora.yaml trl/accelerate_zero2.yaml --json
is "trl + accelerate" "4 zero2 optimizer expandable_segments:True trl/accelerate_zero2.yaml:15 full" \
  'j["setup"]["gpus"], j["setup"]["shard"], j["setup"]["offload"], j["setup"]["alloc_conf"], j["read_from"]["gpus"], j["setup"]["grad_ckpt"]'
is "TRL's default checkpointing is assumed" "full" 'j["assumed"]["grad_ckpt"]'
succeeds 'grad_ckpt full \(trl.s default\)' estimate trl/sft_lora.yaml trl/accelerate_zero2.yaml
run estimate axolotl/qlora.yml --json
is "axolotl" "qlora 32 q,k,v,o,gate,up,down nf4-dq 2 4 4096 fixed flash adamw" \
  'j["setup"]["method"], j["setup"]["lora_r"], j["setup"]["lora_targets"], j["setup"]["quant"], j["setup"]["batch"], j["setup"]["accumulation"], j["setup"]["seq"], j["setup"]["lengths"], j["setup"]["attention"], j["setup"]["optimizer"]'
run estimate axolotl/lora_ds.yml --json
is "axolotl + deepspeed:" "zero2 optimizer adamw-8bit axolotl/deepspeed_configs/zero2.json:3" \
  'j["setup"]["shard"], j["setup"]["offload"], j["setup"]["optimizer"], j["read_from"]["shard"]'
grep -q 'lora_target_modules: embed_tokens is not a LoRA target vramfit models; vramfit assumes lora_targets q,v,gate,up,down' \
  "$TMP/err" && ok || bad "no warning for embed_tokens: $(cat "$TMP/err")"
run estimate llamafactory/qwen_lora_sft.yaml --json
is "LLaMA-Factory" "lora 8 q,k,v,o,gate,up,down 2048 full full" \
  'j["setup"]["method"], j["setup"]["lora_r"], j["setup"]["lora_targets"], j["setup"]["seq"], j["setup"]["grad_ckpt"], j["assumed"]["grad_ckpt"]'
run estimate llamafactory/full_ds3.yaml --json
is "LLaMA-Factory + ZeRO-3" "full zero3 llamafactory/ds_z3_config.json:19" 'j["setup"]["method"], j["setup"]["shard"], j["read_from"]["shard"]'
run estimate torchtune/8B_qlora_packed.yaml --json
is "torchtune" "torchtune llama-3.1-8b qlora bf16 none fixed 8192 activations paged-adamw-8bit q,k,v,o,gate,up,down" \
  'j["setup"]["framework"], j["setup"]["model"], j["setup"]["method"], j["setup"]["weights"], j["setup"]["amp"], j["setup"]["lengths"], j["setup"]["seq"], j["setup"]["offload"], j["setup"]["optimizer"], j["setup"]["lora_targets"]'
grep -q "optimizer_in_bwd: True is read by torchtune's full fine-tuning recipes alone: its qlora recipes step the optimizer after the backward; vramfit assumes optimizer_in_bwd no" "$TMP/err" && ok ||
  bad "no warning for optimizer_in_bwd in a QLoRA config: $(cat "$TMP/err")"
run estimate litgpt/qlora.yaml --json
is "litgpt" "litgpt mistral-7b 2 2 4 nf4 bf16 litgpt/qlora.yaml:32" \
  'j["setup"]["framework"], j["setup"]["model"], j["setup"]["gpus"], j["setup"]["batch"], j["setup"]["accumulation"], j["setup"]["quant"], j["setup"]["weights"], j["read_from"]["accumulation"]'
run estimate lightning/cli_ds.yaml --json
is "Lightning" "lightning llama-3.2-3b 8 zero2 optimizer 8 4 bf16" \
  'j["setup"]["framework"], j["setup"]["model"], j["setup"]["gpus"], j["setup"]["shard"], j["setup"]["offload"], j["setup"]["batch"], j["setup"]["accumulation"], j["setup"]["amp"]'
run estimate hydra/conf/config.yaml --json
is "Hydra" "gemma-2-2b 12 hydra/conf/data/alpaca.yaml:3 2 hydra/conf/trainer/gpu.yaml:5 2 hydra/conf/trainer/default.yaml:11" \
  'j["setup"]["model"], j["setup"]["batch"], j["read_from"]["batch"], j["setup"]["gpus"], j["read_from"]["gpus"], j["setup"]["accumulation"], j["read_from"]["accumulation"]'

# ---- the command line over the config; a model given beside it --------------------------
run estimate trl/sft_qlora.yaml --batch 1 --seq 512 --json
is "options override" "1 512 False False trl/sft_qlora.yaml:29" \
  'j["setup"]["batch"], j["setup"]["seq"], "batch" in j["read_from"], "batch" in j["assumed"], j["read_from"]["accumulation"]'
run estimate errors/no_model.yaml qwen2.5-0.5b --json
is "MODEL beside a config" "qwen2.5-0.5b 4 False" 'j["setup"]["model"], j["setup"]["batch"], "model" in j["read_from"]'
run estimate qwen2.5-0.5b hf/train.yaml --json
is "MODEL over the config's" "qwen2.5-0.5b hf/train.yaml:11" 'j["setup"]["model"], j["read_from"]["batch"]'
# A model folder named relative to the config's own folder, read from elsewhere.
mkdir -p run/models/tiny && cp "$SRC/data/models/llama-3.2-1b.json" run/models/tiny/config.json
printf 'base_model: ./models/tiny\nmicro_batch_size: 2\nsequence_len: 1024\n' >run/tiny.yml
run estimate run/tiny.yml --json
is "a model beside the config" "run/./models/tiny 2" 'j["setup"]["model"], j["setup"]["batch"]'
# --format claims a file whose keys do not tell.
printf 'base_model: gpt2\nseed: 1\n' >plain.yaml
fails 2 '^vramfit estimate: plain.yaml:1:1: not a training config vramfit reads' estimate plain.yaml
run estimate plain.yaml --format axolotl --json
is "--format" "gpt2 hf" 'j["setup"]["model"], j["setup"]["framework"]'

# ---- bad configs: one line, file:line, exit 2 -------------------------------------------
fails 2 '^vramfit estimate: errors/broken.yaml:4:5: invalid YAML' estimate errors/broken.yaml
fails 2 "^vramfit estimate: errors/duplicate.yaml:4:1: duplicate key 'per_device_train_batch_size'" estimate errors/duplicate.yaml
fails 2 "^vramfit plan: errors/bad_value.yaml:3 \(--batch\) expects a whole number, got 'four'" plan errors/bad_value.yaml --gpu 24GiB
fails 2 '^vramfit estimate: errors/missing_ds.yaml:5:1: deepspeed: configs/ds_zero3.json: no such file' estimate errors/missing_ds.yaml
fails 2 '^vramfit estimate: errors/no_model.yaml:1: names no model' estimate errors/no_model.yaml
fails 2 '^vramfit estimate: errors/unknown.yaml:1:1: not a training config vramfit reads' estimate errors/unknown.yaml
printf 'base_model: nosuch-model-9b\nmicro_batch_size: 2\nsequence_len: 1024\n' >unknown_model.yml
fails 2 "^vramfit estimate: unknown_model.yml:1: unknown model 'nosuch-model-9b'" estimate unknown_model.yml
printf 'learning_rate = 1e-4\nbatch_size = 4\n' >config.py
fails 2 '^vramfit estimate: config.py:1:1: a Python file, not a YAML or JSON config' estimate qwen2.5-7b config.py
fails 2 '^vramfit estimate: expects exactly one MODEL' estimate hf/train.yaml qwen2.5-7b llama-3.2-1b
fails 2 '^vramfit estimate: --format hf: no training config given' estimate qwen2.5-7b --format hf
fails 2 "^vramfit plan: --write writes the plan into the training configs" plan qwen2.5-7b --gpu 24GiB --write

# ---- the plan back into the keys it was read from ----------------------------------------
# only_values ORIG NEW: the files differ only in values of keys, each line the same up to
# the value (the edit changed the values and nothing else).
only_values() {
  python3 - "$1" "$2" <<'PY'
import sys
a = open(sys.argv[1], "rb").read().split(b"\n")
b = open(sys.argv[2], "rb").read().split(b"\n")
ok = len(a) == len(b) and any(x != y for x, y in zip(a, b))
for x, y in zip(a, b):
    if x != y:
        ok &= x.split(b":")[0] == y.split(b":")[0] and x.split(b"#")[1:] == y.split(b"#")[1:]
sys.exit(0 if ok else 1)
PY
}
cp axolotl/lora_ds.yml lora_ds.orig
cp axolotl/deepspeed_configs/zero2.json zero2.orig
run plan axolotl/lora_ds.yml --gpu 20GiB --json
cp "$TMP/out" plan.json
is "plan of a config says where it read" "axolotl/lora_ds.yml:30 4" 'j["read_from"]["batch"], j["given"]["batch"]'
exits 0 apply axolotl/lora_ds.yml axolotl/deepspeed_configs/zero2.json --plan plan.json --json
if only_values lora_ds.orig axolotl/lora_ds.yml; then ok; else bad "apply after plan changed more than values: $(diff lora_ds.orig axolotl/lora_ds.yml)"; fi
cmp -s zero2.orig axolotl/deepspeed_configs/zero2.json && ok || bad "the DeepSpeed JSON (auto values) changed"
# Read back, the config gives the plan's setting.
run estimate axolotl/lora_ds.yml --json
[ "$(field "$TMP/out" 'j["setup"]["batch"], j["setup"]["accumulation"]')" = "$(field plan.json 'j["recommended"]["batch"], j["recommended"]["accumulation"]')" ] &&
  ok || bad "the config does not read back as the plan: $(field "$TMP/out" 'j["setup"]')"
# --write does both, with a backup and the diff; a second run has nothing to change.
cp trl/sft_qlora.yaml sft.orig
run plan trl/sft_qlora.yaml --gpu 14GiB --write
[ "$rc" = 0 ] && grep -q '^+per_device_train_batch_size: 2$' "$TMP/out" && ok || bad "plan --write: exit $rc, $(tail -5 "$TMP/out")"
grep -q '^trl/sft_qlora.yaml: written (backup ' "$TMP/err" && cmp -s sft.orig trl/sft_qlora.yaml.backup && ok ||
  bad "plan --write: no backup of the original: $(cat "$TMP/err")"
if only_values sft.orig trl/sft_qlora.yaml; then ok; else bad "plan --write changed more than values: $(diff sft.orig trl/sft_qlora.yaml)"; fi
run plan trl/sft_qlora.yaml --gpu 14GiB --write --json
is "plan --write twice" "[]" '[c for f in j["written"]["files"] for c in f["changes"]]'
# torchtune's optimizer_in_bwd: read from a full fine-tuning config, planned and written back
# (Qwen2.5 7B in bf16 with AdamW fits 60 GiB only with the step in the backward).
printf 'model:\n  _component_: torchtune.models.qwen2_5.qwen2_5_7b_instruct\ntokenizer:\n  max_seq_len: 2048\nbatch_size: 1\ngradient_accumulation_steps: 1\noptimizer:\n  _component_: torch.optim.AdamW\n  fused: True\noptimizer_in_bwd: %s\nenable_activation_checkpointing: True\ndtype: bf16\nloss:\n  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss\n' True >tt_in_bwd.yaml
run estimate tt_in_bwd.yaml --json
is "torchtune optimizer_in_bwd" "yes tt_in_bwd.yaml:10 0" 'j["setup"]["optimizer_in_bwd"], j["read_from"]["optimizer_in_bwd"], j["breakdown"]["gradients"]'
sed -i 's/^optimizer_in_bwd: True$/optimizer_in_bwd: False/' tt_in_bwd.yaml
run plan tt_in_bwd.yaml --gpu 60GiB --keep capacity,seq,optimizer,precision,grad-ckpt,offload --write
[ "$rc" = 0 ] && grep -q '^optimizer_in_bwd: True$' tt_in_bwd.yaml && grep -q '^gradient_accumulation_steps: 1$' tt_in_bwd.yaml &&
  ok || bad "plan --write of optimizer_in_bwd: exit $rc, $(cat "$TMP/out" "$TMP/err" | tail -12)"
# Into the Hydra configs the values came from.
run plan hydra/conf/config.yaml --gpu 40GiB --keep capacity,grad-ckpt,shard,offload,precision --write
grep -q '^batch_size: 3 # per GPU$' hydra/conf/data/alpaca.yaml &&
  grep -q '^accumulate_grad_batches: 8$' hydra/conf/trainer/default.yaml && cmp -s "$DATA/hydra/conf/config.yaml" hydra/conf/config.yaml &&
  ok || bad "plan --write into the Hydra configs read: $(cat "$TMP/out" "$TMP/err" | tail -12)"

finish
