"""Two kernels the estimator models from PyTorch's code, measured on a real GPU:

1. transformers' gelu_new (NewGELUActivation's formula) under autocast and without: the bytes
   per MLP element its autograd graph keeps beside its output.
2. SDPA's math backend on Falcon-7b's layout (71 query heads, one multi-query K/V head passed
   without enable_gqa, bf16, causal): what it keeps, and its peaks, in units of the fp32
   scores [B, H, S, S].

usage: python3 bench/measured/kernels_gpu.py   (prints the figures bench/measured/README.md shows)
"""
import math

import torch
import torch.nn.functional as F


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_kept():
    n = 64 * 2**20
    for amp, weights in ((torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                         (torch.bfloat16, torch.bfloat16), (None, torch.bfloat16)):
        w = torch.randn(1024, 1024, device="cuda", dtype=weights, requires_grad=True)
        x = torch.randn(n // 1024, 1024, device="cuda", dtype=weights)
        with torch.autocast("cuda", dtype=amp or torch.float16, enabled=amp is not None):
            h = x @ w
            base = torch.cuda.memory_allocated()
            y = gelu_new(h)
            del h  # kept only if the graph keeps it
            torch.cuda.synchronize()
            kept = torch.cuda.memory_allocated() - base
        print(f"gelu_new autocast={amp} weights={weights}: {kept / n:.2f} bytes per element, "
              f"output ({y.dtype}) included")
        del y, w, x


def sdpa_math():
    b, h, s, d = 2, 71, 1024, 64

    def heads(n):
        return torch.randn(b, s, n, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()

    q, k, v = heads(h), heads(1), heads(1)
    scores = b * h * s * s * 4
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    peak, kept = torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
    print(f"sdpa math (falcon-7b layout): forward peak {peak / scores:.3f} scores, kept {kept / scores:.3f} "
          f"scores ({kept / 1e6:.1f} MB; fp32 q-sized tensor {b * h * s * d * 4 / 1e6:.1f} MB)")
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out.sum().backward()
    torch.cuda.synchronize()
    print(f"sdpa math backward peak {(torch.cuda.max_memory_allocated() - base) / scores:.3f} scores")


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name())
    gelu_kept()
    sdpa_math()
