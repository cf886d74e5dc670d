#!/usr/bin/env python3
"""What a framework's own Llama layers keep for their backward without checkpointing, run
eager and compiled as the framework compiles them: the figures the profiles'
compiled_layers stands on. torchtune 0.6.1's llama3_2 layers, each compiled alone
(training.compile_model), or transformers' LlamaForCausalLM compiled whole, as the
Trainer's torch_compile has accelerate do (accelerator.py prepare_model); toy sizes, bf16,
on the CPU, whose allocator the profiler's memory events show, Inductor's buffers
included. A layer's bytes are the difference between 8 layers and 4, after the forward.
Usage, with the tracer's environments (make trace-env):
.venv-trace/torchtune/bin/python bench/compiled_layers.py torchtune
.venv-trace/hf/bin/python bench/compiled_layers.py hf"""
import sys
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

BATCH, SEQ, VOCAB = 2, 128, 512
DIM, HEADS, KV_HEADS, FFN = 256, 4, 2, 704
TOKENS = BATCH * SEQ


def torchtune_forward(layers: int, compiled: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    from torchtune import training
    from torchtune.models.llama3_2 import llama3_2

    model = llama3_2(vocab_size=VOCAB, num_layers=layers, num_heads=HEADS, num_kv_heads=KV_HEADS,
                     embed_dim=DIM, max_seq_len=SEQ, intermediate_dim=FFN,
                     tie_word_embeddings=False).to(torch.bfloat16)
    if compiled:
        training.compile_model(model, verbose=False)

    def forward(tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = model(tokens)
        return out.float().sum()
    return forward


def hf_forward(layers: int, compiled: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    import transformers

    config = transformers.LlamaConfig(hidden_size=DIM, intermediate_size=FFN, num_hidden_layers=layers,
                                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                                      vocab_size=VOCAB, max_position_embeddings=2 * SEQ,
                                      tie_word_embeddings=False, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    run = torch.compile(model) if compiled else model

    def forward(tokens: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = run(input_ids=tokens, labels=tokens).loss
        return loss
    return forward


def kept_after_forward(framework: str, layers: int, compiled: bool) -> int:
    torch.manual_seed(0)
    forward = (hf_forward if framework == "hf" else torchtune_forward)(layers, compiled)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    forward(tokens).backward()  # compiles, outside the measurement
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = forward(tokens)
    del loss
    return sum(e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")


def main() -> None:
    framework = sys.argv[1] if len(sys.argv) > 1 else "torchtune"
    print(f"torch {torch.__version__}, {framework} Llama layers, bf16, {TOKENS} tokens, dim {DIM}, ffn {FFN}, "
          "no checkpointing: what a layer's forward leaves for the backward")
    for compiled in (False, True):
        layer = (kept_after_forward(framework, 8, compiled) - kept_after_forward(framework, 4, compiled)) / 4
        print(f"  {'compiled' if compiled else 'eager':8s} {layer / TOKENS:7.1f} bytes a token a layer")


if __name__ == "__main__":
    main()
