#!/bin/sh
# The multi-GPU traced corpus: rank 0 of an N-GPU run on torch.distributed's fake process
# group (python/vramfit/trace/distributed.py), one line per setup as bench/traced/setups.sh
# prints them. `make traces-multi-gpu` traces them into bench/traced/multi-gpu/<framework>.tsv,
# which unit/test_accuracy holds to the corpus's targets (bench/README.md).
set -eu
n=0
row() { # MODEL ARGS...
  model=$1
  shift
  n=$((n + 1))
  printf '%s-%02d\t%s\t--framework %s %s\n' "$prefix" "$n" "$model" "$framework" "$*"
}
# torchtune's distributed recipes (FSDP2): 2, 4 and 8 GPUs; full and LoRA; with and without
# checkpointing; llama-style models whose traces take seconds.
prefix=fsdp-tt framework="torchtune --weights bf16"
for m in qwen2.5-0.5b llama-3.2-1b tinyllama-1.1b qwen2.5-1.5b llama-3.2-3b; do
  row "$m" --batch 2 --seq 2048 --accumulation 1 --gpus 8 --shard fsdp
  row "$m" --batch 4 --seq 2048 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
  row "$m" --method lora --lora-r 16 --lora-targets q,k,v,o --batch 2 --seq 2048 --accumulation 1 --gpus 2 --shard fsdp
  row "$m" --method lora --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 8 --shard fsdp
done
row llama-3.2-1b --method qlora --quant nf4-dq --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 2 --shard fsdp
row llama-3.2-3b --method qlora --quant nf4-dq --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 4 --shard fsdp
# The Hugging Face Trainer with accelerate's FSDP plugin as its documentation configures it
# (fsdp="full_shard auto_wrap": FSDP2 from transformers 5) and with DDP (--shard none):
# 2, 4 and 8 GPUs; full and LoRA; bf16 weights, or fp32 weights under bf16 autocast (FSDP's
# mixed precision); with and without checkpointing; accumulation 1 and 2.
prefix=fsdp-hf framework=hf n=0
for m in qwen2.5-0.5b llama-3.2-1b tinyllama-1.1b; do
  row "$m" --weights bf16 --batch 2 --seq 2048 --accumulation 1 --gpus 8 --shard fsdp
  row "$m" --weights bf16 --batch 4 --seq 2048 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
  row "$m" --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 2 --seq 2048 --accumulation 1 --gpus 2 --shard fsdp
done
row qwen2.5-0.5b --weights fp32 --amp bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
row llama-3.2-1b --weights fp32 --amp bf16 --batch 2 --seq 1024 --accumulation 1 --gpus 8 --shard fsdp
row qwen2.5-1.5b --weights bf16 --method lora --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 8 --shard fsdp
prefix=ddp-hf framework=hf n=0
row qwen2.5-0.5b --weights bf16 --batch 2 --seq 2048 --accumulation 1 --gpus 2
row qwen2.5-0.5b --weights fp32 --amp bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 4
row llama-3.2-1b --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 2 --seq 2048 --accumulation 1 --gpus 8
row llama-3.2-1b --weights bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 2
row tinyllama-1.1b --weights bf16 --method lora --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 2048 --grad-ckpt full --accumulation 2 --gpus 4
row gpt2-medium --weights fp32 --amp fp16 --batch 8 --seq 1024 --accumulation 1 --gpus 2
# The Lightning Trainer with strategy="ddp" (--shard none) and FSDPStrategy (--shard fsdp:
# FSDP1's flat parameters, each decoder layer a unit, the precision's MixedPrecision):
# 2, 4 and 8 GPUs; full and LoRA; bf16-true (--weights bf16) or bf16-mixed (--weights fp32
# --amp bf16); with and without checkpointing; accumulation 1 and 2.
prefix=fsdp-lt framework=lightning n=0
for m in qwen2.5-0.5b llama-3.2-1b; do
  row "$m" --weights bf16 --batch 2 --seq 2048 --accumulation 1 --gpus 8 --shard fsdp
  row "$m" --weights bf16 --batch 4 --seq 2048 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
  row "$m" --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 2 --seq 2048 --accumulation 1 --gpus 2 --shard fsdp
done
row tinyllama-1.1b --weights fp32 --amp bf16 --batch 2 --seq 1024 --accumulation 1 --gpus 8 --shard fsdp
row qwen2.5-0.5b --weights fp32 --amp bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
prefix=ddp-lt framework=lightning n=0
row qwen2.5-0.5b --weights bf16 --batch 2 --seq 2048 --accumulation 1 --gpus 2
row qwen2.5-0.5b --weights fp32 --amp bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 4
row llama-3.2-1b --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 2 --seq 2048 --accumulation 1 --gpus 8
row tinyllama-1.1b --weights bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 2
# litgpt's finetune/full.py as setup() runs it on many devices: Fabric's FSDPStrategy (FSDP1,
# each Block a unit and checkpointed): 2, 4 and 8 GPUs; bf16-true or bf16-mixed;
# accumulation 1 and 2 (lora.py and adapter*.py are refused: see the driver).
prefix=fsdp-lg framework=litgpt n=0
row qwen2.5-0.5b --weights bf16 --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp
row llama-3.2-1b --weights bf16 --batch 4 --seq 2048 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
row tinyllama-1.1b --weights bf16 --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 2 --shard fsdp
row qwen2.5-0.5b --weights fp32 --amp bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp
row llama-3.2-1b --weights fp32 --amp bf16 --batch 2 --seq 1024 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp
