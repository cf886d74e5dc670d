#!/bin/sh
# Stands in for the guide's training step (gpt2-large at 512 tokens, fp32 with AdamW) on a
# 24 GB GPU: it holds 9 GiB that do not grow with the batch (weights, gradients, AdamW's
# states, the CUDA context) and 0.5 GiB per sample, runs out of memory past 29 samples
# (9 + 0.5 x 30 = 24 GiB), and says what it holds in .fake-nvml-used, which the fake NVML
# (gpu.nvml) reports as its memory. `train.sh --batch N`; without --batch it trains the
# batch its own config gives (8), as a script that ignores {batch} would.
batch=8
while [ $# -gt 0 ]; do
  [ "$1" = --batch ] && batch=$2
  shift
done
if [ "$batch" -gt 29 ]; then
  echo 23.80GiB >.fake-nvml-used
  sleep 0.3
  rm -f .fake-nvml-used
  echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 120.00 MiB is free." >&2
  exit 1
fi
awk -v b="$batch" 'BEGIN { printf "%.2fGiB\n", 9 + 0.5 * b }' >.fake-nvml-used
sleep 0.3
rm -f .fake-nvml-used
echo "step 3: loss 3.14"
