"""vramfit.estimate and vramfit.plan of a live module (vramfit/live.py): the structure read
from the module equals the command's estimate of the config.json it came from, with the
flags the module implies; PEFT ranks and targets, bitsandbytes layers, tied weights and
gradient checkpointing are read from the module; what cannot be described is refused with a
ValueError. Runs in the hf environment; needs the plain build (build/libvramfit.so and
build/vramfit)."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import peft
import pytest
import torch
import transformers

import vramfit
from vramfit.live import describe

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def cli(*args: str) -> dict[str, Any]:
    binary = os.environ.get("VRAMFIT", os.path.join(ROOT, "build", "vramfit"))
    run = subprocess.run([binary, *args, "--json"], capture_output=True, text=True)
    assert run.returncode in (0, 1), run.stderr
    result: dict[str, Any] = json.loads(run.stdout)
    return result


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def llama(tied: bool = True, **kw: Any) -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=4, vocab_size=32000,
                                      tie_word_embeddings=tied, **kw)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def config_file(model: Any, tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(model.config.to_json_string())
    return str(path)


def same_estimate(live: dict[str, Any], command: dict[str, Any]) -> None:
    assert live["model"]["params"] == command["model"]["params"]
    assert live["model"]["trainable_params"] == command["model"]["trainable_params"]
    for key in ("allocated_bytes", "reserved_bytes", "device_bytes"):
        assert abs(live["peak"][key] - command["peak"][key]) <= 0.01 * command["peak"][key], key


def test_a_model_on_the_meta_device_is_the_commands_config(tmp_path):
    model = llama()
    live = vramfit.estimate(model, batch=2, seq=256)
    command = cli("estimate", config_file(model, tmp_path), "--batch", "2", "--seq", "256", "--weights", "bf16",
                  "--task", "causal-lm", "--attention", "sdpa", "--method", "full")
    same_estimate(live, command)
    assert live["model"]["params"] == sum(p.numel() for p in model.parameters())
    assert live["model"]["name"] == "LlamaForCausalLM" and live["setup"]["model"] == "LlamaForCausalLM"
    assert live["setup"]["weights"] == "bf16"


def test_tied_weights_are_counted_once():
    tied, untied = vramfit.estimate(llama(True)), vramfit.estimate(llama(False))
    assert untied["model"]["params"] - tied["model"]["params"] == 32000 * 256


def test_lora_rank_and_targets_come_from_the_adapters(tmp_path):
    base = llama()
    model = peft.get_peft_model(base, peft.LoraConfig(r=16, target_modules=["q_proj", "v_proj", "down_proj"]))
    assert describe(model).options == {"weights": "bf16", "task": "causal-lm", "attention": "sdpa",
                                       "method": "lora", "lora_r": 16, "lora_targets": "q,v,down"}
    live = vramfit.estimate(model, batch=1, seq=128)
    command = cli("estimate", config_file(base, tmp_path), "--batch", "1", "--seq", "128", "--weights", "bf16",
                  "--task", "causal-lm", "--attention", "sdpa", "--method", "lora", "--lora-r", "16",
                  "--lora-targets", "q,v,down")
    same_estimate(live, command)
    assert live["model"]["trainable_params"] == sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_dora_all_linear_and_checkpointing():
    base = llama(False)
    base.gradient_checkpointing_enable()
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules="all-linear", use_dora=True))
    options = describe(model).options
    assert options["method"] == "dora" and options["lora_targets"] == "q,k,v,o,gate,up,down"
    assert options["grad_ckpt"] == "full"


def test_bitsandbytes_4bit_layers_make_qlora():
    import bitsandbytes as bnb

    model = llama(False)
    for layer in model.model.layers:
        proj = layer.self_attn.q_proj
        layer.self_attn.q_proj = bnb.nn.Linear4bit(proj.in_features, proj.out_features, bias=False,
                                                   compute_dtype=torch.bfloat16, quant_type="nf4",
                                                   compress_statistics=True, device="meta")
    model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    described = describe(model)
    assert described.options["quant"] == "nf4-dq" and described.options["method"] == "qlora"
    shapes = {name: (dtype, shape) for name, dtype, shape in described.tensors}
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == ("BF16", [256, 256])
    assert not any("lora_" in name or "base_layer" in name for name in shapes)


def test_plan_of_a_live_model():
    got = vramfit.plan(llama(), gpu="24GiB", seq=512)
    assert got["recommended"]["batch"] >= 1 and got["given"]["weights"] == "bf16"


def test_what_cannot_be_described_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"no Hugging Face config.*vramfit\.trace"):
        vramfit.estimate(torch.nn.Linear(4, 4))
    with pytest.raises(vramfit.VramfitError, match="--batch") as e:
        vramfit.estimate(llama(), batch=0)
    assert e.value.code == 2
    model = peft.get_peft_model(llama(), peft.LoraConfig(r=8, target_modules=["q_proj"],
                                                         rank_pattern={"layers.0.self_attn.q_proj": 4}))
    with pytest.raises(ValueError, match=r"LoRA ranks \[4, 8\]"):
        vramfit.estimate(model)
