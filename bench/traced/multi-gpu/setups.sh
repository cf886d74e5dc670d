#!/bin/sh
# The multi-GPU traced corpus: rank 0 of an N-GPU run on torch.distributed's fake process
# group (python/vramfit/trace/distributed.py), one line per setup as bench/traced/setups.sh
# prints them. `make traces-multi-gpu` traces them into bench/traced/multi-gpu/<framework>.tsv,
# which the accuracy gate reports but does not hold to the corpus's targets (bench/README.md).
# torchtune's distributed recipes (FSDP2): 2, 4 and 8 GPUs; full and LoRA; with and without
# checkpointing; llama-style models whose traces take seconds.
set -eu
n=0
row() { # MODEL ARGS...
  model=$1
  shift
  n=$((n + 1))
  printf 'fsdp-tt-%02d\t%s\t--framework torchtune --weights bf16 %s\n' "$n" "$model" "$*"
}
for m in qwen2.5-0.5b llama-3.2-1b tinyllama-1.1b qwen2.5-1.5b llama-3.2-3b; do
  row "$m" --batch 2 --seq 2048 --accumulation 1 --gpus 8 --shard fsdp
  row "$m" --batch 4 --seq 2048 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
  row "$m" --method lora --lora-r 16 --lora-targets q,k,v,o --batch 2 --seq 2048 --accumulation 1 --gpus 2 --shard fsdp
  row "$m" --method lora --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 8 --shard fsdp
done
row llama-3.2-1b --method qlora --quant nf4-dq --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 2 --shard fsdp
row llama-3.2-3b --method qlora --quant nf4-dq --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 4 --shard fsdp
