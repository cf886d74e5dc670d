"""The torchtune driver on tiny configs: the single-device recipes' own setup() and train()
run, and what they keep on the device is measured."""
import os

import pytest

from conftest import TINY, Events
from vramfit.trace.__main__ import trace
from vramfit.trace.spec import Gpu, Spec, Unsupported

pytest.importorskip("torchtune")  # this file runs in the torchtune environment only

from vramfit.trace.drivers import torchtune as tt  # noqa: E402

# hidden 256 and 512: every weight is a whole number of torchao's NF4 units (64 x 256)
NF4_LLAMA = os.path.join(TINY, "tiny-llama-nf4", "config.json")


def spec(**kw):
    base = dict(model="tiny", config=NF4_LLAMA, framework="torchtune", weights="bf16",
                batch=2, seq=128, lengths="fixed")
    base.update(kw)
    return Spec(**base)


def run(tmp_path, **kw):
    summary = trace(spec(**kw), str(tmp_path / "events"))
    return summary, Events((tmp_path / "events").read_text().splitlines()[1:])


def test_full_finetune_runs_two_steps_of_the_recipe(tmp_path):
    summary, events = run(tmp_path)
    assert summary["framework"]["name"] == "torchtune"
    assert summary["framework"]["version"].startswith("0.6.1")
    assert "FullFinetuneRecipeSingleDevice" in summary["notes"][0]
    assert events.phases == ["load"] + ["forward", "loss", "backward", "optimizer"] * 2
    assert summary["sdpa_backends"] == {"flash": 4}  # causal, no mask: 2 layers x 2 steps
    # fused AdamW keeps two bf16 states per weight, as large as the weights
    params = events.labelled("weights")
    assert events.labelled("gradients") == pytest.approx(params, rel=0.01)
    assert events.labelled("optimizer") == pytest.approx(2 * params, rel=0.01)


def test_accumulation_runs_every_micro_batch(tmp_path):
    _, events = run(tmp_path, accumulation=3)
    assert events.phases.count("forward") == 6
    assert events.phases.count("optimizer") == 2


def test_lora_trains_only_the_adapters(tmp_path):
    summary, events = run(tmp_path, method="lora", lora_r=8, lora_targets=["q", "v"])
    assert "lora_llama2" in summary["notes"][0]
    # A [8, 256] and B [out, 8] for q (out 256) and v (out 128), in 2 layers, bf16
    adapters = 2 * 2 * (8 * 256 + 256 * 8 + 8 * 256 + 128 * 8)
    assert events.labelled("gradients") == adapters
    assert events.labelled("optimizer") == pytest.approx(2 * adapters, rel=0.02)


def test_qlora_keeps_the_base_weights_in_nf4(tmp_path):
    _, lora = run(tmp_path, method="lora", lora_targets=["q", "k", "v", "o", "gate", "up", "down"])
    _, qlora = run(tmp_path, method="qlora", quant="nf4-dq",
                   lora_targets=["q", "k", "v", "o", "gate", "up", "down"])
    # per layer: q, o 256x256; k, v 128x256; w1, w2, w3 512x256
    linear = 2 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256)
    # NF4: half a byte per weight, an int8 scaler per 64 and a bf16 factor per 256 scalers
    nf4 = linear * (0.5 + 1 / 64 + 2 / (64 * 256))
    saved = lora.live_at("forward") - qlora.live_at("forward")
    assert saved == pytest.approx(2 * linear - nf4, rel=0.01)


def test_dora_adds_magnitudes(tmp_path):
    _, lora = run(tmp_path, method="lora")
    _, dora = run(tmp_path, method="dora")
    # one magnitude vector per adapted projection: q (256) and v (128) in 2 layers, bf16
    assert dora.labelled("gradients") - lora.labelled("gradients") == 2 * (256 + 128) * 2


def test_activation_checkpointing_lowers_the_peak(tmp_path):
    _, plain = run(tmp_path, batch=4, seq=1024)
    _, ckpt = run(tmp_path, batch=4, seq=1024, grad_ckpt="full")
    # with checkpointing, only each layer's input [4, 1024, 256] bf16 waits for the backward
    # (the second step: the first also makes the cuBLAS workspace)
    kept = lambda e: e.live_at("loss", 1) - e.live_at("forward", 1)
    assert kept(ckpt) < kept(plain) / 4
    assert ckpt.peak < plain.peak


def test_activation_offloading_moves_checkpointed_inputs_off_the_device(tmp_path):
    _, ckpt = run(tmp_path, batch=4, seq=1024, grad_ckpt="full")
    _, offload = run(tmp_path, batch=4, seq=1024, grad_ckpt="full", offload=["activations"])
    layer_input = 4 * 1024 * 256 * 2
    assert offload.live_at("loss") <= ckpt.live_at("loss") - layer_input


def test_eight_bit_adamw_keeps_byte_states(tmp_path):
    _, adamw = run(tmp_path)
    _, eight = run(tmp_path, optimizer="adamw-8bit")
    # bf16 AdamW: 2 x 2 bytes per weight; 8-bit: 2 x 1 byte and an fp32 absmax per 256
    assert eight.labelled("optimizer") == pytest.approx(
        adamw.labelled("optimizer") * (2 + 8 / 256) / 4, rel=0.01)


def test_varied_lengths_run_a_shorter_first_step(tmp_path):
    _, fixed = run(tmp_path, seq=512, lengths="fixed")
    _, varied = run(tmp_path, seq=512, lengths="varied")
    step = lambda e, n: e.live_at("loss", n) - e.live_at("forward", n)
    assert step(varied, 0) < step(fixed, 0)
    assert step(varied, 1) == step(fixed, 1)  # the second step's batches are --seq long


# One layer of tiny-llama-nf4 in bf16: q, o 256x256; k, v 128x256; w1, w3 512x256; w2
# 256x512; two norms of 256.
LAYER_BYTES = 2 * (2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256 + 2 * 256)


def test_fsdp_keeps_a_shard_of_every_state_on_each_gpu(tmp_path):
    _, one = run(tmp_path)
    summary, four = run(tmp_path, gpus=4, shard="fsdp")
    assert "FullFinetuneRecipeDistributed" in summary["notes"][0]
    assert four.phases == one.phases
    assert four.labelled("weights") == one.labelled("weights") // 4
    assert four.labelled("gradients") == one.labelled("gradients") // 4
    # fused AdamW's step counters (one fp32 scalar per parameter) are not sharded
    assert four.labelled("optimizer") == pytest.approx(one.labelled("optimizer") / 4, rel=1e-3)


def test_fsdp_gathers_each_layer_and_reduce_scatters_its_gradients(tmp_path):
    _, events = run(tmp_path, gpus=4, shard="fsdp")
    # each layer's forward gathers its whole weights into one buffer (2 layers, 2 steps);
    # its backward gathers them again (reshard_after_forward) and reduce-scatters the
    # whole gradients into a quarter (FSDP2 foreach_all_gather, foreach_reduce)
    assert events.made_in["forward"].count(LAYER_BYTES) == 4
    assert events.made_in["backward"].count(LAYER_BYTES) == 8
    assert events.made_in["backward"].count(LAYER_BYTES // 4) == 4


def test_fsdp_lora_runs_the_distributed_lora_recipe(tmp_path):
    summary, events = run(tmp_path, gpus=2, shard="fsdp", method="lora", lora_targets=["q", "v"])
    assert "LoRAFinetuneRecipeDistributed" in summary["notes"][0]
    adapters = 2 * 2 * (8 * 256 + 256 * 8 + 8 * 256 + 128 * 8)
    assert events.labelled("gradients") == adapters // 2


@pytest.mark.parametrize("config, expected", [
    ({"model_type": "llama"}, "llama2"),
    ({"model_type": "llama", "rope_theta": 500000.0}, "llama3"),
    ({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "llama3_1"),
    ({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 32.0},
      "tie_word_embeddings": True}, "llama3_2"),
    ({"model_type": "llama", "vocab_size": 128256, "max_position_embeddings": 8192}, "llama3"),
    ({"model_type": "llama", "vocab_size": 128256, "max_position_embeddings": 131072,
      "tie_word_embeddings": True}, "llama3_2"),
    ({"model_type": "qwen2"}, "qwen2"),
    ({"model_type": "gemma2"}, "gemma2"),
])
def test_each_family_gets_torchtunes_builder(config, expected):
    assert tt.family(config) == expected


def test_lora_targets_become_torchtunes_flags():
    args = tt.lora_arguments(spec(method="lora", lora_targets=["q", "o", "gate", "up", "down"]), {})
    assert args["lora_attn_modules"] == ["q_proj", "output_proj"]
    assert args["apply_lora_to_mlp"] and not args["apply_lora_to_output"]
    assert args["lora_alpha"] == 2 * args["lora_rank"]
    every = tt.lora_arguments(spec(method="lora", lora_targets=["all-linear"]), {})
    assert every["lora_attn_modules"] == ["q_proj", "k_proj", "v_proj", "output_proj"]
    assert every["apply_lora_to_mlp"] and not every["apply_lora_to_output"]


@pytest.mark.parametrize("change, message", [
    (dict(amp="bf16"), "no autocast"),
    (dict(weights="fp16"), "refuse fp16"),
    (dict(gpu=Gpu(name="Tesla V100", capability=(7, 0))), "capability 8.0"),
    (dict(attention="eager"), "always"),
    (dict(grad_ckpt="selective"), "whole layers"),
    (dict(optimizer="paged-adamw-8bit"), "managed"),
    (dict(method="lora", lora_targets=["gate"]), "as a whole"),
    (dict(method="qlora", quant="nf4"), "double-quantizes"),
    (dict(method="full", quant="nf4-dq"), "LoRA models"),
    (dict(offload=["activations"]), "grad-ckpt full"),
    (dict(config=os.path.join(TINY, "tiny-bert", "config.json")), "no model builder"),
    (dict(seq=8192), "positions"),
    (dict(method="qlora", config=os.path.join(TINY, "tiny-llama", "config.json")), "multiple"),
    (dict(gpus=4), "always shard with FSDP2"),
    (dict(gpus=4, shard="fsdp", optimizer="adamw-8bit"), "DTensors"),
])
def test_setups_torchtune_cannot_run_are_refused(tmp_path, change, message):
    with pytest.raises(Unsupported, match=message):
        run(tmp_path, **change)
