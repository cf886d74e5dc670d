"""The CUDA rules: SDPA routing as sdp_utils.cpp chooses, kernel buffers by formula."""
import pytest
import torch

from vramfit.trace import fakecuda, rules
from vramfit.trace.tracker import Tracker


def qkv(heads=8, kv_heads=8, dim=64, dtype=torch.bfloat16, length=256):
    q = torch.empty(2, heads, length, dim, device="cuda", dtype=dtype)
    k = torch.empty(2, kv_heads, length, dim, device="cuda", dtype=dtype)
    return q, k, k


@pytest.fixture()
def fake():
    t = Tracker()
    fakecuda.install(fakecuda.DeviceFacts("test", (9, 0), 80 << 30), t.memory, t.empty_cache)
    with fakecuda.fake_mode(), t:
        yield t


@pytest.mark.parametrize("case, expected", [
    (dict(), "flash"),
    (dict(dtype=torch.float32), "efficient"),
    (dict(dim=512), "efficient"),
    (dict(dim=62, dtype=torch.float32), "math"),
])
def test_backend_choice(fake, case, expected):
    q, k, v = qkv(**case)
    assert rules.choose_backend(q, k, v, None, True, False, rules.SdpaPolicy()) == expected


def test_masks_rule_out_flash(fake):
    q, k, v = qkv()
    mask = torch.ones(2, 1, 256, 256, device="cuda", dtype=torch.bool)
    assert rules.choose_backend(q, k, v, mask, False, False, rules.SdpaPolicy()) == "efficient"


def test_grouped_query_attention_needs_flash(fake):
    q, k, v = qkv(heads=8, kv_heads=2)
    mask = torch.ones(2, 1, 256, 256, device="cuda", dtype=torch.bool)
    policy = rules.SdpaPolicy()
    assert rules.choose_backend(q, k, v, None, True, True, policy) == "flash"
    # 2.13's memory-efficient kernel takes no grouped-query attention: math repeats K/V.
    assert rules.choose_backend(q, k, v, mask, False, True, policy) == "math"


def test_older_gpus_have_no_flash(fake):
    q, k, v = qkv()
    assert rules.choose_backend(q, k, v, None, True, False, rules.SdpaPolicy((7, 5))) == "efficient"


def test_flash_keeps_no_score_matrix(fake):
    q, k, v = (t.requires_grad_() for t in qkv(length=1024))
    before = fake.current
    out = rules.make_sdpa(rules.SdpaPolicy(), None)(q, k, v, is_causal=True)
    # output (bf16) and the fp32 log-sum-exp [B, H, L], nothing of L x L size
    kept = fake.current - before
    assert out.shape == q.shape
    assert kept < 2 * 8 * 1024 * 64 * 2 + 2 * 8 * 1024 * 4 + 4 * 512


def test_flash_backward_buffers():
    q = torch.empty(1, 32, 1000, 128, device="meta", dtype=torch.bfloat16)
    k = torch.empty(1, 8, 1000, 128, device="meta", dtype=torch.bfloat16)
    temps = rules._flash_backward((None, q, k), None)
    assert temps[0] == 32 * 1024 * 4  # softmax_d, length rounded to 128
    assert temps[1] == 1024 * 32 * 128 * 4  # dq_accum
    assert temps[2:] == [1000 * 32 * 128 * 2] * 2  # dk, dv expanded to all heads


def test_efficient_backward_workspace_is_an_fp32_dq():
    q = torch.empty(16, 16, 4096, 128, device="meta", dtype=torch.bfloat16)
    delta, workspace = rules._efficient_backward((None, q, q, q), None)
    assert delta == 16 * 16 * 4096 * 4
    assert workspace == 256 * 32 * 16388 * 4  # the research note's worked example


def test_cublas_workspace_by_generation():
    assert rules.cublas_workspace_bytes((9, 0)) == 32 << 20
    assert rules.cublas_workspace_bytes((8, 0)) == 8519680


def test_embedding_backward_sorts_above_3072_indices():
    grad = torch.empty(16384, 4096, device="meta", dtype=torch.bfloat16)
    idx = torch.empty(16384, device="meta", dtype=torch.long)
    temps = rules._embedding_backward((grad, idx, 128256), None)
    assert temps[-1] == (1638 + 16384) * 4096 * 4
    assert rules._embedding_backward((grad[:3072], idx[:3072], 128256), None) == []


@pytest.fixture()
def fake_with_kernels():
    t = Tracker(kernels=rules.KERNELS)
    fakecuda.install(fakecuda.DeviceFacts("test", (9, 0), 80 << 30), t.memory, t.empty_cache)
    with fakecuda.fake_mode(), t:
        yield t


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_mm_in_any_dtype_makes_its_output_only(fake_with_kernels, dtype):
    a = torch.empty(64, 32, device="cuda", dtype=dtype)
    b = torch.empty(4, 32, 16, device="cuda", dtype=dtype)
    offs = torch.empty(4, device="cuda", dtype=torch.int32)
    before = fake_with_kernels.current
    out = torch._grouped_mm(a, b, offs)
    assert out.dtype == dtype and out.shape == (64, 16)
    assert fake_with_kernels.current - before == rules.rnd(64 * 16 * dtype.itemsize, 512)


def test_optimizers_take_the_foreach_path_on_fake_parameters(fake):
    # As on a GPU (torch/optim/optimizer.py _default_to_fused_or_foreach): a fake
    # parameter is a FakeTensor, which the exact-type check would send one tensor at a time.
    from torch.optim.optimizer import _default_to_fused_or_foreach
    p = torch.nn.Parameter(torch.empty(4, device="cuda"))
    assert _default_to_fused_or_foreach([p], False, False) == (False, True)
