"""The model in hand as vramfit's MODEL: a live ``torch.nn.Module`` (a Hugging Face model,
wrapped by PEFT or not, real or on the meta device) is read where it stands — its Hugging
Face config, every parameter's name, shape and dtype (tied weights once, as a checkpoint
holds them), its PEFT/LoRA adapters (their ranks, and which projections they wrap), its
bitsandbytes 4-bit and 8-bit layers, whether it checkpoints its activations and which
attention it runs — and written as the model folder the command line reads: ``config.json``
and a ``model.safetensors`` whose header lists those tensors (a sparse file: no weight is
written or read). The setup flags it implies (``--weights``, ``--method``, ``--lora-r``,
``--lora-targets``, ``--quant``, ``--task``, ``--grad-ckpt``, ``--attention``) go with it, so
an estimate of the module is the command's estimate of the same folder and flags.

Nothing here imports torch: the module is read through its attributes.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .binding import EXIT_BAD_INPUT, VramfitError

# torch dtype -> (safetensors dtype, bytes per element)
SAFETENSORS = {"torch.float32": ("F32", 4), "torch.bfloat16": ("BF16", 2), "torch.float16": ("F16", 2),
               "torch.float64": ("F64", 8), "torch.float8_e4m3fn": ("F8_E4M3", 1),
               "torch.float8_e5m2": ("F8_E5M2", 1), "torch.int8": ("I8", 1), "torch.uint8": ("U8", 1),
               "torch.int16": ("I16", 2), "torch.int32": ("I32", 4), "torch.int64": ("I64", 8),
               "torch.bool": ("BOOL", 1)}
WEIGHTS = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}
# The model class's suffix -> --task (transformers' naming: modeling_auto.py's mappings).
TASKS = (("ForCausalLM", "causal-lm"), ("LMHeadModel", "causal-lm"),
         ("ForSequenceClassification", "seq-classification"), ("ForMaskedLM", "masked-lm"))
# config._attn_implementation -> --attention
ATTENTION = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash", "flash_attention_3": "flash"}
TARGET_ORDER = ("q", "k", "v", "o", "gate", "up", "down", "head")
# Parameters PEFT adds beside a wrapped layer's own (peft/tuners/lora/layer.py adapter_layer_names),
# and the copies of modules_to_save (peft/utils/other.py ModulesToSaveWrapper).
ADAPTER_PART = re.compile(r"\.(lora_[A-Za-z_]+|modules_to_save)\.")
WRAPPER_PART = re.compile(r"\.(base_layer|original_module)(?=\.)")
# The masked-LM heads of BERT and RoBERTa (modeling_bert.py BertOnlyMLMHead, modeling_roberta.py
# RobertaLMHead, transformers 5.23.0): the command adds them for --task masked-lm (a task head
# belongs to the setup), so the folder holds the encoder without them, as the config describes it.
TASK_HEAD = {"masked-lm": re.compile(r"^(cls|lm_head)\.")}
# transformers 5.23.0 holds a MoE layer's experts fused, gate_up_proj [experts, 2 x width,
# hidden] and down_proj [experts, hidden, width] (integrations/moe.py, conversion_mapping.py);
# its checkpoints, and the command, have one gate, up and down projection per expert.
FUSED_EXPERTS = re.compile(r"^(?P<at>.*\.experts)\.(?P<kind>gate_up_proj|down_proj)$")


@dataclass
class Description:
    """What vramfit reads from a module: the model folder's contents and the flags."""
    name: str
    config: dict[str, Any]
    tensors: list[tuple[str, str, list[int]]]  # name, safetensors dtype, shape
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Folder:
    path: str
    name: str  # the model's own name, for the answers
    options: dict[str, Any]


def _refuse(message: str) -> VramfitError:
    return VramfitError(EXIT_BAD_INPUT, f"vramfit: {message}")


def _hf_config(module: Any) -> Any:
    config = getattr(module, "config", None)
    return config if hasattr(config, "to_json_string") and hasattr(config, "model_type") else None


def find_hf_model(model: Any) -> tuple[Any, Any]:
    """The PEFT wrapper's base model (or the module) and the Hugging Face model within it:
    the module itself, else its first submodule with a Hugging Face config (a LightningModule
    holding one)."""
    base = model.get_base_model() if hasattr(model, "peft_config") and hasattr(model, "get_base_model") else model
    candidates = [base] + [m for _, m in base.named_modules()] if hasattr(base, "named_modules") else [base]
    for module in candidates:
        if _hf_config(module) is not None:
            return base, module
    raise _refuse(f"{type(model).__name__} has no Hugging Face config: vramfit cannot describe its "
                  "architecture; vramfit.trace(model, make_batch) measures it")


def _lora_layers(hf: Any) -> list[tuple[str, Any]]:
    """The layers PEFT's LoRA wraps: their names as the base model's own."""
    return [(WRAPPER_PART.sub("", name), m) for name, m in hf.named_modules()
            if hasattr(m, "lora_A") and hasattr(m, "base_layer") and len(m.lora_A)]


def _targets(hf: Any, names: list[str]) -> str:
    """--lora-targets for the wrapped layers, through the tracer's names of each model
    family's projections (trace/drivers/hf.py: one table for both directions)."""
    from .trace.drivers.hf import FAMILY_OF, TARGETS

    model_type = hf.config.model_type
    patterns = TARGETS.get(model_type) or TARGETS.get(FAMILY_OF.get(model_type, ""), {})
    kinds: set[str] = set()
    for name in names:
        found = {k for k, p in patterns.items() if re.search(p + r"$", name)}
        if name.endswith("lm_head"):
            found.add("head")
        if not found:
            raise _refuse(f"LoRA on {name}: vramfit names the projections of {model_type} models "
                          f"as {', '.join(TARGET_ORDER)} and cannot tell which this is")
        kinds |= found
    return ",".join(k for k in TARGET_ORDER if k in kinds)


def _method(model: Any, hf: Any, quant: str | None) -> dict[str, Any]:
    """--method, and --lora-r and --lora-targets read from the adapted layers."""
    layers = _lora_layers(hf)
    if not layers and hasattr(model, "peft_config"):
        kinds = sorted({str(getattr(c, "peft_type", "?")).split(".")[-1] for c in model.peft_config.values()})
        raise _refuse(f"PEFT {', '.join(kinds)}: vramfit estimates LoRA and DoRA adapters")
    if not layers:
        return {"method": "full"}
    ranks = {int(r) for _, m in layers for r in m.r.values()}
    if len(ranks) != 1:
        raise _refuse(f"LoRA ranks {sorted(ranks)}: vramfit estimates one rank for every layer")
    dora = any(len(getattr(m, "lora_magnitude_vector", ())) for _, m in layers)
    method = "dora" if dora else "qlora" if quant in ("nf4", "nf4-dq") else "lora"
    return {"method": method, "lora_r": ranks.pop(), "lora_targets": _targets(hf, [n for n, _ in layers])}


def _quantization(hf: Any) -> str | None:
    """--quant from the bitsandbytes layers (bitsandbytes/nn/modules.py: Linear4bit's
    Params4bit with its quant_type and compress_statistics, Linear8bitLt's Int8Params)."""
    found: set[str] = set()
    for _, p in hf.named_parameters():
        kind = type(p).__name__
        if kind == "Params4bit":
            if getattr(p, "quant_type", "fp4") != "nf4":
                raise _refuse("4-bit fp4 weights: vramfit estimates nf4 (bnb_4bit_quant_type='nf4')")
            found.add("nf4-dq" if getattr(p, "compress_statistics", False) else "nf4")
        elif kind == "Int8Params":
            found.add("int8")
    if len(found) > 1:
        raise _refuse(f"weights quantized as {' and '.join(sorted(found))}: vramfit estimates one kind")
    return found.pop() if found else None


def _stored(p: Any, weights: str | None) -> tuple[str, list[int]]:
    """A parameter as its checkpoint stores it: a quantized one in the dtype and shape it
    had before bitsandbytes packed it."""
    state = getattr(p, "quant_state", None)
    if type(p).__name__ == "Params4bit" and state is not None:
        return str(state.dtype), [int(n) for n in state.shape]
    if type(p).__name__ in ("Params4bit", "Int8Params") and weights:
        return weights, [int(n) for n in p.shape]
    return str(p.dtype), [int(n) for n in p.shape]


def _weights(params: list[tuple[str, Any]]) -> str | None:
    """The dtype most of the floating-point weights are stored in."""
    counts: dict[str, int] = {}
    for _, p in params:
        if str(p.dtype) in WEIGHTS:
            counts[str(p.dtype)] = counts.get(str(p.dtype), 0) + int(p.numel())
    return max(counts, key=lambda k: counts[k]) if counts else None


def _tensors(hf: Any, task: str | None) -> tuple[list[tuple[str, str, list[int]]], str | None]:
    head = TASK_HEAD.get(task or "")
    own = [(WRAPPER_PART.sub("", n), p) for n, p in hf.named_parameters()  # tied ones once
           if not ADAPTER_PART.search("." + n + ".") and not (head and head.match(n))]
    weights = _weights([(n, p) for n, p in own if type(p).__name__ not in ("Params4bit", "Int8Params")])
    tensors = []
    for name, p in own:
        dtype, shape = _stored(p, weights)
        if dtype not in SAFETENSORS:
            raise _refuse(f"{name}: dtype {dtype} has no safetensors name")
        tensors += _as_checkpointed(name, SAFETENSORS[dtype][0], shape)
    return tensors, weights


def _as_checkpointed(name: str, dtype: str, shape: list[int]) -> list[tuple[str, str, list[int]]]:
    """A tensor as the checkpoint names it: fused experts (FUSED_EXPERTS) one per expert."""
    fused = FUSED_EXPERTS.match(name)
    if not fused or len(shape) != 3:
        return [(name, dtype, shape)]
    at, experts, rows, cols = fused["at"], shape[0], shape[1], shape[2]
    if fused["kind"] == "down_proj":
        return [(f"{at}.{e}.down_proj.weight", dtype, [rows, cols]) for e in range(experts)]
    return [(f"{at}.{e}.{kind}_proj.weight", dtype, [rows // 2, cols])
            for e in range(experts) for kind in ("gate", "up")]


def _task(hf: Any) -> str | None:
    name = type(hf).__name__
    return next((task for suffix, task in TASKS if name.endswith(suffix)), None)


def _checkpointing(hf: Any) -> bool:
    """Whether the model recomputes its layers' activations (transformers 5 names it
    is_activation_checkpointing; is_gradient_checkpointing before)."""
    name = next((a for a in ("is_activation_checkpointing", "is_gradient_checkpointing") if hasattr(type(hf), a)), "")
    return bool(getattr(hf, name, False)) if name else False


def _name(hf: Any) -> str:
    given = str(getattr(hf.config, "name_or_path", "") or "")
    name = os.path.basename(given.rstrip("/")) or type(hf).__name__
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)


def describe(model: Any) -> Description:
    """Reads the module (see the module's first comment)."""
    _, hf = find_hf_model(model)
    config: dict[str, Any] = json.loads(hf.config.to_json_string())
    config.setdefault("architectures", [type(hf).__name__])
    task = _task(hf)
    tensors, weights = _tensors(hf, task)
    quant = _quantization(hf)
    options: dict[str, Any] = {"weights": WEIGHTS.get(weights or ""), "task": task, "quant": quant,
                               "grad_ckpt": "full" if _checkpointing(hf) else None,
                               "attention": ATTENTION.get(str(getattr(hf.config, "_attn_implementation", "")))}
    options.update(_method(model, hf, quant))
    if options["method"] == "full" and any(not p.requires_grad for _, p in hf.named_parameters()):
        warnings.warn("vramfit: some parameters are frozen without adapters; the estimate trains them "
                      "all (--method full)", stacklevel=3)
    return Description(_name(hf), config, tensors, {k: v for k, v in options.items() if v is not None})


def write_safetensors_header(path: str, tensors: list[tuple[str, str, list[int]]]) -> None:
    """A safetensors file with the tensors' header and their bytes' room, sparse: the file has
    the size a checkpoint of them has, and none of their data."""
    header: dict[str, Any] = {}
    offset = 0
    for name, dtype, shape in tensors:
        size = {v[0]: v[1] for v in SAFETENSORS.values()}[dtype]
        for n in shape:
            size *= n
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-aligned, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)


@contextlib.contextmanager
def model_folder(model: Any) -> Iterator[Folder]:
    """The module written as a model folder (config.json, model.safetensors) that lasts as
    long as the context, with the flags it implies."""
    described = describe(model)
    with tempfile.TemporaryDirectory(prefix="vramfit-") as tmp:
        path = os.path.join(tmp, described.name)
        os.mkdir(path)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(described.config, f)
        write_safetensors_header(os.path.join(path, "model.safetensors"), described.tensors)
        yield Folder(path, described.name, described.options)


def name_results(result: Any, path: str, name: str) -> Any:
    """The answer with the temporary folder's path, wherever it names the model, replaced by
    the model's own name."""
    if isinstance(result, str):
        return result.replace(path, name)
    items = result.items() if isinstance(result, dict) else enumerate(result) if isinstance(result, list) else ()
    for key, value in list(items):
        result[key] = name_results(value, path, name)
    return result
