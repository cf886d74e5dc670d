#!/bin/sh
# The traced corpus's setups, one per line: ID <TAB> MODEL <TAB> ARGS (the exact
# `vramfit estimate` options). `make traces` traces each with `vramfit trace` into
# bench/traced/<framework>.tsv. The spread: model families, tasks, methods, precisions,
# checkpointing, attention, optimizers, batch 1-32, sequence 64-8192, fixed and varied
# lengths, accumulation. Deterministic: the same list every time.
set -eu
n=0
# Models with learned positions take no longer samples than their table has rows.
positions() {
  case $1 in gpt2*) echo 1024 ;; bert-* | roberta-*) echo 512 ;; *) echo 1000000 ;; esac
}
row() { # FRAMEWORK MODEL ARGS...
  fw=$1 model=$2
  shift 2
  seq=$(echo "$*" | sed -n 's/.*--seq \([0-9]*\).*/\1/p')
  [ "${seq:-2048}" -le "$(positions "$model")" ] || return 0
  n=$((n + 1))
  printf '%s-%03d\t%s\t--framework %s %s\n' "$fw" "$n" "$model" "$fw" "$*"
}

# ---- hf: transformers + PEFT + the Trainer ----------------------------------------------
decoders="gpt2 gpt2-medium pythia-1b qwen2.5-0.5b qwen2.5-1.5b tinyllama-1.1b llama-3.2-1b
gemma-2b gemma-2-2b phi-2 llama-3.2-3b phi-3-mini-4k-instruct stablelm-base-alpha-3b
mistral-7b llama-3.1-8b qwen2.5-7b falcon-7b mixtral-8x7b"
for m in $decoders; do
  # PEFT 0.21 adapts Mixtral's experts as parameters (lora.ParamWrapper), which refuse the
  # recipes' LoRA dropout: its attention projections instead.
  linear=all-linear
  [ "$m" = mixtral-8x7b ] && linear=q,k,v,o
  row hf "$m" --weights bf16 --batch 1 --seq 512
  row hf "$m" --weights bf16 --batch 4 --seq 2048 --grad-ckpt full
  row hf "$m" --weights bf16 --method lora --lora-r 16 --batch 2 --seq 1024
  row hf "$m" --weights bf16 --method lora --lora-r 64 --lora-targets $linear --batch 1 --seq 4096 --grad-ckpt full
  row hf "$m" --weights bf16 --method dora --batch 1 --seq 512
  row hf "$m" --weights fp32 --amp bf16 --method lora --batch 2 --seq 512
done
for m in gpt2 gpt2-medium pythia-1b qwen2.5-0.5b tinyllama-1.1b llama-3.2-1b; do
  row hf "$m" --weights fp32 --batch 1 --seq 256
  row hf "$m" --weights fp32 --amp bf16 --batch 8 --seq 512
  row hf "$m" --weights fp32 --amp fp16 --batch 2 --seq 1024 --grad-ckpt full
  row hf "$m" --weights bf16 --batch 16 --seq 128 --accumulation 4
  row hf "$m" --weights bf16 --batch 1 --seq 8192 --grad-ckpt full
  row hf "$m" --weights bf16 --batch 8 --seq 512 --lengths varied
  row hf "$m" --weights bf16 --batch 2 --seq 1024 --attention eager
done
for m in bert-base-uncased bert-large-uncased roberta-large; do
  for task in seq-classification masked-lm; do
    row hf "$m" --task $task --batch 8 --seq 512
    row hf "$m" --task $task --batch 32 --seq 128 --amp fp16
    row hf "$m" --task $task --batch 16 --seq 256 --amp bf16 --attention eager
    row hf "$m" --task $task --batch 4 --seq 512 --grad-ckpt full --accumulation 2
    row hf "$m" --task $task --method lora --lora-targets q,k,v,o --batch 16 --seq 512
    row hf "$m" --task $task --batch 32 --seq 64 --lengths varied
  done
done
for m in llama-3.2-1b qwen2.5-1.5b gemma-2b; do
  row hf "$m" --task seq-classification --weights bf16 --batch 8 --seq 512
  row hf "$m" --task seq-classification --weights bf16 --method lora --batch 4 --seq 1024
done
for opt in adafactor sgd sgd-momentum lion adamw-8bit none; do
  for m in qwen2.5-0.5b llama-3.2-1b phi-2; do
    row hf "$m" --weights bf16 --optimizer $opt --batch 4 --seq 1024
  done
  row hf llama-3.2-1b --weights fp32 --amp bf16 --optimizer $opt --batch 2 --seq 512
done
for m in qwen2.5-0.5b llama-3.2-1b mistral-7b; do
  for attn in eager sdpa flash; do
    row hf "$m" --weights bf16 --method lora --attention $attn --batch 2 --seq 2048
  done
  row hf "$m" --weights bf16 --method lora --batch 32 --seq 256 --lengths varied --accumulation 2
  row hf "$m" --weights bf16 --method lora --lora-r 8 --lora-targets q,k,v,o,gate,up,down,head --batch 1 --seq 2048
done

# ---- litgpt: the fine-tuning scripts' main() on Fabric (litgpt 0.5) ------------------------
# One GPU: no activation checkpointing (the scripts checkpoint only under FSDP) and SDPA.
# The recipes accumulate 4 micro batches; the 7B models' rows take one, to trace in minutes
# (the peak is the same from the second micro batch on).
for m in tinyllama-1.1b llama-3.2-1b llama-3.2-3b qwen2.5-0.5b gemma-2b gemma-2-2b phi-2 \
  phi-3-mini-4k-instruct pythia-1b stablelm-base-alpha-3b falcon-7b mistral-7b llama-3.1-8b qwen2.5-7b; do
  acc=
  case $m in *-7b | *-8b) acc="--accumulation 1" ;; esac
  row litgpt "$m" --weights bf16 --batch 1 --seq 512 $acc
  row litgpt "$m" --weights bf16 --method lora --lora-r 16 --batch 2 --seq 1024 $acc
  row litgpt "$m" --weights bf16 --method qlora --quant nf4 --lora-r 32 --batch 1 --seq 2048 $acc
  row litgpt "$m" --weights bf16 --method adapter --batch 4 --seq 512 $acc
done
for m in tinyllama-1.1b llama-3.2-1b qwen2.5-0.5b pythia-1b; do
  # litgpt attends to at most block_size positions: 2048 for TinyLlama and Pythia
  case $m in tinyllama-1.1b | pythia-1b) long=2048 ;; *) long=8192 ;; esac
  row litgpt "$m" --weights fp32 --batch 2 --seq 256
  row litgpt "$m" --weights fp32 --amp bf16 --method lora --batch 4 --seq 512
  row litgpt "$m" --weights bf16 --method adapter-v2 --batch 2 --seq 1024
  row litgpt "$m" --weights bf16 --method lora --lora-r 8 --lora-targets q,k,v,o,gate,up,down,head --batch 8 --seq 256
  row litgpt "$m" --weights bf16 --method lora --batch 1 --seq $long
done
for opt in sgd adafactor adamw-8bit lion; do
  row litgpt llama-3.2-1b --weights bf16 --optimizer $opt --batch 2 --seq 1024
done
for m in llama-3.2-1b phi-2 mistral-7b; do
  row litgpt "$m" --weights bf16 --method lora --batch 16 --seq 256 --lengths varied --accumulation 2
  row litgpt "$m" --weights bf16 --method qlora --quant nf4-dq --lora-r 64 --lora-targets all-linear --batch 4 --seq 1024 --accumulation 1
done

# ---- torchtune: the single-device recipes' setup() and train() (torchtune 0.6) -------------
# The recipes accumulate 8 micro batches; the rows take 2 (the same peak, a quarter of the
# tracing time), but for the one that asks for more.
# Activation offloading (enable_activation_offloading) is not traced: the tracer runs one GPU
# without offload, so the rows checkpoint instead.
for m in llama-3.2-1b llama-3.2-3b qwen2.5-0.5b qwen2.5-1.5b gemma-2b gemma-2-2b phi-3-mini-4k-instruct \
  mistral-7b llama-3.1-8b qwen2.5-7b; do
  row torchtune "$m" --weights bf16 --batch 2 --seq 512 --grad-ckpt full --accumulation 2
  row torchtune "$m" --weights bf16 --method lora --lora-r 8 --lora-targets q,v --batch 2 --seq 1024 --grad-ckpt full --accumulation 2
  row torchtune "$m" --weights bf16 --method lora --lora-r 64 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 512 --accumulation 2
  row torchtune "$m" --weights bf16 --method qlora --quant nf4-dq --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 2048 --grad-ckpt full --accumulation 2
  row torchtune "$m" --weights bf16 --method dora --lora-targets q,v --batch 1 --seq 1024 --accumulation 2
done
for m in llama-3.2-1b qwen2.5-0.5b gemma-2b; do
  row torchtune "$m" --weights bf16 --batch 8 --seq 256 --accumulation 4
  row torchtune "$m" --weights fp32 --batch 1 --seq 512 --accumulation 2
  row torchtune "$m" --weights bf16 --method lora --batch 1 --seq 8192 --grad-ckpt full --accumulation 2
  row torchtune "$m" --weights bf16 --method lora --batch 16 --seq 128 --lengths varied --accumulation 2
  row torchtune "$m" --weights bf16 --batch 4 --seq 1024 --grad-ckpt full --accumulation 2
done
for opt in sgd adafactor adamw-8bit; do
  row torchtune llama-3.2-1b --weights bf16 --optimizer $opt --batch 2 --seq 1024 --accumulation 2
done

# ---- lightning: a LightningModule around a transformers model, Lightning's Trainer ---------
for m in gpt2 gpt2-medium pythia-1b qwen2.5-0.5b qwen2.5-1.5b tinyllama-1.1b llama-3.2-1b gemma-2b \
  phi-2 mistral-7b llama-3.1-8b; do
  row lightning "$m" --weights bf16 --batch 2 --seq 512
  row lightning "$m" --weights fp32 --amp bf16 --batch 4 --seq 256
  row lightning "$m" --weights bf16 --method lora --lora-r 16 --batch 2 --seq 1024 --grad-ckpt full
  row lightning "$m" --weights fp32 --amp bf16 --method lora --lora-targets all-linear --batch 1 --seq 2048
done
for m in gpt2 qwen2.5-0.5b llama-3.2-1b; do
  row lightning "$m" --weights fp32 --batch 2 --seq 512
  row lightning "$m" --weights fp32 --amp fp16 --batch 8 --seq 256
  row lightning "$m" --weights bf16 --method dora --batch 2 --seq 512
  row lightning "$m" --weights bf16 --batch 16 --seq 128 --accumulation 4
  row lightning "$m" --weights bf16 --batch 8 --seq 512 --lengths varied
  row lightning "$m" --weights bf16 --batch 2 --seq 1024 --attention eager
done
for m in bert-base-uncased roberta-large; do
  for task in seq-classification masked-lm; do
    row lightning "$m" --task $task --batch 16 --seq 256
    row lightning "$m" --task $task --weights fp32 --amp bf16 --method lora --lora-targets q,k,v,o --batch 32 --seq 128
  done
done
for opt in sgd-momentum adafactor none; do
  row lightning llama-3.2-1b --weights bf16 --optimizer $opt --batch 4 --seq 512
done

# ---- hf QLoRA: bitsandbytes' 4-bit base under PEFT's recipe (prepare_model_for_kbit_training) --
# Their own ids (ql-hf-NN), added with the mechanisms they brought (bench/NOTES.md, "QLoRA in
# the Hugging Face stack").
q=0
ql() { # MODEL ARGS...
  model=$1
  shift
  q=$((q + 1))
  printf 'ql-hf-%02d\t%s\t--framework hf %s\n' "$q" "$model" "$*"
}
for m in qwen2.5-0.5b llama-3.2-1b tinyllama-1.1b qwen2.5-1.5b gemma-2b gemma-2-2b llama-3.2-3b \
  phi-3-mini-4k-instruct; do
  ql "$m" --weights bf16 --method qlora --batch 1 --seq 1024
  ql "$m" --weights bf16 --amp bf16 --method qlora --lora-r 16 --lora-targets all-linear --batch 2 --seq 2048 --grad-ckpt full
  ql "$m" --weights bf16 --amp bf16 --method qlora --quant nf4 --lora-r 64 --lora-targets q,k,v,o --batch 4 --seq 512
done
for m in mistral-7b llama-3.1-8b qwen2.5-7b llama-2-7b gemma-7b; do
  ql "$m" --weights bf16 --amp bf16 --method qlora --lora-r 16 --lora-targets all-linear --batch 1 --seq 4096 --grad-ckpt full
  ql "$m" --weights bf16 --method qlora --lora-r 64 --lora-targets q,k,v,gate,up,down --batch 2 --seq 1024 --grad-ckpt full
done
ql llama-3.2-1b --weights bf16 --amp bf16 --method qlora --batch 8 --seq 512 --lengths varied --accumulation 2
ql qwen2.5-1.5b --weights bf16 --amp bf16 --method qlora --lora-targets q,k,v,o,gate,up,down,head --batch 2 --seq 1024
ql mistral-7b --weights bf16 --amp bf16 --method qlora --attention flash --batch 4 --seq 1024 --grad-ckpt full --accumulation 4
ql llama-3.2-3b --weights bf16 --amp bf16 --method qlora --attention eager --batch 2 --seq 1024
ql gemma-2-2b --weights fp32 --amp bf16 --method qlora --batch 2 --seq 1024 --grad-ckpt full

# Held out until 2026-11-24: other models, shapes and GPU counts, traced after the
# estimator had been fitted to the rows above, to judge it on setups it had not seen
# (bench/NOTES.md, "Held-out traces"). Their ids name the sweep.
printf '%s\t%s\t%s\n' h2-hf-01 phi-2 '--framework hf --weights bf16 --batch 8 --seq 512 --grad-ckpt none --accumulation 1 --gpus 1'
printf '%s\t%s\t%s\n' h2-hf-02 gemma-2-2b '--framework hf --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 2048 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-hf-03 stablelm-base-alpha-3b '--framework hf --weights fp32 --amp bf16 --batch 2 --seq 1024 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-hf-04 gpt2-xl '--framework hf --weights fp32 --amp fp16 --batch 4 --seq 1024 --gpus 1 --attention eager'
printf '%s\t%s\t%s\n' h2-hf-06 llama-3.2-3b '--framework hf --weights bf16 --batch 1 --seq 8192 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-hf-07 pythia-1b '--framework hf --weights fp32 --batch 16 --seq 512 --gpus 1 --optimizer adamw-8bit'
printf '%s\t%s\t%s\n' h2-hf-08 qwen2.5-1.5b '--framework hf --weights bf16 --method dora --lora-r 8 --lora-targets q,v --batch 4 --seq 1024 --gpus 1'
printf '%s\t%s\t%s\n' h2-hf-09 llama-3.1-8b '--framework hf --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 1 --seq 4096 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-hf-10 gemma-2b '--framework hf --weights bf16 --batch 4 --seq 512 --accumulation 4 --gpus 1 --optimizer adafactor'
printf '%s\t%s\t%s\n' h2-tt-01 llama-3.1-8b '--framework torchtune --weights bf16 --method lora --lora-r 8 --lora-targets q,v --batch 2 --seq 2048 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-tt-02 qwen2.5-7b '--framework torchtune --weights bf16 --method qlora --quant nf4-dq --lora-r 8 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 1024 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-tt-03 llama-3.2-3b '--framework torchtune --weights bf16 --batch 2 --seq 4096 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-tt-04 gemma-2b '--framework torchtune --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 8 --seq 512 --gpus 1'
printf '%s\t%s\t%s\n' h2-lt-01 phi-2 '--framework lightning --weights bf16 --batch 4 --seq 1024 --gpus 1'
printf '%s\t%s\t%s\n' h2-lt-02 llama-3.2-1b '--framework lightning --weights fp32 --amp bf16 --batch 8 --seq 1024 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h2-lg-01 llama-3.1-8b '--framework litgpt --weights bf16 --method lora --lora-r 16 --lora-targets q,v --batch 2 --seq 1024 --gpus 1'
printf '%s\t%s\t%s\n' h2-lg-03 gemma-2-2b '--framework litgpt --weights bf16 --method qlora --quant nf4 --lora-r 8 --lora-targets q,k,v,o --batch 4 --seq 1024 --gpus 1'

# Held out with the 2026-12 catalogue: the model types it added (qwen3, qwen3_moe,
# gemma3_text, olmo2, smollm3, phi3 with partial rotary, mistral with its own head_dim),
# each traced once after the estimator had learned their mechanisms from other setups
# (bench/NOTES.md, "The 2026-12 catalogue's model types").
printf '%s\t%s\t%s\n' h3-hf-01 qwen3-1.7b '--framework hf --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o,gate,up,down --batch 4 --seq 2048 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-02 qwen3-4b '--framework hf --weights bf16 --method dora --lora-r 8 --lora-targets q,v --batch 2 --seq 1024 --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-03 gemma-3-4b '--framework hf --weights bf16 --method lora --lora-r 32 --lora-targets q,k,v,o --batch 2 --seq 2048 --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-04 olmo-2-1b '--framework hf --weights fp32 --amp bf16 --batch 4 --seq 512 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-05 smollm2-360m '--framework hf --weights bf16 --batch 16 --seq 512 --accumulation 2 --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-06 smollm3-3b '--framework hf --weights bf16 --method lora --lora-r 64 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 4096 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-07 phi-4-mini-instruct '--framework hf --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 2 --seq 2048 --gpus 1 --attention eager'
printf '%s\t%s\t%s\n' h3-hf-08 mistral-nemo-12b '--framework hf --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o --batch 1 --seq 2048 --grad-ckpt full --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-09 qwen3-30b-a3b '--framework hf --weights bf16 --method lora --lora-r 8 --lora-targets q,k,v,o --batch 2 --seq 1024 --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-10 gemma-3-1b '--framework hf --weights bf16 --batch 4 --seq 2048 --gpus 1 --optimizer adafactor'
printf '%s\t%s\t%s\n' h3-hf-11 olmo-2-7b '--framework hf --weights bf16 --method lora --lora-r 16 --lora-targets q,k,v,o,gate,up,down --batch 2 --seq 2048 --gpus 1'
printf '%s\t%s\t%s\n' h3-hf-12 qwen3-0.6b '--framework hf --weights bf16 --method lora --batch 16 --seq 256 --lengths varied --accumulation 2 --gpus 1'
printf '%s\t%s\t%s\n' h3-lt-01 qwen3-0.6b '--framework lightning --weights bf16 --batch 4 --seq 1024 --gpus 1'
printf '%s\t%s\t%s\n' h3-lt-02 gemma-3-1b '--framework lightning --weights fp32 --amp bf16 --method lora --lora-targets all-linear --batch 2 --seq 2048 --gpus 1'

# Batches padded to lengths drawn from a distribution of sample lengths (--lengths
# varied:MEAN,MAX), 8 steps as the estimate replays them: added 2026-12-01.
printf '%s\t%s\t%s\n' ld-hf-01 llama-3.2-1b '--framework hf --weights bf16 --method lora --batch 32 --seq 256 --lengths varied:150,256'
printf '%s\t%s\t%s\n' ld-hf-02 llama-3.2-1b '--framework hf --weights bf16 --method lora --batch 32 --seq 256 --lengths varied:100,256'
printf '%s\t%s\t%s\n' ld-hf-03 qwen2.5-0.5b '--framework hf --weights bf16 --batch 8 --seq 512 --lengths varied:200,512'
printf '%s\t%s\t%s\n' ld-hf-04 gpt2 '--framework hf --weights bf16 --method lora --batch 16 --seq 512 --lengths varied:120,512'
printf '%s\t%s\t%s\n' ld-tt-01 llama-3.2-1b '--framework torchtune --weights bf16 --method lora --batch 16 --seq 128 --lengths varied:60,128 --accumulation 2'
printf '%s\t%s\t%s\n' ld-lg-01 llama-3.2-1b '--framework litgpt --weights bf16 --method lora --batch 16 --seq 256 --lengths varied:100,256 --accumulation 1'
# torchtune's activation offloading (its side stream and stash), fixed lengths
printf '%s\t%s\t%s\n' of-tt-01 llama-3.2-1b '--framework torchtune --weights bf16 --method lora --lora-r 8 --lora-targets q,v --batch 8 --seq 2048 --lengths fixed --grad-ckpt full --offload activations'
printf '%s\t%s\t%s\n' of-tt-02 qwen2.5-0.5b '--framework torchtune --weights bf16 --method full --batch 4 --seq 2048 --lengths fixed --grad-ckpt full --offload activations'
printf '%s\t%s\t%s\n' of-tt-03 llama-3.2-1b '--framework torchtune --weights bf16 --method qlora --lora-r 8 --lora-targets q,k,v,o --batch 4 --seq 1024 --lengths fixed --grad-ckpt full --offload activations'
printf '%s\t%s\t%s\n' of-tt-04 qwen2.5-0.5b '--framework torchtune --weights bf16 --method lora --lora-r 8 --lora-targets q,v --batch 2 --seq 1024 --lengths fixed --grad-ckpt full --offload activations --accumulation 2'
