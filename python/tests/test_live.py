"""vramfit.estimate and vramfit.plan of a live module (vramfit/live.py): the structure read
from the module equals the command's estimate of the config.json it came from, with the
flags the module implies; PEFT ranks and targets, bitsandbytes layers, tied weights and
gradient checkpointing are read from the module; what cannot be described is refused with a
ValueError. Runs in the hf environment; needs the plain build (build/libvramfit.so and
build/vramfit)."""
from __future__ import annotations

import os
import subprocess
from typing import Any

import peft
import pytest
import torch
import transformers
from cli_json import ROOT, cli

import vramfit
from vramfit.live import describe


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


def quantized_4bit(model: Any) -> Any:
    """Every projection of the layers a bitsandbytes nf4 layer with double quantization, as
    from_pretrained(quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)) makes them."""
    import bitsandbytes as bnb

    for layer in model.model.layers:
        for block in (layer.self_attn, layer.mlp):
            for name, proj in list(block.named_children()):
                if isinstance(proj, torch.nn.Linear):
                    setattr(block, name, bnb.nn.Linear4bit(proj.in_features, proj.out_features, bias=False,
                                                           compute_dtype=torch.bfloat16, quant_type="nf4",
                                                           compress_statistics=True, device="meta"))
    return model


def test_bitsandbytes_4bit_layers_make_qlora(tmp_path):
    base = quantized_4bit(llama(False))
    model = peft.get_peft_model(base, peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
    described = describe(model)
    assert described.options["quant"] == "nf4-dq" and described.options["method"] == "qlora"
    shapes = {name: (dtype, shape) for name, dtype, shape in described.tensors}
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == ("BF16", [256, 256])
    assert not any("lora_" in name or "base_layer" in name for name in shapes)
    live = vramfit.estimate(model, batch=2, seq=256)
    command = cli("estimate", config_file(base, tmp_path), "--batch", "2", "--seq", "256", "--weights", "bf16",
                  "--task", "causal-lm", "--attention", "sdpa", "--quant", "nf4-dq", "--method", "qlora",
                  "--lora-r", "8", "--lora-targets", "q,v")
    same_estimate(live, command)
    assert live["setup"]["quant"] == "nf4-dq" and live["setup"]["method"] == "qlora"


CATALOGUE = os.path.join(ROOT, "data", "models")


def from_catalogue(name: str, tmp_path) -> tuple[Any, str]:
    """The catalogue's config.json of NAME read by transformers (AutoConfig) and its model made
    on the meta device, as a user makes one from a Hub id without downloading weights."""
    folder = tmp_path / name
    folder.mkdir()
    with open(os.path.join(CATALOGUE, name + ".json")) as f:
        (folder / "config.json").write_text(f.read())
    config = transformers.AutoConfig.from_pretrained(str(folder))
    auto = transformers.AutoModelForMaskedLM if config.model_type in ("bert", "roberta") else \
        transformers.AutoModelForCausalLM
    with torch.device("meta"):
        return auto.from_config(config, dtype=torch.bfloat16), str(folder / "config.json")


# Decoders of each family, mixture-of-experts ones (transformers holds their experts fused), an
# encoder: the command's estimate of the catalogue's config.json is the live model's.
@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-0.5b", "gemma-3-1b", "phi-4", "gpt2", "pythia-1b",
                                  "falcon-7b", "mixtral-8x7b", "qwen3-30b-a3b", "bert-base-uncased"])
def test_catalogue_models_on_the_meta_device(name, tmp_path):
    model, config = from_catalogue(name, tmp_path)
    live = vramfit.estimate(model, batch=2, seq=512)
    flags = [f for k, v in describe(model).options.items() for f in ("--" + k.replace("_", "-"), str(v))]
    command = cli("estimate", config, "--batch", "2", "--seq", "512", *flags)
    assert live["model"]["params"] == sum(p.numel() for p in model.parameters())
    if name == "bert-base-uncased":  # the command counts a pooler BertForMaskedLM does not have
        command["model"]["params"] -= 768 * 768 + 768
        command["model"]["trainable_params"] -= 768 * 768 + 768
    same_estimate(live, command)


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


@pytest.mark.parametrize("bad, flags", [({"batch": 0}, ["--batch", "0"]), ({"seq": "long"}, ["--seq", "long"]),
                                        ({"gpu": "no-such-gpu"}, ["--gpu", "no-such-gpu"]),
                                        ({"weights": "fp13"}, ["--weights", "fp13"])])
def test_bad_arguments_raise_the_commands_message(bad, flags, tmp_path):
    model = llama()
    with pytest.raises(ValueError) as e:
        vramfit.estimate(model, **bad)
    run = subprocess.run([os.environ.get("VRAMFIT", os.path.join(ROOT, "build", "vramfit")), "estimate",
                          config_file(model, tmp_path), *flags, "--json"], capture_output=True, text=True)
    assert run.returncode == 2 and str(e.value) == run.stderr.strip()
