#!/bin/sh
# The main job on built-in data, no GPU needed: will a LoRA fine-tune of Qwen2.5-7B fit on
# a 24 GiB card, and what will each memory counter show?
bin="$1"
run() {
  echo "\$ vramfit $*"
  "$bin" "$@"
  echo
}
run inspect qwen2.5-7b
run estimate qwen2.5-7b --weights bf16 --method lora --lora-r 128 --lora-targets all-linear \
  --batch 1 --seq 1536 --grad-ckpt full --gpu 24GiB
echo "Try: $bin estimate --help"
