"""The litgpt driver on tiny configs: the fine-tuning scripts' own main() runs on Fabric
and is measured (this file runs in the litgpt environment: the current release)."""
import os
from importlib.metadata import version

import pytest

from conftest import TINY
from vramfit.trace.__main__ import trace
from vramfit.trace.spec import Spec, Unsupported

pytest.importorskip("litgpt")  # this file runs in a litgpt environment only

LLAMA = os.path.join(TINY, "tiny-llama", "config.json")   # 2 layers, vocab 512, hidden 64
PYTHIA = os.path.join(TINY, "tiny-pythia", "config.json")  # litgpt's pythia-14m: 6 layers
VOCAB, HIDDEN = 512, 64


def spec(**kw):
    base = dict(model="tiny", config=LLAMA, framework="litgpt", weights="bf16", batch=2, seq=128)
    base.update(kw)
    return Spec(**base)


def run(tmp_path, **kw):
    summary = trace(spec(**kw), str(tmp_path / "events"))
    return summary, [line.split() for line in (tmp_path / "events").read_text().splitlines()[1:]]


def phases(events):
    return [e[1] for e in events if e[0] == "p"]


def micro_batches(events):
    """Event index ranges of the training micro batches' forward and loss phases (those a
    backward follows), in order."""
    marks = [(i, e[1]) for i, e in enumerate(events) if e[0] == "p"]
    return [(marks[k - 1][0], marks[k + 1][0]) for k in range(1, len(marks) - 1)
            if marks[k][1] == "loss" and marks[k + 1][1] == "backward"]


def allocated_in(events, span, nbytes):
    return [e[1] for e in events[span[0]:span[1]] if e[0] == "a" and int(e[2]) == nbytes]


def freed_at(events, sid):
    return next(i for i, e in enumerate(events) if e[0] == "f" and e[1] == sid)


def live_at(events, index, nbytes):
    live = {}
    for e in events[:index]:
        if e[0] == "a":
            live[e[1]] = int(e[2])
        elif e[0] == "f":
            live.pop(e[1])
    return sum(1 for n in live.values() if n == nbytes)


VALIDATION = ["eval"]  # fit()'s sanity check, main()'s final validation: one phase each


def test_lora_runs_the_scripts_main(tmp_path):
    summary, events = run(tmp_path, method="lora")
    assert summary["framework"] == {"name": "litgpt", "version": version("litgpt")}
    assert "finetune/lora.py" in summary["notes"][0]
    assert phases(events) == ["load"] + VALIDATION + ["forward", "loss", "backward", "optimizer"] * 2 + VALIDATION
    assert summary["sdpa_backends"] == {"flash": 12}  # 2 layers x (4 validation + 2 training) forwards


def test_accumulation_runs_every_micro_batch(tmp_path):
    # litgpt derives it: global_batch_size / (devices x micro_batch_size)
    _, events = run(tmp_path, method="lora", accumulation=3)
    assert phases(events).count("backward") == 6
    assert phases(events).count("optimizer") == 2


def test_fabric_converts_logits_to_fp32_and_the_loop_holds_them(tmp_path):
    # The head runs on 128-position chunks in bf16; Fabric's convert_output casts each chunk
    # to fp32, and the loop's `logits` keeps them until the next micro batch's own replace them.
    _, events = run(tmp_path, method="lora", accumulation=2)
    chunk = 2 * 128 * VOCAB
    batches = micro_batches(events)
    assert len(batches) == 4
    for this, following in zip(batches, batches[1:]):
        assert allocated_in(events, this, chunk * 2), "no bf16 logits chunk"
        fp32 = allocated_in(events, this, chunk * 4)
        assert fp32, "no fp32 logits chunk"
        assert following[0] <= freed_at(events, fp32[0]) < following[1]


def test_full_finetuning_does_not_chunk_the_head(tmp_path):
    # full.py calls model(input_ids): whole fp32 logits; lora.py chunks the head by 128.
    whole = 2 * 256 * VOCAB * 4
    _, full = run(tmp_path, seq=256)
    _, lora = run(tmp_path, seq=256, method="lora")
    assert any(allocated_in(full, span, whole) for span in micro_batches(full))
    assert not any(allocated_in(lora, span, whole) for span in micro_batches(lora))


def test_lora_trains_less_than_full(tmp_path):
    full, _ = run(tmp_path, config=PYTHIA)
    lora_summary, lora = run(tmp_path, config=PYTHIA, method="lora", lora_targets=["q", "v"])
    assert lora_summary["tracked_peak_bytes"] < full["tracked_peak_bytes"]
    assert any(e[0] == "c" and e[2] == "optimizer" for e in lora)  # AdamW states of the adapters


def test_all_linear_adapts_every_projection_but_the_head(tmp_path):
    from vramfit.trace.drivers.litgpt import _method_fields, litgpt_config
    fields = _method_fields(spec(method="lora", lora_targets=["all-linear"]), litgpt_config(spec()))
    assert [k for k, v in fields.items() if v is True] == ["lora_query", "lora_key", "lora_value",
                                                          "lora_projection", "lora_mlp"]


def test_the_optimizer_is_litgpts_choice(tmp_path):
    # --optimizer SGD: a torch.optim class name that instantiate_torch_optimizer resolves;
    # plain SGD keeps no state, AdamW two per parameter.
    _, sgd = run(tmp_path, method="lora", optimizer="sgd")
    _, adamw = run(tmp_path, method="lora")
    assert not any(e[0] == "c" and e[2] == "optimizer" for e in sgd)
    assert any(e[0] == "c" and e[2] == "optimizer" for e in adamw)


def test_adapters_run_their_scripts(tmp_path):
    for method, script in (("adapter", "finetune/adapter.py"), ("adapter-v2", "finetune/adapter_v2.py")):
        summary, events = run(tmp_path, config=PYTHIA, method=method)
        assert script in summary["notes"][0]
        assert phases(events).count("optimizer") == 2


def test_qlora_swaps_the_embedding_after_making_the_optimizer(tmp_path):
    # lora.py (0.5.13) makes bitsandbytes' PagedAdamW over all parameters, then replaces the
    # embedding with a StableEmbedding: the old one stays (a parameter of the optimizer's
    # groups), the new one is trainable but not optimized, so its gradient is never freed.
    # The head is quantized through Fabric's BitsandbytesPrecision (uint8, two weights a byte).
    embedding = VOCAB * HIDDEN * 2
    _, events = run(tmp_path, method="qlora", quant="nf4")
    first_forward = micro_batches(events)[0][0]
    assert live_at(events, first_forward, embedding) == 2
    assert live_at(events, first_forward, VOCAB * HIDDEN // 2) >= 1
    last_optimizer = max(i for i, e in enumerate(events) if e == ["p", "optimizer"])
    assert live_at(events, last_optimizer, embedding) == 3


def test_unsupported_setups_are_refused(tmp_path):
    refusals = [(dict(grad_ckpt="full"), "only under FSDP"), (dict(method="dora"), "--method dora"),
                (dict(optimizer="none"), "always step an optimizer"),
                (dict(method="qlora", optimizer="sgd"), "PagedAdamW only"),
                (dict(amp="bf16"), "--weights bf16 --amp bf16"),
                (dict(method="full", quant="nf4"), "does not quantize"),
                (dict(method="adapter"), "adapter_start_layer"),
                (dict(task="seq-classification"), "causal language models"),
                (dict(seq=8192), "at most 4096 positions")]
    for kw, message in refusals:
        with pytest.raises(Unsupported, match=message):
            run(tmp_path, **kw)


def test_bitsandbytes_gemm_dequantizes_beyond_its_own_kernel():
    # rules.py rule 4: bitsandbytes 0.50 gemm_4bit serves few rows with its own kernel
    # (outputs only) and more with a dequantized weight in the input's dtype, the nested
    # absmax first dequantized to fp32 twice; its own choice decides which.
    import bitsandbytes as bnb
    import torch

    from vramfit.trace import fakecuda, rules
    from vramfit.trace.tracker import Tracker

    buffers = rules.KernelBuffers(0)
    tracker = Tracker(after_op=buffers.after_op)
    fakecuda.install(fakecuda.DeviceFacts("NVIDIA A10G", (8, 6), 24 << 30), tracker.memory, tracker.empty_cache)
    out_features, in_features = 4096, 4096
    with fakecuda.fake_mode(), tracker:
        weight = torch.empty(out_features, in_features, dtype=torch.half, device="cuda")
        packed, state = bnb.functional.quantize_4bit(weight, quant_type="nf4", compress_statistics=True)
        for rows, dequantized in ((4, False), (2048, True)):
            start = len(tracker.events)
            x = torch.empty(rows, in_features, dtype=torch.bfloat16, device="cuda")
            bnb.matmul_4bit(x, packed.t(), quant_state=state)
            sizes = [e[2] for e in tracker.events[start:] if e[0] == "a"]
            assert (out_features * in_features * 2 in sizes) == dequantized
            assert sizes.count(out_features * in_features // 64 * 4) == (2 if dequantized else 0)


def labelled(events, category):
    """Bytes of the storages the last optimizer step labelled as ``category``."""
    sizes = {e[1]: int(e[2]) for e in events if e[0] == "a"}
    last = max(i for i, e in enumerate(events) if e == ["p", "optimizer"])
    return sum(sizes[i] for i in {e[1] for e in events[last:] if e[0] == "c" and e[2] == category})


def test_fsdp_keeps_a_shard_of_the_weights_gradients_and_states(tmp_path):
    # full.py's setup() on 4 devices: FSDPStrategy, each Block a flat unit, checkpointed.
    _, one = run(tmp_path, method="full")
    summary, four = run(tmp_path, method="full", gpus=4, shard="fsdp", grad_ckpt="full")
    assert summary["notes"][-1] == "rank 0 of 4, FSDPStrategy"
    assert phases(four) == phases(one)
    # FSDP1 pads each unit's flat parameter to a multiple of the world size
    for kind in ("weights", "gradients", "optimizer"):
        assert labelled(four, kind) == pytest.approx(labelled(one, kind) / 4, rel=1e-2), kind


@pytest.mark.parametrize("change, message", [
    (dict(method="full", gpus=2, shard="fsdp"), "checkpoint every block"),
    (dict(method="full", gpus=2, grad_ckpt="full"), "shard with FSDP"),
    (dict(method="lora", gpus=2, shard="fsdp", grad_ckpt="full"), "mixes devices"),
    (dict(method="adapter", gpus=2, shard="fsdp", grad_ckpt="full"), "gating_factor"),
])
def test_multi_gpu_layouts_the_litgpt_tracer_cannot_run_are_refused(tmp_path, change, message):
    with pytest.raises(Unsupported, match=message):
        run(tmp_path, **change)
