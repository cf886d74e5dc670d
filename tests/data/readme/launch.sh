#!/bin/bash
# 4 GPUs, one node
NPROC=4
torchrun --nproc_per_node=$NPROC train.py --config config.yaml
