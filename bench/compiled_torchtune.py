#!/usr/bin/env python3
"""What torchtune's own Llama layers keep for their backward without checkpointing, run
eager and compiled as its recipes compile them (training.compile_model: one graph per
TransformerSelfAttentionLayer): the figures the profile's compiled_layers stands on. The
layers are torchtune 0.6.1's llama3_2 at toy sizes, in bf16; the CPU allocator, seen
through the profiler's memory events, holds Inductor's buffers too. Prints the bytes a token
a layer the forward of the layers leaves, and the sizes of those tensors. Usage, with the
tracer's torchtune environment (make trace-env):
.venv-trace/torchtune/bin/python bench/compiled_torchtune.py"""
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile
from torchtune import training
from torchtune.models.llama3_2 import llama3_2

BATCH, SEQ, LAYERS, VOCAB = 2, 128, 4, 512
DIM, HEADS, KV_HEADS, FFN = 256, 4, 2, 704


def layers_kept(compiled: bool) -> Counter[int]:
    """Bytes of each tensor alive after the layers' forward (their output included)."""
    torch.manual_seed(0)
    model = llama3_2(vocab_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, num_kv_heads=KV_HEADS,
                     embed_dim=DIM, max_seq_len=SEQ, intermediate_dim=FFN,
                     tie_word_embeddings=False).to(torch.bfloat16)
    if compiled:
        training.compile_model(model, verbose=False)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    model(tokens).float().sum().backward()  # compiles, outside the measurement
    hidden = model.tok_embeddings(tokens).detach().requires_grad_()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for layer in model.layers:
            hidden = layer(hidden)
    live: Counter[int] = Counter()
    for e in prof.profiler.kineto_results.events():
        if e.name() == "[memory]":
            live[abs(e.nbytes())] += 1 if e.nbytes() > 0 else -1
    return +live


def main() -> None:
    print(f"torch {torch.__version__}, torchtune llama3_2 layers, bf16, {BATCH * SEQ} tokens, dim {DIM}, "
          f"ffn {FFN}, no checkpointing: what the forward leaves for the backward")
    for compiled in (False, True):
        kept = layers_kept(compiled)
        total = sum(n * c for n, c in kept.items())
        print(f"  {'compiled' if compiled else 'eager':8s} {total / (BATCH * SEQ) / LAYERS:7.1f} bytes a token a "
              f"layer; tensors (bytes x count): {sorted(kept.items(), reverse=True)}")


if __name__ == "__main__":
    main()
