#!/usr/bin/env bash
# vramfit plan: golden output of one scenario, the contract's JSON, exit 1 when nothing
# fits, one-line errors for bad flags, and the plan applied to a TrainingArguments YAML.
NAME=plan
source "$(dirname "$0")/lib/harness.sh"

DEMO=(plan llama-3.1-8b --weights bf16 --amp bf16 --batch 8 --accumulation 4 --gpus 4
      --gpu a100-40gb --keep seq)

# ---- golden output -------------------------------------------------------------------------
golden plan-demo.txt "${DEMO[@]}"

# ---- the contract's JSON -------------------------------------------------------------------
run "${DEMO[@]}" --json
json_ok=$(python3 - "$TMP/out" <<'PY' 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
fields = {"batch": int, "accumulation": int, "seq": int, "grad_ckpt": str, "optimizer": str,
          "method": str, "shard": str, "offload": str, "peak_device_bytes": int,
          "tokens_per_second": (int, float), "alloc_conf": str, "loss": str}
tiers = [d["tiers"][t] for t in ("safe", "balanced", "aggressive")]
for c in [d["recommended"]] + tiers:
    for k, t in fields.items():
        assert isinstance(c[k], t), (k, c[k])
    assert c["batch"] * c["accumulation"] * 4 == 128, c
    assert c["peak_device_bytes"] <= 0.97 * d["capacity_bytes"]
    assert c["seq"] == 2048 and c["tokens_per_second"] > 0
    r = c["peak_device_range"]
    assert r["low"] < c["peak_device_bytes"] < r["high"], r
# safe and balanced hold the high end of the range to their budget, aggressive the estimate
for name, c in d["tiers"].items():
    held = c["peak_device_bytes"] if name == "aggressive" else c["peak_device_range"]["high"]
    assert held <= c["budget_bytes"], (name, held, c["budget_bytes"])
assert d["recommended"] == d["tiers"]["balanced"]
assert d["recommended"]["peak_device_range"]["high"] <= 0.90 * d["capacity_bytes"]
peaks = [c["peak_device_bytes"] for c in tiers]
assert peaks == sorted(peaks), peaks
assert d["changes"] and all(isinstance(s, str) for s in d["changes"])
print("ok")
PY
)
if [ "$rc" -eq 0 ] && [ "$json_ok" = ok ]; then ok; else bad "plan --json: $json_ok"; fi
# --keep: the knobs named never change.
run "${DEMO[@]}" --keep seq,optimizer,grad-ckpt --json
keep_ok=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["tiers"].values():
    assert c["optimizer"] == "adamw" and c["grad_ckpt"] == "none" and c["seq"] == 2048, c
print("ok")' "$TMP/out" 2>&1)
if [ "$rc" -eq 0 ] && [ "$keep_ok" = ok ]; then ok; else bad "plan --keep: $keep_ok"; fi

# ---- nothing fits: exit 1 with the smallest peak --------------------------------------------
# Full fp32 AdamW of a 7B model keeps 16 bytes a parameter (104 GiB) whatever the knobs.
exits 1 plan llama-2-7b --gpu rtx-4090
grep -q 'nothing fits .*the smallest peak found is [0-9.]* GiB' "$TMP/out" && ok || bad "no smallest peak: $(tail -1 "$TMP/out")"
exits 1 plan llama-2-7b --gpu rtx-4090 --json
grep -q '"recommended": null' "$TMP/out" && grep -q '"smallest_peak_device_bytes": [1-9]' "$TMP/out" && ok ||
  bad "nothing-fits JSON: $(head -c 300 "$TMP/out")"
# ... but with the method free to change, adapters fit.
succeeds ' balanced .* (lora|qlora) ' plan llama-2-7b --gpu rtx-4090 --keep none,seq

# ---- bad input: exit 2, one line ------------------------------------------------------------
# The table's columns stay aligned however long the offload value: a row whose offload is
# optimizer,activations ends its high end where the heading does.
run plan llama-3.2-1b --framework torchtune --weights bf16 --method lora --batch 4 --accumulation 8 --seq 8192 \
  --grad-ckpt full --gpu 12GiB --keep capacity,seq,optimizer,loss,alloc-conf,grad-ckpt
python3 - "$TMP/out" <<'PY' && ok || bad "plan table misaligned: $(head -9 "$TMP/out")"
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(l for l in lines if l.lstrip().startswith("tier "))
end = head.index("high end") + len("high end")
rows = [l for l in lines if l.split()[:1] in (["given"], ["safe"], ["balanced"], ["aggressive"], ["smallest"]) and "GiB" in l]
assert any("optimizer,activations" in r for r in rows), rows
assert all(r[end - 3:end] == "GiB" for r in rows), rows
PY
fails 2 '^vramfit plan: --gpu is required' plan gpt2
fails 2 '^vramfit plan: MODEL is missing' plan --gpu rtx-4090
fails 2 "^vramfit plan: --keep: 'bogus' is not a comma list" plan gpt2 --gpu rtx-4090 --keep bogus
fails 2 "^vramfit plan: --safety expects a fraction" plan gpt2 --gpu rtx-4090 --safety 1.5
fails 2 "^vramfit plan: --target-effective-batch expects a whole number, got 'x'$" plan gpt2 --gpu rtx-4090 --target-effective-batch x
fails 2 "^vramfit plan: --optimizer: 'adam' is not one of" plan gpt2 --gpu rtx-4090 --optimizer adam
fails 2 "^vramfit plan: unknown option '--bogus'; see 'vramfit plan --help'$" plan gpt2 --bogus
fails 2 '^vramfit plan: --batch needs a value$' plan gpt2 --gpu rtx-4090 --batch
fails 2 "^vramfit plan: --gpu: unknown GPU 'nope'" plan gpt2 --gpu nope
fails 2 '--offload params needs --shard zero3, fsdp or hsdp' plan gpt2 --gpu rtx-4090 --offload params

# ---- the plan, applied ----------------------------------------------------------------------
cat >"$TMP/train.yaml" <<'YAML'
# HF TrainingArguments
output_dir: out
bf16: true
per_device_train_batch_size: 8
gradient_accumulation_steps: 4
gradient_checkpointing: false
optim: adamw_torch
learning_rate: 2.0e-4
YAML
cp "$TMP/train.yaml" "$TMP/train.orig"
"$VRAMFIT" plan mistral-7b --weights bf16 --amp bf16 --method lora --batch 8 --accumulation 4 \
  --gpu rtx-4090 --keep seq,capacity,optimizer --json >"$TMP/plan.json"
(cd "$TMP" && "$VRAMFIT" apply train.yaml --plan plan.json --dry-run) >"$TMP/diff" 2>"$TMP/err"
rc=$?
read -r batch accum ckpt < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["recommended"]
print(r["batch"], r["accumulation"], "true" if r["grad_ckpt"] != "none" else "false")' "$TMP/plan.json")
if [ "$rc" -ne 0 ]; then
  bad "apply --plan: exit $rc ($(cat "$TMP/err"))"
elif ! grep -qx "+per_device_train_batch_size: $batch" "$TMP/diff" ||
  ! grep -qx "+gradient_accumulation_steps: $accum" "$TMP/diff" ||
  ! grep -qx "+gradient_checkpointing: $ckpt" "$TMP/diff"; then
  bad "apply --plan diff does not set the plan ($batch x $accum, ckpt $ckpt):"
  cat "$TMP/diff" >&2
elif ! cmp -s "$TMP/train.yaml" "$TMP/train.orig"; then
  bad "apply --plan --dry-run wrote the file"
else
  ok
fi

# ---- layouts: --gpus-per-node lays out the world ----------------------------------------------
run plan llama-3.1-70b --framework megatron --weights bf16 --amp bf16 --seq 4096 --accumulation 16 --gpus 32 \
  --gpus-per-node 8 --gpu h100-80gb --json
layout=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["recommended"]
ok = r["tp"] * r["pp"] * r["cp"] * r["dp"] == r["gpus"] == 32 and r["tp"] <= 8 and 64 % r["tp"] == 0 \
     and 80 % r["pp"] == 0 and r["pp_schedule"] in ("none", "1f1b", "interleaved-1f1b")
print("ok" if ok else r)' "$TMP/out")
[ "$rc" -eq 0 ] && [ "$layout" = ok ] && ok || bad "plan --gpus-per-node: exit $rc, layout $layout"
succeeds '^ +layout: tp [0-9]+ x pp [0-9]+' plan llama-3.1-8b --framework torchtitan --gpus 16 --gpus-per-node 8 --gpu a100-40gb
run plan mixtral-8x7b --framework megatron --weights bf16 --amp bf16 --seq 4096 --accumulation 8 --grad-ckpt full --gpus 64 \
  --gpus-per-node 8 --gpu h100-80gb --json
ep=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["recommended"]; print(8 % r["ep"] == 0 and (r["dp"] * r["cp"]) % r["ep"] == 0)' "$TMP/out")
[ "$rc" -eq 0 ] && [ "$ep" = True ] && ok || bad "plan --gpus-per-node on a mixture of experts: exit $rc, ep fits: $ep"
fails 2 "^vramfit plan: --gpus-per-node must be at least 1$" plan gpt2 --gpu rtx-4090 --gpus-per-node 0
fails 2 "^vramfit plan: --network-gbps expects GB/s above 0, got 'fast'$" plan gpt2 --gpu rtx-4090 --network-gbps fast

# ---- one setting, one peak: the given row is estimate's figure ----------------------------------
field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>&1; }
G003=(qwen2.5-7b --weights bf16 --method lora --lora-r 128 --lora-targets all-linear --batch 2 --accumulation 8
      --seq 2048 --grad-ckpt full --gpu 24GiB)
run estimate "${G003[@]}" --json
estimated=$(field "$TMP/out" 'j["peak"]["device_bytes"]')
run plan "${G003[@]}" --json
[ "$(field "$TMP/out" 'j["given"]["peak_device_bytes"]')" = "$estimated" ] && ok ||
  bad "plan's given row is not estimate's peak ($estimated): $(field "$TMP/out" 'j["given"]')"

# ---- the memory guides' knobs -----------------------------------------------------------------
# Guide 003 (Qwen2.5-7B, LoRA r128, 24 GiB): seq 2048 fits once the loss is fused, with seq kept
# or not; the rank and the method stay (capacity).
for keep in capacity,seq optimizer; do
  run plan "${G003[@]}" --keep "$keep" --json
  g=$(field "$TMP/out" 'j["recommended"]["seq"], j["recommended"]["method"], j["recommended"]["lora_r"], j["recommended"]["quant"], j["recommended"]["loss"]')
  [ "$rc" = 0 ] && [ "$g" = "2048 lora 128 none fused" ] && ok || bad "guide 003 --keep $keep: exit $rc, $g"
done
# --keep optimizer adds to capacity: no QLoRA, AdamW kept.
is_opt=$(field "$TMP/out" 'j["recommended"]["optimizer"]')
[ "$is_opt" = adamw ] && ok || bad "--keep optimizer changed the optimizer: $is_opt"
# With the loss and the offload kept too, seq is searched, not halved (the aggressive tier's is
# no power of two), and the allocator's setting is chosen and stated.
run plan "${G003[@]}" --keep optimizer,offload,loss --json
g=$(field "$TMP/out" 'j["recommended"]["alloc_conf"], j["tiers"]["aggressive"]["seq"] % 128, j["tiers"]["aggressive"]["seq"] & (j["tiers"]["aggressive"]["seq"] - 1) != 0, 0 < j["recommended"]["seq"] < 2048')
[ "$rc" = 0 ] && [ "$g" = "expandable_segments:True 0 True True" ] && ok || bad "guide 003, seq searched: exit $rc, $g"
grep -q 'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow in place' "$TMP/out" && grep -q '"seq 2048 → [0-9]*, the largest that fits' "$TMP/out" &&
  ok || bad "guide 003: the changes do not say why: $(field "$TMP/out" 'j["changes"]')"
# --keep alloc-conf,loss hold them.
run plan "${G003[@]}" --keep capacity,seq,alloc-conf,loss --json
[ "$(field "$TMP/out" 'sorted({(c["alloc_conf"], c["loss"]) for c in j["tiers"].values() if c})')" = "[('', 'default')]" ] && ok ||
  bad "--keep alloc-conf,loss: $(field "$TMP/out" '[(c["alloc_conf"], c["loss"]) for c in j["tiers"].values() if c]')"
# Guide 002 (about 500M parameters, 4 x 44 GiB, global batch 256): micro batch 3 x 21 x 4 = 252.
run plan qwen2.5-0.5b --weights fp32 --amp bf16 --batch 2 --accumulation 32 --gpus 4 --seq 2048 --gpu 44GiB \
  --keep grad-ckpt,optimizer,loss,offload,alloc-conf,shard --json
[ "$(field "$TMP/out" 'j["recommended"]["batch"], j["recommended"]["accumulation"], j["recommended"]["effective_batch"]')" = "3 21 252" ] &&
  grep -q 'makes the effective batch 252, 1.6% off the 256 asked' "$TMP/out" && ok ||
  bad "guide 002: $(field "$TMP/out" 'j["recommended"]["batch"], j["recommended"]["accumulation"], j["changes"]')"

# ---- a GPU without bf16: fp16 autocast with its GradScaler, said ---------------------------------
run plan qwen2.5-1.5b --method lora --batch 4 --gpu v100-32gb --json
[ "$(field "$TMP/out" 'sorted({(c["precision"], c["weights"]) for c in j["tiers"].values()})')" = "[('fp16', 'fp16')]" ] &&
  grep -q 'compute in fp16 with a GradScaler.*v100-32gb has no bf16 (compute capability 7.0)' "$TMP/out" && ok ||
  bad "plan on a V100: $(field "$TMP/out" '[(c["precision"], c["weights"]) for c in j["tiers"].values()], j["changes"]')"
run plan qwen2.5-1.5b --batch 4 --gpu t4 --keep none --json
[ "$(field "$TMP/out" 'j["recommended"]["precision"]')" = fp16 ] && ok || bad "plan on a T4: $(field "$TMP/out" 'j["recommended"]')"
succeeds 'no bf16 .*--keep precision holds bf16' plan qwen2.5-1.5b --method lora --batch 4 --gpu v100-32gb --keep precision

succeeds '^usage: vramfit plan MODEL' plan --help
finish
