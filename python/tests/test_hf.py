"""The hf driver on tiny configs: the Trainer's own step runs and is measured."""
import os

import pytest

from conftest import TINY, Events
from vramfit.trace.__main__ import trace
from vramfit.trace.spec import Spec, Unsupported

pytest.importorskip("transformers")  # this file runs in the hf environment only


def spec(**kw):
    base = dict(model="tiny", config=os.path.join(TINY, "tiny-llama", "config.json"),
                framework="hf", weights="bf16", batch=2, seq=128)
    base.update(kw)
    return Spec(**base)


def run(tmp_path, **kw):
    summary = trace(spec(**kw), str(tmp_path / "events"))
    events = (tmp_path / "events").read_text().splitlines()
    return summary, events


def live_peak(events):
    live, peak = {}, 0
    for line in events[1:]:
        f = line.split()
        if f[0] == "a":
            live[f[1]] = int(f[2])
            peak = max(peak, sum(live.values()))
        elif f[0] == "f":
            live.pop(f[1])
    return peak


def test_full_finetune_runs_two_steps(tmp_path):
    summary, events = run(tmp_path)
    assert summary["framework"]["name"] == "transformers"
    phases = [e.split()[1] for e in events if e.startswith("p ")]
    assert phases == ["load", "forward", "loss", "backward", "optimizer"] * 1 + \
        ["forward", "loss", "backward", "optimizer"]
    assert summary["sdpa_backends"] == {"flash": 4}  # 2 layers x 2 steps
    assert summary["cublas_workspaces"] == 2  # the forward's thread and autograd's


def test_accumulation_runs_every_micro_batch(tmp_path):
    _, events = run(tmp_path, accumulation=3)
    assert sum(1 for e in events if e == "p forward") == 6


def test_lora_trains_less_than_full(tmp_path):
    full, full_events = run(tmp_path)
    lora, lora_events = run(tmp_path, method="lora", lora_targets=["q", "v"])
    assert live_peak(lora_events) < live_peak(full_events)
    labels = [e for e in lora_events if e.startswith("c ") and e.endswith("optimizer")]
    assert labels  # AdamW states of the adapters


def test_fp32_grouped_query_attention_falls_back_to_math(tmp_path):
    # No flash for fp32, and 2.13's memory-efficient kernel takes no grouped-query
    # attention: the math path keeps fp32 scores, as on the GPU.
    summary, _ = run(tmp_path, weights="fp32")
    assert summary["sdpa_backends"] == {"math": 4}


def test_eager_attention_keeps_the_scores(tmp_path):
    _, sdpa = run(tmp_path, seq=512)
    _, eager = run(tmp_path, seq=512, attention="eager")
    # eager keeps softmax outputs of [B, H, L, L]: 2 x 4 x 512 x 512 x 2 bytes per layer
    assert live_peak(eager) > live_peak(sdpa) + 2 * 4 * 512 * 512 * 2


def test_encoder_classification(tmp_path):
    summary, events = run(tmp_path, config=os.path.join(TINY, "tiny-bert", "config.json"),
                          task="seq-classification", weights="fp32")
    assert "BertForSequenceClassification" in summary["notes"][0]
    assert live_peak(events) > 0


@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_moe", "gemma3_text", "olmo2", "smollm3"])
def test_llama_named_projections_take_lora(model_type):
    # These model types name their projections as LlamaAttention and LlamaMLP do
    # (transformers 5.23 modeling_<type>.py).
    from vramfit.trace.drivers.hf import _lora_targets
    s = spec(method="lora", lora_targets=["q", "k", "v", "o", "gate", "up", "down"])
    assert _lora_targets(s, model_type) == _lora_targets(s, "llama")


def test_unsupported_setups_are_refused(tmp_path):
    with pytest.raises(Unsupported, match="selective"):
        run(tmp_path, grad_ckpt="selective")
    with pytest.raises(Unsupported, match="--quant int8"):
        run(tmp_path, method="qlora", quant="int8")
    with pytest.raises(Unsupported, match="--shard zero2: traces shard with FSDP only"):
        Spec.from_json('{"model": "m", "config": "c", "gpus": 2, "shard": "zero2"}')
    with pytest.raises(Unsupported, match="--tp 2"):
        Spec.from_json('{"model": "m", "config": "c", "gpus": 2, "tp": 2}')


def test_list_indices_in_a_checkpoints_recompute(tmp_path):
    # Falcon's multi-query heads are split with list indices; with checkpointing the
    # recompute indexes on autograd's device thread (fakecuda._list_indices).
    config = os.path.join(TINY, "tiny-falcon", "config.json")
    summary, events = run(tmp_path, config=config, grad_ckpt="full")
    assert summary["framework"]["name"] == "transformers"
    assert sum(1 for e in events if e == "p backward") == 2


def traced(tmp_path, **kw):
    summary = trace(spec(**kw), str(tmp_path / "events"))
    return summary, Events((tmp_path / "events").read_text().splitlines()[1:])


def test_fsdp_keeps_a_shard_of_every_state_on_each_gpu(tmp_path):
    _, one = traced(tmp_path)
    summary, four = traced(tmp_path, gpus=4, shard="fsdp")
    assert "accelerate FSDP2" in summary["notes"][-1]  # transformers 5's default version
    assert four.phases == one.phases
    # every dimension of tiny-llama divides by 4: no padding
    assert four.labelled("weights") == one.labelled("weights") // 4
    assert four.labelled("gradients") == one.labelled("gradients") // 4
    # AdamW's step counters (one per parameter) are not sharded
    assert four.labelled("optimizer") == pytest.approx(one.labelled("optimizer") / 4, rel=1e-3)
    assert four.peak < one.peak


def test_every_rank_runs_every_micro_batch(tmp_path):
    # accelerate gives each rank every 4th batch: the dataset holds 4 ranks' batches
    _, events = traced(tmp_path, gpus=4, shard="fsdp", accumulation=2)
    assert events.phases.count("forward") == 4
    assert events.phases.count("optimizer") == 2


def test_fsdp_shards_the_adapters_of_a_lora_model(tmp_path):
    _, one = traced(tmp_path, method="lora", lora_targets=["q", "v"])
    _, two = traced(tmp_path, gpus=2, shard="fsdp", method="lora", lora_targets=["q", "v"])
    assert two.labelled("gradients") == one.labelled("gradients") // 2
    assert two.labelled("optimizer") == pytest.approx(one.labelled("optimizer") / 2, rel=1e-2)


def test_ddp_keeps_every_state_and_a_bucket_of_every_gradient(tmp_path):
    _, one = traced(tmp_path)
    summary, two = traced(tmp_path, gpus=2)
    assert "DistributedDataParallel" in summary["notes"][-1]
    for kind in ("weights", "gradients", "optimizer"):
        assert two.labelled(kind) == one.labelled(kind)
    # the reducer's buckets, made when the model is wrapped, hold a copy of every gradient
    buckets = two.live_at("forward") - one.live_at("forward")
    assert buckets == pytest.approx(one.labelled("gradients"), rel=1e-3)


NF4_LLAMA = os.path.join(TINY, "tiny-llama-nf4", "config.json")


def test_qlora_quantizes_the_projections_and_upcasts_the_rest(tmp_path):
    # tiny-llama-nf4's two layers: 1,179,648 projection elements in 4 bits (n / 2 bytes);
    # prepare_model_for_kbit_training up-casts the embedding and head (512 x 256) and the
    # five norms (256) to fp32; fp32 LoRA on q and v (57,344 bytes).
    summary, events = traced(tmp_path, config=NF4_LLAMA, method="qlora")
    assert events.labelled("weights") == 1179648 // 2 + 2 * 512 * 256 * 4 + 5 * 256 * 4 + 57344
    # q, k and v come out of Linear4bit in the stream's dtype, fp32: no flash kernel, and
    # 2.13's memory-efficient one takes no grouped-query attention.
    assert summary["sdpa_backends"] == {"math": 4}
    # Under bf16 autocast SDPA casts them to bf16 first.
    assert traced(tmp_path, config=NF4_LLAMA, method="qlora", amp="bf16")[0]["sdpa_backends"] == {"flash": 4}


def test_double_quantization_dequantizes_the_scales_too(tmp_path):
    # gemm_4bit dequantizes past its kernel's rows (rule 4): with nested scales two fp32
    # tensors of them first, at each of the 7 projections of 2 layers in 2 steps.
    nf4, _ = traced(tmp_path, config=NF4_LLAMA, method="qlora", quant="nf4")
    nf4_dq, _ = traced(tmp_path, config=NF4_LLAMA, method="qlora", quant="nf4-dq")
    assert nf4_dq["kernel_buffers"] - nf4["kernel_buffers"] == 2 * 7 * 2 * 2


def test_qlora_under_ddp_keeps_the_whole_quantized_model(tmp_path):
    _, one = traced(tmp_path, config=NF4_LLAMA, method="qlora")
    summary, two = traced(tmp_path, config=NF4_LLAMA, method="qlora", gpus=2)
    assert "DistributedDataParallel" in summary["notes"][-1]
    assert two.labelled("weights") == one.labelled("weights")


@pytest.mark.parametrize("change, message", [
    (dict(gpus=2, shard="fsdp", method="qlora", quant="nf4"), "sharded QLoRA"),
    (dict(gpus=2, shard="zero2"), "DDP \\(--shard none\\) or FSDP"),
])
def test_layouts_the_hf_tracer_cannot_run_are_refused(tmp_path, change, message):
    with pytest.raises(Unsupported, match=message):
        traced(tmp_path, **change)
