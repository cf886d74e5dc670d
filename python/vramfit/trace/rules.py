"""Where a CUDA run keeps or allocates other tensors than the fake device shows.

The fake device answers every op with its meta kernel: outputs only, which is what the
caching allocator sees for most CUDA kernels too. The exceptions, each with its source
(PyTorch 2.13 unless said otherwise; the facts are collected in the research note
``shared/research/tracing.md`` and the tracer's own notes):

1. **C++ fallbacks.** On a CPU-only build, ops whose CUDA kernel is fused but that also
   have a CompositeImplicitAutograd kernel decompose in C++ before any Python mode sees
   them, so their temporaries and saved tensors would be the CPU composite's
   (native_functions.yaml: ``silu_backward``, ``mish_backward``, ``_fused_rms_norm``).
   ``install`` registers a CUDA kernel for each, which makes the dispatcher treat the op
   as one (the fake mode then answers it with its meta kernel: outputs only).
2. **SDPA.** ``scaled_dot_product_attention`` picks its CUDA backend in C++ only when a
   CUDA backend chooser exists; on this build it always takes the math path and keeps
   fp32 score matrices. ``make_sdpa`` chooses as ``sdp_utils.cpp`` ``select_sdp_backend``
   does (flash, then memory-efficient, then math; cuDNN comes after math in the default
   order, ATen/Context.h ``sdp_priority_order``) and calls that backend's op, so
   autograd saves what the CUDA kernel saves.
3. **Kernel-internal buffers** that go through the caching allocator but are no op's
   output: the cuBLAS workspace of each thread's handle (CublasHandlePool.cpp), the fp32
   accumulators of the flash and memory-efficient attention backward (flash_api.cpp
   ``mha_bwd``, attention_backward.cu), the memory-efficient forward's fp32 output
   accumulator for head dims above 128, the sorted segments of the embedding backward
   (EmbeddingBackwardKernel.cu), and ``_foreach_norm``'s per-chunk partial norms
   (ForeachReduceOp.cu). ``KernelBuffers`` adds them around the op that makes them.
4. **bitsandbytes' 4-bit matmul** (0.49 and later, backends/cuda/ops.py ``gemm_4bit``):
   its fake kernel gives the output only, while on CUDA, beyond the rows its own kernel
   serves, it dequantizes the weight into a buffer of the input's dtype and calls
   ``F.linear`` (``_dequant_linear_fallback``).
5. **Grouped matmul in any dtype.** ``_grouped_mm``'s meta kernel refuses inputs other
   than bf16 (torch/_meta_registrations.py ``_meta_grouped_mm_common``), while the CUDA
   kernel takes its fast path for bf16 and otherwise ``_grouped_mm_fallback``, an mm per
   group written into the one output tensor (aten/src/ATen/native/cuda/GroupedBlas.cpp
   ``_grouped_mm_cuda``): transformers' MoE experts in fp32 (integrations/moe.py) run on
   a GPU. ``KERNELS`` answers it with the output only, in the dtype CUDA gives it.
"""
from __future__ import annotations

import ast
import functools
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

aten = torch.ops.aten

HALF = (torch.float16, torch.bfloat16)
FP32 = 4
INT64 = 8

# Ops the CPU-only build decomposes in C++ although CUDA runs one kernel (rule 1).
FUSED_ON_CUDA = ("silu_backward", "mish_backward", "_fused_rms_norm")


def rnd(x: int, m: int) -> int:
    return -(-x // m) * m


# ---- rule 2: SDPA --------------------------------------------------------------------------
@dataclass
class SdpaPolicy:
    """What the impersonated GPU's SDPA can do. ``force`` pins a backend: the tracer's
    stand-in for flash-attention-2, which is flash on any input."""
    capability: tuple[int, int] = (9, 0)
    force: str | None = None
    chosen: dict[str, int] = field(default_factory=dict)


def _flash_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, is_causal: bool,
              enable_gqa: bool, policy: SdpaPolicy) -> bool:
    # sdp_utils.cpp can_use_flash_attention: sm80-sm121, fp16/bf16, no mask, equal head
    # dims <= 256, causal only for square attention, GQA only with enable_gqa.
    heads_ok = q.size(-3) == k.size(-3) or (enable_gqa and q.size(-3) % k.size(-3) == 0)
    return ((8, 0) <= policy.capability <= (12, 1) and q.dtype in HALF and mask is None
            and q.size(-1) == k.size(-1) == v.size(-1) <= 256 and heads_ok
            and (not is_causal or q.size(-2) == k.size(-2)))


def _efficient_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  policy: SdpaPolicy) -> bool:
    # can_use_mem_efficient_attention: sm50+, head dims a multiple of the GEMM alignment
    # (8 for half, 4 for fp32 on sm80+), and in 2.13 no grouped-query attention (native
    # GQA came with pytorch#191085, after 2.13).
    align = 8 if q.dtype in HALF else 4
    return (policy.capability >= (5, 0) and q.size(-1) == k.size(-1)
            and q.size(-1) % align == 0 and v.size(-1) % align == 0
            and q.size(-3) == k.size(-3) == v.size(-3))


def choose_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any,
                   is_causal: bool, enable_gqa: bool, policy: SdpaPolicy) -> str:
    if policy.force:
        return policy.force
    if _flash_ok(q, k, v, mask, is_causal, enable_gqa, policy):
        return "flash"
    if _efficient_ok(q, k, v, policy):
        return "efficient"
    return "math"


def _flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float,
           is_causal: bool, scale: float | None) -> torch.Tensor:
    # attention.cpp pads the head dimension to a multiple of 8 for flash, then slices.
    head = q.size(-1)
    padded = rnd(head, 8)
    if padded != head:
        q, k, v = (F.pad(t, (0, padded - head)) for t in (q, k, v))
    scale = scale if scale is not None else 1.0 / math.sqrt(head)
    out = aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False,
                                                    scale=scale)[0]
    return out[..., :head] if padded != head else out


def _additive(mask: Any, dtype: torch.dtype) -> Any:
    # attention.cpp: a boolean mask becomes an additive one in the query's dtype, a new
    # tensor the memory-efficient kernel saves for the backward.
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.where(mask, 0.0, float("-inf")).to(dtype)


def make_sdpa(policy: SdpaPolicy, original: Callable[..., Any]) -> Callable[..., Any]:
    """A ``scaled_dot_product_attention`` that routes as CUDA does."""

    def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
             scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
        if query.device.type != "cuda":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        if torch.is_autocast_enabled("cuda"):
            # Autocast casts SDPA's inputs to its dtype before the backend is chosen
            # (autocast_mode.h lower-precision list: scaled_dot_product_attention), so
            # fp32 queries from an fp32 RoPE still reach the flash kernel.
            dtype = torch.get_autocast_dtype("cuda")
            query, key, value = (t.to(dtype) for t in (query, key, value))
        backend = choose_backend(query, key, value, attn_mask, is_causal, enable_gqa, policy)
        policy.chosen[backend] = policy.chosen.get(backend, 0) + 1
        if backend == "flash":
            return _flash(query, key, value, dropout_p, is_causal, scale)
        if backend == "efficient":
            needs_lse = torch.is_grad_enabled() and any(
                t.requires_grad for t in (query, key, value))
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, _additive(attn_mask, query.dtype), needs_lse, dropout_p,
                is_causal, scale=scale)[0]
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

    return sdpa


# ---- rule 3: kernel buffers ----------------------------------------------------------------
def cublas_workspace_bytes(capability: tuple[int, int]) -> int:
    # CublasHandlePool.cpp getChosenWorkspaceSize(): ":4096:8" (32 MiB) on Hopper and
    # Blackwell (majors 9, 10, 12), ":4096:2:16:8" (8,519,680 B) before. cuBLASLt shares
    # the same workspace by default (TORCH_CUBLASLT_UNIFIED_WORKSPACE).
    return 32 * 2**20 if capability[0] in (9, 10, 12) else 4096 * 1024 * 2 + 16 * 1024 * 8


GEMMS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}


def _flash_backward(args: tuple, _out: Any) -> list[int]:
    # mha_bwd: softmax_d [B, H, rnd(Lq,128)] fp32 and dq_accum [B, rnd(Lq,128), H, rnd(D,32)]
    # fp32; with fewer K/V heads, dk and dv expanded to all heads [B, Lk, H, D] first.
    q, k = args[1], args[2]
    b, h, lq, d = q.shape
    lk, hk = k.size(-2), k.size(-3)
    temps = [b * h * rnd(lq, 128) * FP32, b * rnd(lq, 128) * h * rnd(d, 32) * FP32]
    if hk != h:
        temps += [b * lk * h * d * q.element_size()] * 2
    return temps


def _efficient_tile(d: int, half: bool) -> tuple[int, int]:
    # kernels/cutlassB.h, sm80 table: half 64x64 up to D=64, 128x128 up to 128, 128x64
    # beyond; fp32 64x64 up to 64, 128x64 beyond.
    if half:
        return (64, 64) if d <= 64 else (128, 128) if d <= 128 else (128, 64)
    return (64, 64) if d <= 64 else (128, 64)


def _efficient_backward(args: tuple, _out: Any) -> list[int]:
    # _efficient_attention_backward: delta [B, H, Lq] fp32, then one workspace holding,
    # per batch and head, the fp32 dQ tiles (16-byte header + BI x BJ floats each) and,
    # when the kernel cannot keep its output in registers (fp32, or D > 128), the dK/dV
    # split accumulators.
    q, k, v = args[1], args[2], args[3]
    b, h, lq, d = q.shape
    lk, dv = k.size(-2), v.size(-1)
    half = q.dtype in HALF
    bi, bj = _efficient_tile(d, half)
    gq = -(-lq // bi) * -(-d // bj) * (4 + bi * bj)
    in_registers = half and d <= bi
    nsplit = -(-lk // bj)
    gkv = 0 if in_registers else nsplit * bj * (rnd(d, bi) + rnd(dv, bi))
    return [b * h * lq * FP32, b * h * rnd(gq + gkv, 4) * FP32]


def _efficient_forward(args: tuple, _out: Any) -> list[int]:
    # kernel_forward.h kNeedsOutputAccumulatorBuffer: an fp32 [B, Lq, H, Dv] accumulator
    # when the output does not fit the kernel's registers (half dtypes, D > 128).
    q, v = args[0], args[2]
    b, h, lq, d = q.shape
    if q.dtype in HALF and max(d, v.size(-1)) > 128:
        return [b * lq * h * v.size(-1) * FP32]
    return []


def _embedding_backward(args: tuple, _out: Any) -> list[int]:
    # embedding_dense_backward_cuda: above 3072 indices it sorts them (sorted and original
    # indices, a range, segment offsets: [n] int64 each) and sums rows per partial segment
    # in fp32: [n // 10 + min(n, V), D].
    grad, indices, num_weights = args[0], args[1], args[2]
    n = indices.numel()
    if n <= 3072:
        return []
    segments = min(n, num_weights)
    partial = n // 10 + segments
    return [n * INT64] * 4 + [segments * INT64] * 2 + [partial * INT64, partial * grad.size(-1) * FP32]


def _foreach_norm(args: tuple, _out: Any) -> list[int]:
    # ForeachReduceOp.cu: fp32 partial norms per 65,536-element chunk of every tensor.
    tensors = args[0]
    if not tensors or tensors[0].device.type != "cuda":
        return []
    chunks = max(-(-t.numel() // 65536) for t in tensors)
    return [len(tensors) * chunks * FP32]


# ---- rule 4: bitsandbytes' gemm_4bit ----------------------------------------------------------
@functools.cache
def _bnb_gemm_choice() -> dict[str, Any]:
    """bitsandbytes' own choice between its gemm kernel and dequantize + F.linear
    (``_gemm_4bit_use_custom_cuda`` and the limits beside it), taken from its CUDA backend's
    source: that module binds CUDA streams when imported, which a CPU-only build lacks."""
    import bitsandbytes

    path = os.path.join(os.path.dirname(bitsandbytes.__file__), "backends", "cuda", "ops.py")
    if not os.path.exists(path):
        return {}
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = {"_gemm_4bit_use_custom_cuda", "_GEMM_4BIT_CUSTOM_FLOOR_M", "_gemm_4bit_custom_max_m"}
    kept = [node for node in tree.body if _defines(node) & names]

    def dispatch_props(index: int) -> tuple[int, int, int]:
        p = torch.cuda.get_device_properties(index)
        return p.multi_processor_count, p.major, p.minor

    space: dict[str, Any] = {"torch": torch, "functools": functools, "_gpu_dispatch_props": dispatch_props,
                             "_gemm_4bit_use_custom_rocm": None}
    exec(compile(ast.Module(body=kept, type_ignores=[]), path, "exec"), space)  # noqa: S102
    return space


def _defines(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.If):
        return set().union(*(_defines(n) for n in node.body + node.orelse))
    return set()


def _bnb_gemm_4bit(args: tuple, kwargs: dict, _out: Any) -> list[int]:
    # gemm_4bit(A, B, shapeB, absmax, blocksize, quant_type, bias, absmax_8bit, ...): with a
    # nested absmax, two fp32 [blocks] tensors (absmax_dq, absmax_dq + offset), then B_dq
    # [N, K] in A's dtype; all freed when the op returns.
    A, shape, blocksize = args[0], args[2], args[4]
    absmax_8bit = kwargs.get("absmax_8bit", args[7] if len(args) > 7 else None)
    K, (N, _) = A.shape[-1], shape
    M = A.numel() // K
    choice = _bnb_gemm_choice()
    custom = choice.get("_gemm_4bit_use_custom_cuda")
    if custom is None:  # releases before the fallback: gemm_4bit was the inference GEMV only
        return []
    if M <= choice["_gemm_4bit_custom_max_m"] and K % blocksize == 0 and \
            custom(A.device.index or 0, A.dtype, M, N, K):
        return []
    nested = [absmax_8bit.numel() * FP32] * 2 if absmax_8bit is not None else []
    return nested + [N * K * A.element_size()]


NAMED_BUFFERS: dict[str, Callable[[tuple, dict, Any], list[int]]] = {
    "bitsandbytes::gemm_4bit": _bnb_gemm_4bit,
}


BUFFERS: dict[Any, Callable[[tuple, Any], list[int]]] = {
    aten._scaled_dot_product_flash_attention_backward.default: _flash_backward,
    aten._scaled_dot_product_efficient_attention_backward.default: _efficient_backward,
    aten._scaled_dot_product_efficient_attention.default: _efficient_forward,
    aten.embedding_dense_backward.default: _embedding_backward,
    aten._foreach_norm.Scalar: _foreach_norm,
}


@dataclass
class KernelBuffers:
    """Adds the buffers of rules 3 and 4 as the ops run: transient ones next to the op's
    outputs, the cuBLAS workspace once per thread for the rest of the run."""
    cublas_bytes: int
    threads: set[int] = field(default_factory=set)
    transient: int = 0

    def after_op(self, func: Any, args: tuple, kwargs: dict, out: Any, tracker: Any) -> None:
        if func in GEMMS:
            thread = threading.get_ident()
            if thread not in self.threads:
                self.threads.add(thread)
                tracker.allocate(self.cublas_bytes)
        rule = BUFFERS.get(func)
        sizes = rule(args, out) if rule is not None else None
        if sizes is None and getattr(func, "namespace", "aten") != "aten":
            named = NAMED_BUFFERS.get(func.name())
            sizes = named(args, kwargs, out) if named is not None else None
        if sizes:
            ids = [tracker.allocate(n) for n in sizes if n > 0]
            self.transient += len(ids)
            for sid in ids:
                tracker.release(sid)


# ---- rule 5: grouped matmul ---------------------------------------------------------------
def _grouped_mm(func: Any, args: tuple, kwargs: dict) -> Any:
    a, b = args[0], args[1]
    # _resolve_grouped_mm_out_dtype: the one asked for, else the inputs'
    out_dtype = kwargs.get("out_dtype", args[4] if len(args) > 4 else None) or a.dtype
    if a.dtype == b.dtype == out_dtype == torch.bfloat16:
        return func(*args, **kwargs)
    # The meta kernel on bf16 copies gives the output's shape; the tracker sees only the
    # output, in its own dtype, as the fallback allocates it.
    tensors = {k: v for k, v in kwargs.items() if k != "out_dtype"}
    bf16 = [x.to(torch.bfloat16) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
            for x in (*args[:4], *tensors.values())]
    out = func(*bf16[:min(len(args), 4)], **dict(zip(tensors, bf16[min(len(args), 4):])))
    return out.to(out_dtype)


KERNELS: dict[Any, Callable[..., Any]] = {aten._grouped_mm.default: _grouped_mm}


# ---- installation --------------------------------------------------------------------------
_LIBRARY: list[Any] = []  # the registrations live as long as the library object


def _never_called(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("a fake CUDA op reached its CUDA kernel")


def install(policy: SdpaPolicy) -> None:
    """Rules 1 and 2; rules 3 and 4 are the tracker's ``after_op`` hook."""
    if not _LIBRARY:
        lib = torch.library.Library("aten", "IMPL")
        for op in FUSED_ON_CUDA:
            lib.impl(op, _never_called, "CUDA")
        _LIBRARY.append(lib)
    original = getattr(F.scaled_dot_product_attention, "vramfit_original",
                       F.scaled_dot_product_attention)
    sdpa = make_sdpa(policy, original)
    sdpa.vramfit_original = original  # type: ignore[attr-defined]
    F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
