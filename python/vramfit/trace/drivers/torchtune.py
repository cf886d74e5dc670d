"""torchtune, trained by its own single-device recipes.

``recipes/full_finetune_single_device.py`` (full) and ``recipes/lora_finetune_single_device.py``
(LoRA, DoRA, QLoRA), installed with the torchtune wheel next to the package, are loaded from
their files as ``tune run`` loads them and driven through their own ``setup()`` and
``train()`` with an OmegaConf config built from the setup the way torchtune's shipped
configs are written (``recipes/configs/*/*_single_device.yaml``). The model is the
component builder torchtune's own model builders call for the family, given the
config.json's dimensions; the recipe builds it on the device itself. What the tracer
brings is only what a run reads from disk: a checkpoint (CPU tensors of the right shapes,
as the checkpointers load them), a tokenizer that knows its padding id, and a dataset of
token ids of the right lengths; plus phase markers (module hooks and an optimizer hook).
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import tempfile
from typing import Any

from ..spec import Spec, Unsupported
from . import FrameworkMissing, Run

# bitsandbytes serves the 8-bit AdamW of torchtune's configs; it must choose its CPU
# backend before the fake device exists (drivers.preload), so it is preloaded when present.
PACKAGES = ("torchtune", "torchao", "omegaconf") + (
    ("bitsandbytes",) if importlib.util.find_spec("bitsandbytes") else ())

RECIPES = {"full": ("full_finetune_single_device", "FullFinetuneRecipeSingleDevice"),
           "lora": ("lora_finetune_single_device", "LoRAFinetuneRecipeSingleDevice")}
# The distributed recipes (``tune run --nproc_per_node N``), which shard with FSDP2
# (training/_distributed.py ``shard_model``: fully_shard per layer, then the model).
DISTRIBUTED_RECIPES = {"full": ("full_finetune_distributed", "FullFinetuneRecipeDistributed"),
                       "lora": ("lora_finetune_distributed", "LoRAFinetuneRecipeDistributed")}

# The optimizers of torchtune's single-device configs (torch.optim.AdamW with fused=True in
# most, bitsandbytes' 8-bit AdamW in the low-memory ones) and their stand-ins for the rest;
# "none" is SGD without momentum, which keeps no state.
OPTIMIZERS: dict[str, dict[str, Any]] = {
    "adamw": {"_component_": "torch.optim.AdamW", "fused": True, "weight_decay": 0.01},
    "adamw-8bit": {"_component_": "bitsandbytes.optim.AdamW8bit", "weight_decay": 0.01},
    "adafactor": {"_component_": "torch.optim.Adafactor"},
    "sgd": {"_component_": "torch.optim.SGD"},
    "sgd-momentum": {"_component_": "torch.optim.SGD", "momentum": 0.9},
    "lion": {"_component_": "bitsandbytes.optim.Lion"},
    "none": {"_component_": "torch.optim.SGD"},
}

# torchtune's projection names for vramfit's kinds (torchtune/modules/peft/_utils.py).
ATTENTION_TARGETS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "output_proj"}
MLP_TARGETS = {"gate", "up", "down"}

# torchao's NF4Tensor quantizes in blocks of 64 elements and double-quantizes their scalers
# 256 at a time, so it takes only weights whose size is a multiple of both.
NF4_UNIT = 64 * 256


# ---- the model -------------------------------------------------------------------------------
def family(config: dict[str, Any]) -> str:
    """The torchtune model package whose builders make this Hugging Face model, as
    torchtune's model builders (``torchtune/models/*/_model_builders.py``) pair them:
    Llama 2 and Code Llama use ``llama2``, Llama 3 ``llama3``, Llama 3.1 and 3.3 (llama3
    RoPE scaling, untied head) ``llama3_1``, Llama 3.2 (the same, tied) ``llama3_2``;
    Qwen 2 and 2.5 ``qwen2``; Phi-3 and Phi-4 ``phi3``."""
    model_type = config.get("model_type", "")
    if model_type == "llama":
        return _llama_generation(config)
    if model_type in ("mistral", "qwen2", "gemma", "gemma2", "phi3"):
        return model_type
    raise Unsupported(f"model type '{model_type}': torchtune 0.6 has no model builder for it "
                      "(llama2/3/3.1/3.2, mistral, qwen2, gemma, gemma2, phi3 are built)")


def _llama_generation(config: dict[str, Any]) -> str:
    """Llama 3 configs say so by their RoPE (theta 500,000; the llama3 scaling from 3.1 on)
    or, where those fields are left out (vramfit's catalogue), by the Llama 3 tokenizer's
    128,256 ids; 3.1 and 3.2 have 131,072 positions, 3.0 8,192."""
    scaling = config.get("rope_scaling") or {}
    scaled = (scaling.get("rope_type") or scaling.get("type")) == "llama3"
    llama3 = config.get("rope_theta", 10000.0) >= 500000 or config.get("vocab_size", 0) >= 128000
    if scaled or (llama3 and config.get("max_position_embeddings", 0) > 8192):
        return "llama3_2" if config.get("tie_word_embeddings") else "llama3_1"
    return "llama3" if llama3 else "llama2"


def dimensions(config: dict[str, Any], fam: str) -> dict[str, Any]:
    """The component builder's arguments from config.json, named as torchtune names them."""
    heads = config["num_attention_heads"]
    dims: dict[str, Any] = {
        "vocab_size": config["vocab_size"], "num_layers": config["num_hidden_layers"],
        "num_heads": heads, "num_kv_heads": config.get("num_key_value_heads") or heads,
        "embed_dim": config["hidden_size"], "intermediate_dim": config["intermediate_size"],
        "max_seq_len": config.get("max_position_embeddings", 4096),
        "norm_eps": config.get("rms_norm_eps", 1e-5),
    }
    if "rope_theta" in config:
        dims["rope_base"] = config["rope_theta"]
    if "tie_word_embeddings" in config:
        dims["tie_word_embeddings"] = bool(config["tie_word_embeddings"])
    scaling = config.get("rope_scaling") or {}
    if "factor" in scaling:
        dims["scale_factor"] = scaling["factor"]
    if fam in ("gemma", "gemma2"):
        dims["head_dim"] = config.get("head_dim") or config["hidden_size"] // heads
    if fam == "gemma2":
        dims.update(hidden_capping_value=config.get("attn_logit_softcapping") or 50.0,
                    final_capping_value=config.get("final_logit_softcapping") or 30.0,
                    sliding_window_size=config.get("sliding_window") or 4096,
                    query_pre_attn_scalar=config.get("query_pre_attn_scalar"))
    return dims


def check_nf4(dims: dict[str, Any]) -> None:
    head_dim = dims.get("head_dim") or dims["embed_dim"] // dims["num_heads"]
    rows = {"q_proj": dims["num_heads"] * head_dim, "k_proj": dims["num_kv_heads"] * head_dim,
            "w1": dims["intermediate_dim"]}
    for name, n in rows.items():
        if n * dims["embed_dim"] % NF4_UNIT:
            raise Unsupported(f"--method qlora: torchao's NF4 takes weights whose size is a "
                              f"multiple of {NF4_UNIT}; {name} is {n} x {dims['embed_dim']}")


def builder(fam: str, lora: bool) -> str:
    return f"torchtune.models.{fam}.{'lora_' if lora else ''}{fam}"


def accepted(path: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments the builder takes (lora_llama2 has no rope_base, gemma no tie flag)."""
    module, _, name = path.rpartition(".")
    params = inspect.signature(getattr(importlib.import_module(module), name)).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def lora_arguments(spec: Spec, dims: dict[str, Any]) -> dict[str, Any]:
    """What the LoRA configs add to the model section (lora_rank, lora_alpha = 2 x rank,
    lora_dropout 0.0, as every single-device config of 0.6.1 has them)."""
    targets = (["q", "k", "v", "o", "gate", "up", "down"] if spec.lora_targets == ["all-linear"]
               else spec.lora_targets)
    mlp = MLP_TARGETS & set(targets)
    if mlp and mlp != MLP_TARGETS:
        raise Unsupported(f"--lora-targets {','.join(sorted(mlp))}: torchtune adapts the MLP as a "
                          "whole (apply_lora_to_mlp); name gate, up and down together")
    if "head" in targets and dims.get("tie_word_embeddings"):
        raise Unsupported("--lora-targets head: the output projection is tied to the embedding; "
                          "torchtune adapts no tied head")
    return {"lora_attn_modules": [ATTENTION_TARGETS[t] for t in targets if t in ATTENTION_TARGETS],
            "apply_lora_to_mlp": bool(mlp), "apply_lora_to_output": "head" in targets,
            "lora_rank": spec.lora_r, "lora_alpha": 2 * spec.lora_r, "lora_dropout": 0.0,
            "use_dora": spec.method == "dora", "quantize_base": spec.quantized}


# ---- what a run reads from disk --------------------------------------------------------------
class Checkpointer:
    """Stands in for torchtune's checkpointers: ``load_checkpoint()`` gives the base model's
    state dict as CPU tensors of the checkpoint's shapes and stored dtype (config.json's
    torch_dtype; FullModelHFCheckpointer loads with map_location cpu and converts to
    torchtune's names), which the recipe copies into the model it built on the device (an
    NF4 weight takes the copy onto the device first, to quantize it). On the fake device
    CPU tensors hold no memory."""

    def __init__(self, builder: str, dims: dict[str, Any], dtype: str, model_type: str,
                 should_load_recipe_state: bool = False, **_: Any) -> None:
        self.builder, self.dims, self.dtype = builder, dims, dtype
        self.model_type = model_type

    def load_checkpoint(self) -> dict[str, Any]:
        import torch
        from torchtune import config, training

        dtype = getattr(torch, self.dtype)
        with torch.device("meta"):
            base = config._utils._get_component_from_path(self.builder)(**self.dims)
        state = {name: torch.empty(t.shape, dtype=dtype, device="cpu")
                 for name, t in base.state_dict().items()}
        return {training.MODEL_KEY: state}

    def save_checkpoint(self, *_: Any, **__: Any) -> None:
        """Saving comes after the traced steps."""


class Tokenizer:
    """The recipe asks its tokenizer only for the padding id (the collate function's)."""

    def __init__(self, max_seq_len: int, pad_id: int = 0) -> None:
        self.max_seq_len = max_seq_len
        self.pad_id = pad_id


class Samples:
    """A map-style dataset of token ids: every sample of a micro batch as long as that
    micro batch's longest (``Spec.longest``: ``longest``, one per micro batch of the run),
    so padded_collate_sft pads each batch to its own length as real data does. With many
    GPUs each rank's DistributedSampler takes every ``ranks``-th sample (shuffle off), so
    there are ``ranks`` times as many."""

    def __init__(self, tokenizer: Tokenizer, batch: int, longest: list[int], ranks: int = 1) -> None:
        self.batch, self.longest, self.ranks = batch, longest, ranks

    def __len__(self) -> int:
        return self.batch * len(self.longest) * self.ranks

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        length = self.longest[i // (self.batch * self.ranks)]
        return {"tokens": [1] * length, "labels": [1] * length}


# ---- the recipe's config ---------------------------------------------------------------------
def _refuse(spec: Spec) -> None:
    refusals = [
        (spec.task != "causal-lm", f"--task {spec.task}: the single-device recipes fine-tune "
                                   "causal language models only"),
        (spec.weights == "fp16", "--weights fp16: the recipes refuse fp16 (no gradient scaling); "
                                 "use bf16 or fp32"),
        (spec.amp != "none", f"--amp {spec.amp}: torchtune has no autocast; the weights' dtype "
                             "is the compute dtype (--weights bf16 trains in bf16)"),
        (spec.weights == "bf16" and tuple(spec.gpu.capability) < (8, 0),
         "--weights bf16: torchtune refuses bf16 below compute capability 8.0 "
         "(training/precision.py verify_bf16_support)"),
        (spec.attention == "eager", "--attention eager: torchtune's attention is always "
                                    "scaled_dot_product_attention"),
        (spec.attention == "flash", "--attention flash: torchtune does not use flash-attn; its "
                                    "SDPA picks the flash kernel where the inputs allow"),
        (spec.grad_ckpt == "selective", "--grad-ckpt selective: the single-device recipes "
                                        "checkpoint whole layers only (the distributed full "
                                        "recipe's ac_mode is not traced)"),
        (spec.loss == "fused", "--loss fused: torchtune 0.6 has no fused cross-entropy"),
        (spec.optimizer_in_bwd and spec.lora, "--optimizer-in-bwd yes: torchtune's LoRA recipes "
                                              "have no optimizer_in_bwd"),
        (spec.optimizer == "paged-adamw-8bit",
         "--optimizer paged-adamw-8bit: bitsandbytes keeps paged states in CUDA managed "
         "memory, outside the caching allocator, which the fake device cannot make"),
        (spec.method in ("adapter", "adapter-v2"), f"--method {spec.method}: LLaMA-Adapter is "
                                                   "litgpt's; torchtune has no such method"),
        (spec.quantized and not spec.lora, f"--quant {spec.quant}: torchtune quantizes only the "
                                           "frozen base weights of LoRA models (--method qlora)"),
        (spec.quant in ("nf4", "int8"), f"--quant {spec.quant}: torchtune's QLoRA is torchao's "
                                        "NF4Tensor, which always double-quantizes (nf4-dq)"),
        (set(spec.offload) - {"activations"}, "--offload: torchtune's single-device recipes "
                                              "offload activations only"),
        ("activations" in spec.offload and spec.grad_ckpt != "full",
         "--offload activations: the recipes offload only with --grad-ckpt full"),
    ]
    for refused, why in refusals:
        if refused:
            raise Unsupported(why)
    optimizer = OPTIMIZERS[spec.optimizer]["_component_"]
    if optimizer.startswith("bitsandbytes") and "bitsandbytes" not in PACKAGES:
        raise FrameworkMissing(f"--optimizer {spec.optimizer}: the Python package 'bitsandbytes' "
                               "is not installed in the tracer's environment (make trace-env)")


def recipe_config(spec: Spec, model_config: dict[str, Any], out_dir: str) -> dict[str, Any]:
    fam = family(model_config)
    dims = dimensions(model_config, fam)
    if spec.seq > dims["max_seq_len"]:
        raise Unsupported(f"--seq {spec.seq}: longer than the model's {dims['max_seq_len']} "
                          "positions (max_position_embeddings)")
    base = builder(fam, lora=False)
    if dims.get("tie_word_embeddings") and "tie_word_embeddings" not in accepted(base, dims) \
            and fam not in ("gemma", "gemma2"):  # Gemma's builders always tie
        raise Unsupported(f"model: it ties its output projection to the embedding; torchtune's "
                          f"{fam} builders make an untied one")
    model = {"_component_": builder(fam, spec.lora), **dims}
    if spec.lora:
        model.update(lora_arguments(spec, dims))
    if spec.quantized:
        check_nf4(dims)
    optimizer = {**OPTIMIZERS[spec.optimizer], "lr": 3e-4 if spec.lora else 2e-5}
    cfg: dict[str, Any] = {
        "output_dir": out_dir,
        "model": accepted(model["_component_"], model) | {"_component_": model["_component_"]},
        "tokenizer": {"_component_": f"{__name__}.Tokenizer", "max_seq_len": spec.seq},
        "checkpointer": {"_component_": f"{__name__}.Checkpointer", "builder": base,
                         "dims": accepted(base, dims),
                         "dtype": stored_dtype(model_config),
                         "model_type": fam.upper()},
        "resume_from_checkpoint": False,
        "save_adapter_weights_only": False,
        "dataset": {"_component_": f"{__name__}.Samples", "batch": spec.batch,
                    "longest": [spec.longest(m) for m in range(spec.micro_batches)],
                    "ranks": spec.gpus},
        "seed": 0, "shuffle": False, "batch_size": spec.batch,
        "optimizer": optimizer,
        "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
        "epochs": 1, "max_steps_per_epoch": spec.steps,
        "gradient_accumulation_steps": spec.accumulation,
        "optimizer_in_bwd": spec.optimizer_in_bwd,
        "clip_grad_norm": None, "compile": False,
        "metric_logger": {"_component_": "torchtune.training.metric_logging.DiskLogger",
                          "log_dir": os.path.join(out_dir, "logs")},
        "log_every_n_steps": 1, "log_peak_memory_stats": True,
        "device": "cuda", "dtype": spec.weights,
        "enable_activation_checkpointing": spec.grad_ckpt == "full",
        # OffloadActivations (training/_activation_offloading.py) copies each saved
        # activation to the CPU on a side stream and keeps the last five alive until their
        # copies end; on the one-stream fake device every copy has ended when it returns,
        # so its own stash, not stream timing, decides what stays on the GPU.
        "enable_activation_offloading": "activations" in spec.offload,
        "profiler": {"_component_": "torchtune.training.setup_torch_profiler", "enabled": False},
    }
    if spec.lora:  # the LoRA configs' schedule (the full ones have none)
        cfg["lr_scheduler"] = {
            "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
            "num_warmup_steps": 100}
    return cfg


def stored_dtype(config: dict[str, Any]) -> str:
    stored = config.get("torch_dtype")
    return stored if stored in ("bfloat16", "float16", "float32") else "bfloat16"


def check_layout(spec: Spec) -> None:
    """Many GPUs run the distributed recipes, which always shard (FSDP2): there is no
    plain data-parallel recipe."""
    if spec.shard != "fsdp":
        raise Unsupported(f"--gpus {spec.gpus} --shard {spec.shard}: torchtune's distributed "
                          "recipes always shard with FSDP2 (--shard fsdp)")
    if OPTIMIZERS[spec.optimizer]["_component_"].startswith("bitsandbytes"):
        # Traced: bitsandbytes 0.50's update op gets FSDP2's DTensor parameters and states
        # beside its plain quantization maps, which DTensor's dispatch refuses ("got mixed
        # torch.Tensor and DTensor"), as it would on a GPU.
        raise Unsupported(f"--optimizer {spec.optimizer}: bitsandbytes' optimizers take plain "
                          "tensors; FSDP2's parameters are DTensors")


def recipe_class(method: str, gpus: int = 1) -> Any:
    """The recipe class, loaded from the file ``tune run`` runs: the wheel installs
    ``recipes/`` beside ``torchtune/`` (torchtune/_cli/run.py ROOT), and its __init__ forbids
    importing it as a package."""
    import torchtune

    recipes = DISTRIBUTED_RECIPES if gpus > 1 else RECIPES
    name, cls = recipes["lora" if method in ("lora", "qlora", "dora") else "full"]
    path = os.path.join(os.path.dirname(os.path.dirname(torchtune.__file__)), "recipes", f"{name}.py")
    loader = importlib.util.spec_from_file_location(f"vramfit_torchtune_{name}", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    # The progress bar is the terminal's; the tracer reports its own progress.
    # (the distributed recipes pass disable= themselves: rank 0 shows it).
    bar = module.tqdm
    module.tqdm = lambda *a, **kw: bar(*a, **{**kw, "disable": True})
    return getattr(module, cls)


# ---- phases ----------------------------------------------------------------------------------
def mark_phases(recipe: Any, run: Run) -> None:
    model, loss_fn, optimizer = recipe._model, recipe._loss_fn, recipe._optimizer
    # First among the model's pre-hooks: FSDP2's root all-gather (fully_shard's pre-forward
    # hook, registered with prepend=True) belongs to the forward.
    model.register_forward_pre_hook(lambda *_: run.phase("forward"), prepend=True)
    loss_fn.register_forward_pre_hook(lambda *_: run.phase("loss"))

    def on_loss(_module: Any, _args: Any, loss: Any) -> None:
        loss.register_hook(lambda _grad: run.phase("backward"))

    loss_fn.register_forward_hook(on_loss)

    # With optimizer_in_bwd the recipe keeps no optimizer (its _setup_optimizer returns None):
    # each parameter's steps inside the backward, which has no optimizer phase after it.
    if optimizer is None:
        return

    def before_step(*_: Any) -> None:
        run.phase("optimizer")
        run.label_model(model, optimizer)

    optimizer.register_step_pre_hook(before_step)


def start_process_group() -> None:
    """The LoRA recipe's ``recipe_main`` makes the process group before the recipe
    (recipes/lora_finetune_distributed.py: ``init_process_group("cuda:nccl,cpu:gloo")``);
    the full recipe makes its own in ``__init__``. distributed.one_rank gives it the fake
    backend."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("cuda:nccl,cpu:gloo")


def run(spec: Spec, run: Run) -> None:
    from importlib.metadata import version

    from omegaconf import OmegaConf

    _refuse(spec)
    run.framework("torchtune", version("torchtune"))
    with open(spec.config) as f:
        model_config = json.load(f)
    with tempfile.TemporaryDirectory(prefix="vramfit-trace-") as out_dir:
        cfg = OmegaConf.create(recipe_config(spec, model_config, out_dir))
        recipe_type = recipe_class(spec.method, spec.gpus)
        run.phase("load")
        if spec.gpus > 1 and spec.lora:
            start_process_group()
        recipe = recipe_type(cfg=cfg)
        recipe.setup(cfg=cfg)
        run.note(f"{cfg.model._component_}, recipe {recipe_type.__name__}, "
                 f"{cfg.optimizer._component_}, {cfg.loss._component_.rpartition('.')[2]}")
        mark_phases(recipe, run)
        # Saving comes after the traced steps (the full distributed recipe saves through
        # its CheckpointClient, the others through their own save_checkpoint).
        recipe.save_checkpoint = lambda **_: None
        if hasattr(recipe, "_checkpoint_client"):
            recipe._checkpoint_client.save_checkpoint = lambda *_, **__: None
        recipe.train()
        recipe.cleanup()
