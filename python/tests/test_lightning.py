"""The lightning driver on tiny configs: the Trainer's own fit loop runs and is measured."""
import os

import pytest

from conftest import TINY, Events
from test_hf import live_peak
from vramfit.trace import rules
from vramfit.trace.__main__ import trace
from vramfit.trace.spec import Spec, Unsupported

pytest.importorskip("lightning")  # this file runs in the lightning environment only

from vramfit.trace.drivers import lightning as driver  # noqa: E402

LLAMA = os.path.join(TINY, "tiny-llama", "config.json")
BERT = os.path.join(TINY, "tiny-bert", "config.json")


def run(tmp_path, **kw):
    setup = dict(model="tiny", config=LLAMA, framework="lightning", weights="bf16", batch=2,
                 seq=128)
    setup.update(kw)
    summary = trace(Spec(**setup), str(tmp_path / "events"))
    return summary, (tmp_path / "events").read_text().splitlines()[1:]


def phases(events):
    return [e.split()[1] for e in events if e.startswith("p ")]


def labelled_bytes(events, category):
    """Bytes of the distinct storages the driver labelled as ``category``."""
    sizes = {e.split()[1]: int(e.split()[2]) for e in events if e.startswith("a ")}
    ids = {e.split()[1] for e in events if e.startswith("c ") and e.endswith(" " + category)}
    return sum(sizes[i] for i in ids)


def test_the_trainer_runs_two_steps_in_phases(tmp_path):
    summary, events = run(tmp_path)
    assert summary["framework"] == {"name": "lightning", "version": "2.6.6"}
    assert phases(events) == ["load"] + ["forward", "loss", "backward", "optimizer"] * 2
    assert summary["sdpa_backends"] == {"flash": 4}  # 2 layers x 2 steps
    assert any("bf16-true" in note for note in summary["notes"])
    # Trainer setup empties the cache (CUDAAccelerator.setup, resume_end) before training.
    assert events.index("e") < events.index("p forward")


def test_zero_grad_runs_between_forward_and_backward(tmp_path):
    # Lightning's closure runs training_step, then zero_grad, then backward: the first
    # step's gradients are alive through the second step's forward and loss.
    _, events = run(tmp_path)
    grads = {e.split()[1] for e in events if e.startswith("c ") and e.endswith(" gradients")}
    frees = [i for i, e in enumerate(events) if e.startswith("f ") and e.split()[1] in grads]
    forward2 = [i for i, e in enumerate(events) if e == "p forward"][1]
    backward2 = [i for i, e in enumerate(events) if e == "p backward"][1]
    assert grads and all(forward2 < i < backward2 for i in frees)


def test_mixed_precision_keeps_fp32_weights_beside_bf16_copies(tmp_path):
    true, true_events = run(tmp_path)
    mixed, mixed_events = run(tmp_path, weights="fp32", amp="bf16")
    assert labelled_bytes(mixed_events, "weights") == 2 * labelled_bytes(true_events, "weights")
    assert live_peak(mixed_events) > live_peak(true_events)
    # Autocast casts SDPA's inputs to bf16 before CUDA picks a backend: flash, as for bf16.
    assert mixed["sdpa_backends"] == true["sdpa_backends"] == {"flash": 4}
    assert any("bf16-mixed" in note for note in mixed["notes"])


def test_fp16_mixed_precision_scales_the_loss(tmp_path):
    summary, events = run(tmp_path, weights="fp32", amp="fp16")
    assert any("16-mixed" in note for note in summary["notes"])
    assert phases(events).count("optimizer") == 2


def test_lora_adapters_take_the_true_precision(tmp_path):
    _, full = run(tmp_path)
    _, true = run(tmp_path, method="lora", lora_targets=["q", "v"])
    _, mixed = run(tmp_path, method="lora", lora_targets=["q", "v"], amp="bf16")
    assert live_peak(true) < live_peak(full)
    # q: 8x64 + 64x8, v: 8x64 + 32x8 per layer, 2 layers; AdamW keeps 2 states each.
    # bf16-true converts PEFT's fp32 adapters to bf16; bf16-mixed leaves them fp32.
    adapters = 2 * (8 * 64 + 64 * 8 + 8 * 64 + 32 * 8)
    assert labelled_bytes(true, "optimizer") == 2 * adapters * 2
    assert labelled_bytes(mixed, "optimizer") == 2 * adapters * 4


def test_accumulation_runs_every_micro_batch(tmp_path):
    _, events = run(tmp_path, accumulation=3)
    assert phases(events).count("forward") == 6
    assert phases(events).count("optimizer") == 2


def test_gradient_checkpointing_lowers_the_peak(tmp_path):
    plain, plain_events = run(tmp_path, seq=512)
    ckpt, ckpt_events = run(tmp_path, seq=512, grad_ckpt="full")
    assert ckpt["sdpa_backends"] == {"flash": 8}  # every layer's forward runs again
    assert live_peak(ckpt_events) < live_peak(plain_events)


def test_varied_lengths_are_padded(tmp_path):
    summary, events = run(tmp_path, lengths="varied")
    # The first step's batches are shorter and padded: a mask rules flash out.
    assert "flash" not in summary["sdpa_backends"] or summary["sdpa_backends"]["flash"] < 4
    assert phases(events).count("optimizer") == 2


@pytest.mark.parametrize("task", ["seq-classification", "masked-lm"])
def test_encoder_tasks(tmp_path, task):
    summary, events = run(tmp_path, config=BERT, task=task, weights="fp32")
    assert summary["notes"][0].startswith("BertFor")
    assert phases(events)[1:5] == ["forward", "loss", "backward", "optimizer"]


def test_optimizers_without_state_keep_none(tmp_path):
    _, sgd = run(tmp_path, optimizer="sgd")
    _, momentum = run(tmp_path, optimizer="sgd-momentum")
    assert labelled_bytes(sgd, "optimizer") == 0
    assert labelled_bytes(momentum, "optimizer") == labelled_bytes(momentum, "weights")


@pytest.mark.skipif(not driver.HAS_BITSANDBYTES, reason="bitsandbytes is not installed")
def test_eight_bit_adamw_keeps_a_byte_per_state(tmp_path):
    _, events = run(tmp_path, optimizer="adamw-8bit")
    # Two uint8 states per element, plus blockwise absmax and the quantization maps; the
    # norm weights (under 4096 elements) keep 32-bit states.
    weights = labelled_bytes(events, "weights")
    assert weights < labelled_bytes(events, "optimizer") < 2 * weights


def test_unsupported_setups_are_refused(tmp_path):
    refusals = [(dict(grad_ckpt="selective"), "selective"),
                (dict(method="qlora", quant="nf4-dq"), "quantization"),
                (dict(method="adapter"), "LLaMA-Adapter"),
                (dict(weights="fp16", amp="fp16"), "GradScaler"),
                (dict(loss="chunked"), "own loss"),
                (dict(optimizer="paged-adamw-8bit"), "managed memory"),
                (dict(gpus=2, shard="hsdp"), "FSDPStrategy \\(--shard fsdp\\)")]
    if not driver.HAS_BITSANDBYTES:
        refusals.append((dict(optimizer="adamw-8bit"), "bitsandbytes"))
    for setup, why in refusals:
        with pytest.raises(Unsupported, match=why):
            run(tmp_path, **setup)


def traced(tmp_path, **kw):
    summary, events = run(tmp_path, **kw)
    return summary, Events(events)


def test_ddp_keeps_every_state_and_a_bucket_of_every_gradient(tmp_path):
    _, one = traced(tmp_path)
    summary, two = traced(tmp_path, gpus=2)
    assert summary["notes"][-1] == "rank 0 of 2, DDPStrategy"
    assert two.phases == one.phases
    for kind in ("weights", "gradients", "optimizer"):
        assert two.labelled(kind) == one.labelled(kind)
    # the reducer's buckets, made when the model is wrapped, hold a copy of every gradient
    buckets = two.live_at("forward") - one.live_at("forward")
    assert buckets == pytest.approx(one.labelled("gradients"), rel=1e-3)


def test_fsdp_keeps_a_shard_of_the_weights_gradients_and_states(tmp_path):
    _, one = traced(tmp_path)
    summary, four = traced(tmp_path, gpus=4, shard="fsdp")
    assert summary["notes"][-1] == "rank 0 of 4, FSDPStrategy"
    assert four.phases == one.phases
    # FSDP1 pads each unit's flat parameter to a multiple of the world size
    for kind in ("weights", "gradients", "optimizer"):
        assert four.labelled(kind) == pytest.approx(one.labelled(kind) / 4, rel=1e-2), kind
    assert four.peak < one.peak


def test_fsdp_accumulates_whole_gradients_in_the_compute_dtype(tmp_path):
    # The Trainer runs every micro batch but the last under FSDP1's no_sync (its
    # DistributedDataParallel Protocol matches any module with a no_sync method): the first
    # backward leaves each unit's whole gradient, in bf16 (MixedPrecision's param_dtype),
    # not the fp32 weights' dtype, and no shard.
    _, one = traced(tmp_path, weights="fp32", amp="bf16")
    summary, two = traced(tmp_path, weights="fp32", amp="bf16", gpus=2, shard="fsdp",
                          accumulation=2)
    workspaces = summary["cublas_workspaces"] * rules.cublas_workspace_bytes((9, 0))
    held = two.live_at("forward", 1) - two.live_at("forward", 0) - workspaces
    assert held == pytest.approx(one.labelled("gradients") / 2, rel=1e-3)


def test_fsdp_lora_blocks_take_gradients_for_their_frozen_weights(tmp_path):
    # A block's flat parameter holds its adapters with its frozen weights and requires grad
    # (use_orig_params=True): each block's gradient shard covers all its parameters. The
    # root unit (embedding, final norm, head: 2 x 512 x 64 + 64) holds no adapter.
    _, full = traced(tmp_path)
    _, lora = traced(tmp_path, method="lora", lora_targets=["q", "v"])
    _, sharded = traced(tmp_path, gpus=2, shard="fsdp", method="lora", lora_targets=["q", "v"])
    root = (2 * 512 * 64 + 64) * 2
    blocks = full.labelled("gradients") - root + lora.labelled("gradients")
    assert sharded.labelled("gradients") == pytest.approx(blocks / 2, rel=1e-3)
    # AdamW keeps states for the adapter elements in rank 0's half of each flat block:
    # here q's and v's adapters come before the MLP, so all of them.
    assert sharded.labelled("optimizer") == lora.labelled("optimizer")
