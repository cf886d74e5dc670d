#!/usr/bin/env python3
"""What a Llama layer keeps for its backward under torchtitan's op-level selective
checkpointing, run eager and under torch.compile: the figures the torchtitan profile's
selective_keep_compiled stands on. The layer is written here as torchtitan's llama3 model
computes it (RMSNorm, rotary embeddings as complex products, grouped-query SDPA, SwiGLU)
at toy sizes; the policy is torchtitan's (infra/parallelize.py@v0.1.0 _save_list: the SDPA
outputs and every other mm), with the CPU's SDPA kernel added to the list, as the GPU's
are. The CPU allocator, seen through the profiler's memory events, holds Inductor's buffers
too. Prints the bytes a token a layer kept after the forward of 4 layers, and the sizes of
the tensors one layer keeps. Usage, with the tracer's environment (make trace-env):
.venv-trace/hf/bin/python bench/compiled_block.py"""
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

DIM, HEADS, KV_HEADS, FFN, BATCH, SEQ, LAYERS = 256, 4, 2, 704, 2, 128, 4
HEAD_DIM = DIM // HEADS
TOKENS = BATCH * SEQ
MM = torch.ops.aten.mm.default
SAVED = {MM, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
         torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention.default}


def rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs).flatten(3).type_as(x)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wo = nn.Linear(DIM, DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.w1, self.w3 = nn.Linear(DIM, FFN, bias=False), nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.attention_norm, self.ffn_norm = nn.RMSNorm(DIM, eps=1e-5), nn.RMSNorm(DIM, eps=1e-5)

    def attention(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        q = rotary(self.wq(x).view(BATCH, SEQ, HEADS, HEAD_DIM), freqs)
        k = rotary(self.wk(x).view(BATCH, SEQ, KV_HEADS, HEAD_DIM), freqs)
        v = self.wv(x).view(BATCH, SEQ, KV_HEADS, HEAD_DIM)
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=2) for t in (k, v))
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(BATCH, SEQ, DIM))

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs)
        g = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(g)) * self.w3(g))


def op_level_policy() -> Any:
    counts: defaultdict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        counts[mode] += func == MM
        keep = func in SAVED and not (func == MM and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = Layer()

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = checkpoint(self.layer, x, freqs, use_reentrant=False, context_fn=op_level_policy)
        return out


def forward_allocations(layers: int, compiled: bool) -> Counter[int]:
    """Bytes of each tensor alive after the forward of `layers` layers (their outputs included)."""
    torch.manual_seed(0)
    stack: list[Callable[..., torch.Tensor]] = [Checkpointed().to(torch.bfloat16) for _ in range(layers)]
    if compiled:
        stack = [torch.compile(m, fullgraph=True) for m in stack]
    freqs = torch.polar(torch.ones(SEQ, HEAD_DIM // 2), torch.randn(SEQ, HEAD_DIM // 2)).view(1, SEQ, 1, -1)

    def forward() -> torch.Tensor:
        h = torch.randn(BATCH, SEQ, DIM, dtype=torch.bfloat16, requires_grad=True)
        for m in stack:
            h = m(h, freqs)
        return h

    forward().sum().backward()  # compiles, outside the measurement
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = forward()
    live: Counter[int] = Counter()
    for e in prof.profiler.kineto_results.events():
        if e.name() == "[memory]":
            live[abs(e.nbytes())] += 1 if e.nbytes() > 0 else -1
    del out
    return +live


def main() -> None:
    print(f"torch {torch.__version__}, bf16, {TOKENS} tokens, dim {DIM}, ffn {FFN}: "
          f"what the forward leaves for the backward")
    for compiled in (False, True):
        name = "compiled" if compiled else "eager"
        kept = sum(n * c for n, c in forward_allocations(LAYERS, compiled).items())
        one = sorted(forward_allocations(1, compiled).items(), reverse=True)
        print(f"  {name:8s} {kept / TOKENS / LAYERS:7.1f} bytes a token a layer ({LAYERS} layers); "
              f"one layer's tensors (bytes x count): {one}")


if __name__ == "__main__":
    main()
