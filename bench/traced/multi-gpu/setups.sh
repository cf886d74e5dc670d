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
# QLoRA under DDP: PEFT's recipe on each rank (bench/traced/setups.sh, ql-hf-*), as rank 0.
prefix=ql-ddp-hf framework=hf n=0
row llama-3.2-1b --weights bf16 --amp bf16 --method qlora --lora-r 16 --lora-targets all-linear --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 2
row qwen2.5-1.5b --weights bf16 --method qlora --batch 4 --seq 1024 --accumulation 2 --gpus 4
row mistral-7b --weights bf16 --amp bf16 --method qlora --lora-r 64 --lora-targets q,k,v,gate,up,down --batch 4 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 2
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

# Held out until 2026-11-24: other models, shapes and GPU counts, traced after the
# estimator had been fitted to the rows above, to judge it on setups it had not seen
# (bench/NOTES.md, "Held-out traces"). Their ids name the sweep.
printf '%s\t%s\t%s\n' ho-hf-01 gemma-2b '--framework hf --weights bf16 --batch 1 --seq 1024 --accumulation 1 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-02 phi-2 '--framework hf --weights bf16 --batch 2 --seq 512 --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-03 llama-3.2-3b '--framework hf --weights bf16 --batch 1 --seq 4096 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-04 gpt2-large '--framework hf --weights fp32 --amp bf16 --batch 4 --seq 1024 --accumulation 1 --gpus 2 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-05 llama-3.2-1b '--framework hf --weights fp32 --amp bf16 --batch 8 --seq 512 --accumulation 4 --gpus 16 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-06 gemma-2-2b '--framework hf --weights bf16 --batch 2 --seq 1024 --accumulation 1 --gpus 2'
printf '%s\t%s\t%s\n' ho-hf-07 phi-1.5 '--framework hf --weights fp32 --amp fp16 --batch 4 --seq 1024 --accumulation 1 --gpus 4'
printf '%s\t%s\t%s\n' ho-hf-08 qwen2.5-1.5b '--framework hf --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 4096 --grad-ckpt full --accumulation 1 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-09 llama-3.1-8b '--framework hf --weights bf16 --batch 1 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-10 pythia-1b '--framework hf --weights bf16 --batch 4 --seq 1024 --accumulation 2 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-11 mistral-7b '--framework hf --weights bf16 --method lora --lora-r 8 --lora-targets q,v --batch 1 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 2 --shard fsdp'
printf '%s\t%s\t%s\n' ho-hf-12 qwen2.5-0.5b '--framework hf --weights fp32 --amp bf16 --batch 16 --seq 512 --accumulation 1 --gpus 8'
printf '%s\t%s\t%s\n' ho-tt-01 gemma-2b '--framework torchtune --weights bf16 --batch 2 --seq 1024 --accumulation 1 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-tt-02 qwen2.5-1.5b '--framework torchtune --weights bf16 --batch 1 --seq 4096 --grad-ckpt full --accumulation 1 --gpus 2 --shard fsdp'
printf '%s\t%s\t%s\n' ho-tt-03 llama-3.2-1b '--framework torchtune --weights bf16 --method lora --lora-r 32 --lora-targets q,v --batch 8 --seq 512 --accumulation 1 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-tt-04 phi-3-mini-4k-instruct '--framework torchtune --weights bf16 --batch 1 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-tt-05 llama-3.1-8b '--framework torchtune --weights bf16 --method lora --lora-r 8 --lora-targets q,k,v,o --batch 2 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-tt-06 qwen2.5-0.5b '--framework torchtune --weights bf16 --batch 16 --seq 512 --accumulation 4 --gpus 2 --shard fsdp'
printf '%s\t%s\t%s\n' ho-tt-07 llama-3.2-3b '--framework torchtune --weights bf16 --method qlora --quant nf4-dq --lora-r 16 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 1024 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-tt-08 mistral-7b '--framework torchtune --weights bf16 --batch 1 --seq 1024 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lt-01 gemma-2b '--framework lightning --weights fp32 --amp bf16 --batch 1 --seq 1024 --accumulation 1 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lt-02 tinyllama-1.1b '--framework lightning --weights bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lt-03 qwen2.5-1.5b '--framework lightning --weights bf16 --batch 2 --seq 2048 --accumulation 1 --gpus 2'
printf '%s\t%s\t%s\n' ho-lt-04 phi-2 '--framework lightning --weights bf16 --method lora --lora-r 8 --lora-targets q,v --batch 4 --seq 1024 --accumulation 2 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lt-05 llama-3.2-3b '--framework lightning --weights bf16 --batch 1 --seq 2048 --grad-ckpt full --accumulation 2 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lt-06 gpt2-medium '--framework lightning --weights fp32 --amp fp16 --batch 8 --seq 1024 --accumulation 1 --gpus 4'
printf '%s\t%s\t%s\n' ho-lg-01 phi-2 '--framework litgpt --weights bf16 --batch 4 --seq 512 --grad-ckpt full --accumulation 1 --gpus 2 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lg-02 stablelm-base-alpha-3b '--framework litgpt --weights bf16 --batch 1 --seq 512 --grad-ckpt full --accumulation 1 --gpus 2 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lg-03 gemma-2b '--framework litgpt --weights bf16 --batch 1 --seq 512 --grad-ckpt full --accumulation 1 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lg-04 llama-3.2-3b '--framework litgpt --weights bf16 --batch 4 --seq 2048 --grad-ckpt full --accumulation 1 --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lg-05 pythia-1b '--framework litgpt --weights bf16 --batch 8 --seq 1024 --grad-ckpt full --accumulation 2 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' ho-lg-06 tinyllama-1.1b '--framework litgpt --weights fp32 --amp bf16 --batch 4 --seq 512 --grad-ckpt full --accumulation 1 --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' h2-tt-05 qwen2.5-7b '--framework torchtune --weights bf16 --batch 1 --seq 4096 --grad-ckpt full --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' h2-tt-06 llama-3.1-8b '--framework torchtune --weights bf16 --batch 4 --seq 2048 --grad-ckpt full --gpus 8 --shard fsdp --accumulation 2'
printf '%s\t%s\t%s\n' h2-lt-03 qwen2.5-7b '--framework lightning --weights bf16 --batch 1 --seq 2048 --grad-ckpt full --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' h2-lg-04 qwen2.5-7b '--framework litgpt --weights bf16 --batch 1 --seq 2048 --grad-ckpt full --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' h2-hf-11 qwen2.5-7b '--framework hf --weights bf16 --batch 1 --seq 4096 --grad-ckpt full --gpus 8 --shard fsdp'
printf '%s\t%s\t%s\n' h2-hf-12 gemma-2-2b '--framework hf --weights bf16 --batch 2 --seq 2048 --grad-ckpt full --gpus 4 --shard fsdp'
printf '%s\t%s\t%s\n' h2-hf-13 llama-3.2-1b '--framework hf --weights fp32 --amp bf16 --batch 4 --seq 2048 --gpus 2 --shard fsdp --accumulation 2'
# Held out on 2026-12-01: a tied embedding under accelerate's FSDP2 with fp32 weights
# under bf16 mixed precision.
printf '%s\t%s\t%s\n' h4-hf-01 llama-3.2-1b '--framework hf --weights fp32 --amp bf16 --batch 2 --seq 256 --accumulation 1 --gpus 2 --shard fsdp'
