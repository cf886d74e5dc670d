"""Hugging Face transformers + PEFT, trained by the Trainer's own loop.

The model is built from its config with random weights, adapted with PEFT where the setup
asks, and trained by ``Trainer.train()`` for ``spec.steps`` optimizer steps over a dataset of
token ids of the right shape: the Trainer's optimizer, accumulation, autocast, gradient
clipping and ``zero_grad`` are the release's own. What the tracer adds is only the phase
markers (module hooks and a wrapper around the accelerator's backward).

QLoRA follows PEFT's quantization guide: from_pretrained's bitsandbytes path (the
quantizer's own code, each weight quantized on the device by bitsandbytes as it loads), then
``prepare_model_for_kbit_training`` and LoRA. bitsandbytes' Python code runs as it is; its
kernels are torch.library ops whose fake implementations give their outputs, and the buffers
the CUDA kernels add are rules.py's (rule 4).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Iterator

from .. import distributed
from ..spec import Spec, Unsupported
from . import Run, materialize

PACKAGES = ("transformers", "peft", "accelerate", "bitsandbytes")

# Module names of each projection kind, per model family, as regular expressions over the
# module's full name (GPT-2's attention and MLP output projections share the name c_proj).
TARGETS: dict[str, dict[str, str]] = {
    "llama": {"q": r"q_proj", "k": r"k_proj", "v": r"v_proj", "o": r"o_proj",
              "gate": r"gate_proj", "up": r"up_proj", "down": r"down_proj"},
    "phi": {"q": r"q_proj", "k": r"k_proj", "v": r"v_proj", "o": r"self_attn\.dense",
            "up": r"fc1", "down": r"fc2"},
    "phi3": {"q": r"qkv_proj", "k": r"qkv_proj", "v": r"qkv_proj", "o": r"o_proj",
             "gate": r"gate_up_proj", "up": r"gate_up_proj", "down": r"down_proj"},
    "gpt2": {"q": r"c_attn", "k": r"c_attn", "v": r"c_attn", "o": r"attn\.c_proj",
             "up": r"c_fc", "down": r"mlp\.c_proj"},
    "gpt_neox": {"q": r"query_key_value", "k": r"query_key_value", "v": r"query_key_value",
                 "o": r"attention\.dense", "up": r"dense_h_to_4h", "down": r"dense_4h_to_h"},
    "falcon": {"q": r"query_key_value", "k": r"query_key_value", "v": r"query_key_value",
               "o": r"self_attention\.dense", "up": r"dense_h_to_4h", "down": r"dense_4h_to_h"},
    "bert": {"q": r"self\.query", "k": r"self\.key", "v": r"self\.value",
             "o": r"attention\.output\.dense", "up": r"intermediate\.dense",
             "down": r"\d+\.output\.dense"},
}
FAMILY_OF = {"mistral": "llama", "qwen2": "llama", "gemma": "llama", "gemma2": "llama",
             "mixtral": "llama", "roberta": "bert", "stablelm": "llama", "qwen3": "llama",
             "qwen3_moe": "llama", "gemma3_text": "llama", "olmo2": "llama", "smollm3": "llama"}

OPTIMIZERS = {"adamw": None,  # the Trainer's default AdamW for this release
              "adamw-8bit": "adamw_bnb_8bit",
              "adafactor": "adafactor", "sgd": "sgd", "sgd-momentum": "sgd",
              "lion": "lion_32bit", "none": "sgd"}

# The recipes PEFT and TRL document use a LoRA dropout of 0.05 (trl/scripts, peft examples).
LORA_DROPOUT = 0.05


def _model_class(spec: Spec) -> Any:
    import transformers as tf
    return {"causal-lm": tf.AutoModelForCausalLM,
            "seq-classification": tf.AutoModelForSequenceClassification,
            "masked-lm": tf.AutoModelForMaskedLM}[spec.task]


def _attention(spec: Spec) -> dict[str, str]:
    # flash is traced as SDPA's flash kernel on every input (see rules.SdpaPolicy.force);
    # by default the model class picks (sdpa where it has it, eager where not: Gemma-2).
    if spec.attention == "default":
        return {}
    return {"attn_implementation": {"eager": "eager", "sdpa": "sdpa", "flash": "sdpa"}[spec.attention]}


def _lora_targets(spec: Spec, model_type: str) -> Any:
    if spec.lora_targets == ["all-linear"]:
        return "all-linear"
    names = TARGETS.get(model_type) or TARGETS.get(FAMILY_OF.get(model_type, ""), {})
    patterns = sorted({names[k] for k in spec.lora_targets if k in names})
    missing = [k for k in spec.lora_targets if k not in names and k != "head"]
    if missing:
        raise Unsupported(f"--lora-targets {missing[0]}: {model_type} has no such projection")
    if "head" in spec.lora_targets:
        patterns.append(r"lm_head")
    return r".*(" + "|".join(patterns) + r")$"


def model_config(spec: Spec) -> Any:
    """The model's config as the setup trains it (two labels for classification)."""
    import transformers as tf

    config = tf.AutoConfig.from_pretrained(spec.config)
    if spec.task == "seq-classification":
        config.num_labels = 2
        # Decoders find each sequence's last token by the pad id and refuse batches without
        # one (modeling_llama.py LlamaForSequenceClassification); recipes set it to eos.
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = getattr(config, "eos_token_id", None) or 0
    return config


def weights_dtype(spec: Spec) -> Any:
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[spec.weights]


def adapted(spec: Spec, model: Any, model_type: str) -> Any:
    """The model with the setup's PEFT adapters (LoRA, DoRA), or as it is. A quantized
    model is first prepared as PEFT's quantization guide does (``prepare_model_for_kbit_training``:
    every parameter frozen, the ones left in 16 bits up-cast to fp32, and, with checkpointing,
    the embeddings' output made to require grad)."""
    if spec.method in ("adapter", "adapter-v2"):
        raise Unsupported(f"--method {spec.method}: LLaMA-Adapter is litgpt's; hf has no such method")
    if not spec.lora:
        return model
    import peft
    if spec.quantized:
        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=spec.grad_ckpt == "full")
    lora = peft.LoraConfig(r=spec.lora_r, lora_alpha=2 * spec.lora_r,
                           lora_dropout=LORA_DROPOUT, use_dora=spec.method == "dora",
                           target_modules=_lora_targets(spec, model_type),
                           task_type={"causal-lm": "CAUSAL_LM",
                                      "seq-classification": "SEQ_CLS",
                                      "masked-lm": None}[spec.task])
    try:
        return peft.get_peft_model(model, lora)
    except ValueError as e:  # PEFT refuses the configuration (tuners/lora/layer.py)
        raise Unsupported(f"PEFT {peft.__version__} refuses this LoRA: {e}") from e


# --quant: bitsandbytes' 4-bit types; nf4-dq quantizes the scales again (double quantization).
QUANT = {"nf4": False, "nf4-dq": True}


def _bnb_config(spec: Spec) -> Any:
    """The BitsAndBytesConfig of the QLoRA recipes (PEFT's and transformers' quantization
    guides): NF4, computing in the dtype the model is loaded in."""
    import transformers as tf

    quant = "nf4-dq" if spec.quant == "none" else spec.quant
    if quant not in QUANT:
        raise Unsupported(f"--quant {quant}: the hf tracer runs bitsandbytes' 4-bit NF4 "
                          "(--quant nf4 or nf4-dq)")
    return tf.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                 bnb_4bit_use_double_quant=QUANT[quant],
                                 bnb_4bit_compute_dtype=weights_dtype(spec))


def _quantized(spec: Spec, model: Any, config: Any) -> None:
    """from_pretrained with a quantization_config (modeling_utils.py): the quantizer swaps
    the linear layers for bitsandbytes' Linear4bit on the meta device
    (``preprocess_model``), then loading moves each checkpoint tensor to the GPU, where
    the quantizer's conversion (integrations/bitsandbytes.py ``Bnb4bitQuantize``) makes
    it a ``Params4bit``, quantized there by bitsandbytes' own code; the 16-bit tensor goes
    with the next one. The other parameters are given their memory as without it."""
    import torch
    from transformers.quantizers.auto import get_hf_quantizer

    quantizer, _, device_map = get_hf_quantizer(config, _bnb_config(spec), None, True, {})
    quantizer.preprocess_model(model=model, dtype=weights_dtype(spec), device_map=device_map,
                               checkpoint_files=None, use_kernels=False)
    convert = quantizer.get_quantize_ops()
    for name, param in list(model.named_parameters()):
        if not quantizer.param_needs_quantization(model, name):
            continue
        value = torch.empty(param.shape, dtype=weights_dtype(spec), device="cuda")
        module, leaf = name.rsplit(".", 1)
        quantized = convert.convert({name: value}, model=model, full_layer_name=name)[name]
        setattr(model.get_submodule(module), leaf, quantized)
        del value
    materialize(model, "cuda")
    model.hf_quantizer = quantizer
    quantizer.postprocess_model(model)


def _build(spec: Spec, run: Run) -> Any:
    import torch

    config = model_config(spec)
    # As from_pretrained does: the modules are made on the meta device, then every
    # parameter is given its memory once (loading writes into it) and the tied weights
    # are tied again (modeling_utils.py, _load_pretrained_model). On the GPU, where the
    # Trainer would move it whole; with FSDP on the host, where from_pretrained leaves it:
    # the Trainer does not place an FSDP model (trainer.py place_model_on_device), and
    # fully_shard moves each unit's shard to the GPU as it wraps it.
    with torch.device("meta"):
        model = _model_class(spec).from_config(config, dtype=weights_dtype(spec), **_attention(spec))
    if spec.quantized:
        _quantized(spec, model, config)
    else:
        materialize(model, "cpu" if spec.gpus > 1 and spec.shard == "fsdp" else "cuda")
    model.tie_weights()
    model = adapted(spec, model, config.model_type)
    run.note(f"{model.__class__.__name__} {config.model_type}, "
             f"attention {model.config._attn_implementation}")
    return model


class Batches:
    """A dataset of token ids. Fixed lengths: every sample has ``seq`` tokens. Varied
    lengths (DataCollatorWithPadding's case): within each micro batch the first sample is
    the longest (``Spec.longest``) and the others shorter, so the batch is padded and
    carries a real attention mask. With many GPUs accelerate gives each rank every ``gpus``-th batch
    (data_loader.py ``BatchSamplerShard``), so there are ``gpus`` times as many, and the
    batches of one step are ``gpus`` apart."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def __len__(self) -> int:
        return self.spec.batch * self.spec.micro_batches * self.spec.gpus

    def length(self, i: int) -> int:
        spec = self.spec
        if spec.lengths == "fixed":
            return spec.seq
        micro_batch, within = i // (spec.batch * spec.gpus), i % spec.batch
        longest = spec.longest(micro_batch)
        return max(1, longest - within * longest // (2 * spec.batch))

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch
        length = self.length(i)
        sample: dict[str, Any] = {"input_ids": torch.ones(length, dtype=torch.long),
                                  "attention_mask": torch.ones(length, dtype=torch.long)}
        if self.spec.task == "seq-classification":
            sample["labels"] = torch.tensor(1)
        else:
            sample["labels"] = torch.ones(length, dtype=torch.long)
        return sample


def _collate(spec: Spec) -> Any:
    """Pads each batch to its longest sample (DataCollatorWithPadding)."""
    import torch

    def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
        width = max(s["input_ids"].numel() for s in samples)
        batch: dict[str, Any] = {}
        for key in samples[0]:
            values = [s[key] for s in samples]
            if values[0].dim() == 0:
                batch[key] = torch.stack(values)
            else:
                batch[key] = torch.stack([torch.nn.functional.pad(v, (0, width - v.numel()))
                                          for v in values])
        return batch

    return collate


def _fields(cls: Any) -> set[str]:
    import dataclasses
    return {f.name for f in dataclasses.fields(cls)}


def check_layout(spec: Spec) -> None:
    """Many GPUs: the Trainer runs data parallelism when torchrun's WORLD_SIZE is above one,
    plain (accelerate wraps the model in DistributedDataParallel: ``--shard none``) or
    sharded by accelerate's FSDP plugin (``--shard fsdp``, TrainingArguments' ``fsdp``).
    ZeRO stages are DeepSpeed's (spec.check_layout refuses them)."""
    if spec.shard == "hsdp":
        raise Unsupported(f"--gpus {spec.gpus} --shard hsdp: the Trainer's FSDP2 shards fully; "
                          "hybrid_shard is FSDP1's, which transformers 5 deprecates")
    if spec.shard not in ("none", "fsdp"):
        raise Unsupported(f"--gpus {spec.gpus} --shard {spec.shard}: the hf tracer runs the "
                          "Trainer's DDP (--shard none) or FSDP (--shard fsdp)")
    if spec.shard == "fsdp" and spec.quantized:
        # The sharded recipe (PEFT's FSDP-QLoRA guide) quantizes on the host into a 16-bit
        # quant_storage that FSDP can flatten, and skips prepare_model_for_kbit_training.
        raise Unsupported("--shard fsdp with quantized weights: the hf tracer runs QLoRA on one "
                          "GPU or under DDP (--shard none); sharded QLoRA's host-side loading "
                          "is not traced")


def _data_parallel(spec: Spec) -> dict[str, Any]:
    """FSDP as the Trainer's documentation configures it: full sharding, each decoder
    layer wrapped (the plugin's transformer-layer auto wrap, which takes the layer classes
    from the model's ``_no_split_modules``), the release's default FSDP version.

    DDP as the Trainer builds it, but for ``find_unused_parameters``, which the Trainer
    turns on for a model without checkpointing (trainer.py ``_build_accelerator_args``):
    the reducer then copies its map of used parameters (one int32 per parameter tensor)
    to the GPU through pinned host memory, in C++ that asserts a real pinned tensor, which
    the fake device cannot give. What the flag adds on the GPU is that map alone."""
    if spec.gpus == 1:
        return {}
    if spec.shard == "fsdp":
        return {"fsdp": "full_shard auto_wrap"}
    return {"ddp_find_unused_parameters": False}


def _training_args(spec: Spec, out_dir: str) -> Any:
    import transformers as tf

    kwargs: dict[str, Any] = dict(
        output_dir=out_dir, per_device_train_batch_size=spec.batch,
        gradient_accumulation_steps=spec.accumulation, max_steps=spec.steps,
        bf16=spec.amp == "bf16", fp16=spec.amp == "fp16", report_to=[],
        save_strategy="no", logging_strategy="no", eval_strategy="no",
        dataloader_num_workers=0, dataloader_pin_memory=False, disable_tqdm=True,
        remove_unused_columns=False, use_cpu=False, **_data_parallel(spec))
    # transformers 5.23 renamed the flag (the old name still works, with a warning).
    ckpt = "activation_checkpointing" if "activation_checkpointing" in _fields(tf.TrainingArguments) \
        else "gradient_checkpointing"
    kwargs[ckpt] = spec.grad_ckpt == "full"
    optim = OPTIMIZERS[spec.optimizer]
    if optim:
        kwargs["optim"] = optim
    if spec.optimizer == "sgd-momentum":
        kwargs["optim_args"] = "momentum=0.9"
    return tf.TrainingArguments(**kwargs)


def _in_order(trainer: Any) -> None:
    """The samples in the order the dataset has them. The Trainer shuffles with a random
    permutation, whose values a fake tensor does not have: every index would read as the
    same sample, losing the batches' lengths. Order changes no tensor's size."""
    import torch
    trainer._get_train_sampler = lambda *_a, **_k: torch.utils.data.SequentialSampler(trainer.train_dataset)


def mark_forward_and_loss(model: Any, run: Run) -> None:
    """"forward" when the model starts, "loss" when its head (LM head or classifier)
    starts. Shared with the drivers that train a transformers model."""
    model.register_forward_pre_hook(lambda *_: run.phase("forward"))
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head = head or getattr(model, "classifier", None) or getattr(model, "score", None)
    if head is not None:  # the loss phase: the head's projection, then the loss
        head.register_forward_pre_hook(lambda *_: run.phase("loss"))


def _mark_phases(trainer: Any, model: Any, run: Run) -> None:
    mark_forward_and_loss(model, run)
    backward = trainer.accelerator.backward

    def marked_backward(loss: Any, **kwargs: Any) -> Any:
        run.phase("backward")
        return backward(loss, **kwargs)

    trainer.accelerator.backward = marked_backward
    create = trainer.create_optimizer

    def marked_create(*args: Any, **kwargs: Any) -> Any:
        optimizer = create(*args, **kwargs)

        def before_step(*_: Any) -> None:
            run.phase("optimizer")
            run.label_model(model, optimizer)

        optimizer.register_step_pre_hook(before_step)
        return optimizer

    trainer.create_optimizer = marked_create


def _as_on_a_gpu() -> None:
    """transformers takes a fake tensor for a sign of graph capture (utils/import_utils.py
    ``is_tracing``) and then keeps explicit causal masks, which moves SDPA from the flash
    to the memory-efficient kernel. On the GPU the tensors are real: say so."""
    from transformers.utils import import_utils
    import_utils.is_fake_tensor = lambda _x: False


@contextlib.contextmanager
def _as_its_own_process() -> Iterator[None]:
    """accelerate keeps its process-wide state (the distributed type, the FSDP plugin) in
    class-level singletons (accelerate/state.py ``PartialState``, ``AcceleratorState``,
    ``GradientState``) made by the first Accelerator of a process, and says FSDP is on in
    the environment (utils/fsdp_utils.py sets ACCELERATE_USE_FSDP), which the next
    Accelerator reads. A training process makes one; the tests trace many setups in one
    process, and each must start as its own process would, not with the last one's FSDP."""
    from accelerate.state import AcceleratorState, GradientState

    environment = dict(os.environ)
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environment)


def run(spec: Spec, run: Run) -> None:
    if spec.grad_ckpt == "selective":
        raise Unsupported("--grad-ckpt selective: the hf Trainer checkpoints whole layers only")
    if spec.optimizer == "paged-adamw-8bit":
        # bitsandbytes pages the states in CUDA managed memory (cudaMallocManaged), outside
        # the caching allocator and out of max_memory_allocated; its page manager needs a
        # real CUDA driver.
        raise Unsupported("--optimizer paged-adamw-8bit: its states live in CUDA managed memory, "
                          "which the tracer cannot allocate; trace adamw-8bit (the same states, "
                          "in the allocator) instead")
    import transformers as tf

    _as_on_a_gpu()

    run.framework("transformers", tf.__version__)
    run.phase("load")
    model = _build(spec, run)
    with _as_its_own_process(), tempfile.TemporaryDirectory(prefix="vramfit-trace-") as out_dir:
        trainer = tf.Trainer(model=model, args=_training_args(spec, out_dir),
                             train_dataset=Batches(spec), data_collator=_collate(spec))
        _in_order(trainer)
        _mark_phases(trainer, model, run)
        with distributed.addresses() if spec.gpus > 1 else contextlib.nullcontext():
            trainer.train()
        if spec.gpus > 1:
            run.note(_layout(trainer, spec))


def _layout(trainer: Any, spec: Spec) -> str:
    """How the Trainer spread the model over the ranks, as accelerate made it."""
    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None)
    if plugin is None:
        return f"rank 0 of {spec.gpus}, {type(trainer.model_wrapped).__name__}"
    return (f"rank 0 of {spec.gpus}, accelerate FSDP{plugin.fsdp_version} "
            f"(reshard after forward: {plugin.reshard_after_forward})")
