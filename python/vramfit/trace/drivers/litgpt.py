"""litgpt's fine-tuning scripts on Lightning Fabric, run by the script's own ``main()``.

``litgpt/finetune/{full,lora,adapter,adapter_v2}.py`` each have a ``setup()`` (the CLI
level: config file, precision, quantization plugin, Fabric) and a ``main()`` that builds the
model under ``fabric.init_module``, makes the optimizer, loads the checkpoint, calls
``fit()`` (the sanity-check validation, the training loop with ``chunked_cross_entropy``,
Fabric's ``backward`` / ``no_backward_sync`` / ``convert_output``, the optimizer step and
``zero_grad``) and validates once more. The tracer runs that ``main()`` and everything it
calls unchanged. What it reproduces or stands in for, all above or below the training code:

* ``setup()`` (finetune/lora.py 49-180 in 0.5.13, 41-143 in 0.3.0; the same in the other
  scripts): the ``Config`` comes from the model's Hugging Face config (``litgpt_config``)
  instead of ``model_config.yaml``; precision and the ``BitsandbytesPrecision`` plugin are
  chosen as there; Fabric runs one CUDA device with the "auto" strategy and no logger.
* the script's file I/O, replaced in its module for the run: ``Tokenizer`` (nothing is
  tokenized: the data are token ids already), ``load_checkpoint`` (``model.load_state_dict``
  of a state dict of the checkpoint's shapes, as litgpt/utils.py ``load_checkpoint`` does on
  one device after ``lazy_load``), and the checkpoint writers after training.
* the data module: samples of ``--seq`` tokens (the last optimizer step's; the earlier ones
  shorter with ``--lengths varied``) batched by litgpt's own SFT collate function, which pads
  each batch to its longest sample as with Alpaca.

Releases. Each runs in its own environment (``--framework litgpt@0.3.0``: the config hub's
benchmark release; 0.4.x for its later rows) and the tracer calls each one's own code. What
the driver has to know of the differences:

* ``main()``'s arguments: 0.3.0 takes (fabric, devices, seed, config, data, checkpoint_dir,
  out_dir, train, eval), 0.5.13 adds optimizer, num_nodes and (lora.py) precision; full.py,
  and adapter_v2.py in 0.5.13, take a resume flag: they are passed by name, as each release
  declares them.
* ``TrainArgs`` / ``EvalArgs`` fields (0.3.0 has learning rates in TrainArgs and no
  ``final_validation``): only the fields the release has are set.
* ``Config`` fields for a config.json litgpt does not know (0.3.0 has no ``attn_bias``).
* bitsandbytes: 0.42 (pinned by 0.3.0 to 0.4.13) has only ctypes kernels; 0.50 has
  torch.library ops with fake kernels (``bitsandbytes_without_kernels``).

The differences in memory are the releases' own and need nothing here, e.g. 0.4.6 made
RMSNorm multiply by its weight in fp32 (model.py, commit 916a84ca), 0.5.x swaps the
embedding of a quantized model for bitsandbytes' StableEmbedding after making the
optimizer (finetune/lora.py, commit ae798aba): bench/NOTES.md "Tracer self-check".
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import tempfile
from pathlib import Path
from typing import Any

from .. import distributed
from ..spec import Spec, Unsupported
from . import FrameworkMissing, Run

PACKAGES = ("litgpt", "lightning", "bitsandbytes")

SCRIPTS = {"full": "full", "lora": "lora", "qlora": "lora", "adapter": "adapter",
           "adapter-v2": "adapter_v2"}

# setup()'s precision names (litgpt/finetune/*.py: "bf16-true", "bf16-mixed", "32-true", ...)
PRECISIONS = {("bf16", "none"): "bf16-true", ("fp16", "none"): "16-true",
              ("fp32", "none"): "32-true", ("fp32", "bf16"): "bf16-mixed",
              ("fp32", "fp16"): "16-mixed"}

QUANTIZE = {"nf4": "bnb.nf4", "nf4-dq": "bnb.nf4-dq", "int8": "bnb.int8-training"}

# setup()'s --optimizer (0.4.x on): a torch.optim class name, or a class path with init_args
# (utils.py instantiate_torch_optimizer). With --quantize the scripts make bitsandbytes'
# PagedAdamW whatever AdamW is named (utils.py instantiate_bnb_optimizer), and 0.3.0 makes
# AdamW (PagedAdamW) in main() itself.
OPTIMIZERS: dict[str, Any] = {
    "adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor",
    "sgd-momentum": {"class_path": "torch.optim.SGD", "init_args": {"momentum": 0.9}},
    "adamw-8bit": "bitsandbytes.optim.AdamW8bit", "paged-adamw-8bit": "bitsandbytes.optim.PagedAdamW8bit",
    "lion": "bitsandbytes.optim.Lion"}

# The scripts' setup() defaults for the adapters: lora_alpha 16, lora_dropout 0.05.
LORA_ALPHA, LORA_DROPOUT = 16, 0.05
SEED = 1337


# ---- the model's litgpt Config ---------------------------------------------------------------
def _known_name(hf: dict[str, Any], configs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The litgpt config of the checkpoint the HF config belongs to: litgpt's download and
    convert scripts use the config whose ``hf_config`` names the repository."""
    repo = (hf.get("_vramfit", {}).get("hf_repo") or hf.get("_name_or_path") or "").lower()
    if not repo:
        return None
    tail = repo.rsplit("/", 1)[-1]
    for c in configs:
        hfc = c.get("hf_config", {})
        full = f"{hfc.get('org', '')}/{hfc.get('name', '')}".lower()
        if repo == full or tail == hfc.get("name", "").lower() or tail == c["name"].lower():
            return dict(c)
    return None


def _llama_style(hf: dict[str, Any]) -> dict[str, Any]:
    """A Llama-style HF config in litgpt's terms, as litgpt's own Llama, Mistral and Qwen2
    entries in config.py spell them (fused q,k,v; RMSNorm; SwiGLU; full rotary)."""
    heads = hf["num_attention_heads"]
    fields = dict(
        name=hf.get("_name_or_path") or hf["model_type"], block_size=hf.get("max_position_embeddings", 4096),
        vocab_size=hf["vocab_size"], padded_vocab_size=hf["vocab_size"],
        n_layer=hf["num_hidden_layers"], n_head=heads, n_embd=hf["hidden_size"],
        n_query_groups=hf.get("num_key_value_heads", heads), rotary_percentage=1.0,
        parallel_residual=False, bias=False, attn_bias=hf["model_type"] == "qwen2",
        norm_class_name="RMSNorm", norm_eps=hf.get("rms_norm_eps", 1e-5),
        mlp_class_name="LLaMAMLP", intermediate_size=hf["intermediate_size"],
        rope_base=int(hf.get("rope_theta", 10000)))
    if hf.get("head_dim"):
        fields["head_size"] = hf["head_dim"]
    return fields


def litgpt_config(spec: Spec) -> dict[str, Any]:
    """The fields of the litgpt Config for the model: the release's own entry for a
    checkpoint it knows, or a Llama-style config.json mapped to the fields this release has
    (0.3.0 has no attn_bias: a Qwen2 config needs a later release)."""
    from litgpt.config import Config, configs

    hf = json.loads(Path(spec.config).read_text())
    known = _known_name(hf, configs)
    if known is not None:
        return known
    if hf.get("model_type") not in ("llama", "mistral", "qwen2"):
        raise Unsupported(f"{spec.model}: litgpt has no config for this checkpoint, and the tracer maps only "
                          f"Llama-style config.json files (llama, mistral, qwen2) to litgpt's")
    fields = _llama_style(hf)
    has = {f.name for f in dataclasses.fields(Config)}
    for name in [n for n in fields if n not in has]:
        if fields.pop(name):
            raise Unsupported(f"{spec.model}: this litgpt release's Config has no '{name}'")
    return fields


def _mlp_kinds(fields: dict[str, Any]) -> set[str]:
    return {"up", "down"} if fields.get("mlp_class_name", "GptNeoxMLP") == "GptNeoxMLP" \
        else {"gate", "up", "down"}


def _method_fields(spec: Spec, fields: dict[str, Any]) -> dict[str, Any]:
    """setup()'s lora_* arguments: one flag per projection, one for the whole MLP;
    ``all-linear`` (vramfit's q, k, v, o and the MLP's projections, not the head) sets the
    attention's four and the MLP's."""
    if not spec.lora:
        return {}
    targets = set(spec.lora_targets)
    if targets == {"all-linear"}:
        targets = {"q", "k", "v", "o"} | _mlp_kinds(fields)
    mlp = _mlp_kinds(fields) & targets
    if mlp and mlp != _mlp_kinds(fields):
        raise Unsupported(f"--lora-targets {','.join(spec.lora_targets)}: litgpt's lora_mlp adapts all of "
                          f"the MLP's projections ({','.join(sorted(_mlp_kinds(fields)))}) or none")
    return dict(lora_r=spec.lora_r, lora_alpha=LORA_ALPHA, lora_dropout=LORA_DROPOUT,
                lora_query="q" in targets, lora_key="k" in targets, lora_value="v" in targets,
                lora_projection="o" in targets, lora_mlp=bool(mlp), lora_head="head" in targets)


# ---- setup(): precision, plugin, Fabric --------------------------------------------------------
def _check(spec: Spec) -> None:
    if spec.method not in SCRIPTS:
        raise Unsupported(f"--method {spec.method}: litgpt's fine-tuning scripts are full, lora (qlora with "
                          f"--quantize), adapter and adapter_v2")
    if spec.task != "causal-lm":
        raise Unsupported(f"--task {spec.task}: litgpt's fine-tuning scripts train causal language models")
    if spec.gpus == 1 and spec.grad_ckpt != "none":
        raise Unsupported(f"--grad-ckpt {spec.grad_ckpt}: litgpt's fine-tuning scripts checkpoint activations "
                          f"only under FSDP (devices > 1); on one GPU they do not")
    if spec.optimizer not in OPTIMIZERS:
        raise Unsupported(f"--optimizer {spec.optimizer}: litgpt's scripts always step an optimizer")
    if spec.optimizer != "adamw" and spec.quantized:
        raise Unsupported(f"--optimizer {spec.optimizer}: with --quantize litgpt makes bitsandbytes' PagedAdamW only")
    if spec.attention == "eager":
        raise Unsupported("--attention eager: litgpt's attention is SDPA (eager only where soft-capping needs it)")
    if (spec.weights, spec.amp) not in PRECISIONS:
        raise Unsupported(f"--weights {spec.weights} --amp {spec.amp}: litgpt's precisions are bf16-true, "
                          f"16-true, 32-true (weights in that dtype) and bf16-mixed, 16-mixed (fp32 weights)")
    if spec.quantized and spec.method not in ("lora", "qlora", "adapter", "adapter-v2"):
        raise Unsupported(f"--quant {spec.quant}: litgpt's full fine-tuning script does not quantize")
    if spec.quantized and spec.amp != "none":
        raise Unsupported(f"--amp {spec.amp}: litgpt refuses quantization with mixed precision")


def check_layout(spec: Spec) -> None:
    """Many GPUs: setup() shards whenever devices > 1, checkpointing every block (full.py,
    adapter*.py: FSDPStrategy with activation_checkpointing_policy={Block}; lora.py:
    ModelParallelStrategy, whose parallelize_fn wraps each block in checkpoint_wrapper and
    applies fully_shard), and refuses quantization there."""
    if spec.shard != "fsdp":
        raise Unsupported(f"--gpus {spec.gpus} --shard {spec.shard}: litgpt's fine-tuning scripts shard "
                          "with FSDP whenever devices > 1 (--shard fsdp)")
    if spec.grad_ckpt != "full":
        raise Unsupported(f"--grad-ckpt {spec.grad_ckpt}: litgpt's fine-tuning scripts checkpoint every block "
                          "under FSDP (--grad-ckpt full)")
    if spec.quantized:
        raise Unsupported("--quant: litgpt's scripts refuse quantization for multi-GPU training")
    if spec.method in ("lora", "qlora"):
        # lora.py's load_checkpoint: load_from_full_model_state_dict(cpu_offload=True) assigns
        # shards moved to the CPU, which FSDP2's first all-gather then copies in beside the
        # GPU's (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_all_gather).
        raise Unsupported(f"--gpus {spec.gpus} --method {spec.method}: litgpt 0.5.13's lora.py loads the "
                          "checkpoint's shards onto the CPU and its first all-gather mixes devices; "
                          "not traced")
    if spec.method != "full":
        raise Unsupported(f"--gpus {spec.gpus} --method {spec.method}: adapter.py's FSDP units fail to "
                          "move to the fake device (gating_factor cannot be swapped); not traced")


def _strategy(spec: Spec, script: Any) -> Any:
    """The strategy setup() gives Fabric: "auto" on one device, else as check_layout says
    (finetune/full.py 0.5.13 lines 107-116, lora.py 152-163)."""
    if spec.gpus == 1:
        return "auto"
    from lightning.fabric.strategies import FSDPStrategy, ModelParallelStrategy
    if hasattr(script, "parallelize_fn"):
        return ModelParallelStrategy(parallelize_fn=script.parallelize_fn, data_parallel_size=spec.gpus,
                                     tensor_parallel_size=1)
    return FSDPStrategy(auto_wrap_policy={script.Block}, activation_checkpointing_policy={script.Block},
                        state_dict_type="full", limit_all_gathers=True, cpu_offload=False)


def _fabric(spec: Spec, script: Any) -> tuple[Any, str | None]:
    """Fabric as setup() makes it: the precision string, or a BitsandbytesPrecision plugin
    and no precision (finetune/lora.py 0.5.13 lines 140-173), and the strategy."""
    import lightning as L
    import torch

    precision: str | None = PRECISIONS[(spec.weights, spec.amp)]
    plugins = None
    if spec.quantized:
        mode = QUANTIZE.get(spec.quant if spec.quant != "none" else "nf4-dq")
        if mode is None:
            raise Unsupported(f"--quant {spec.quant}: not one of litgpt's --quantize modes")
        dtype = {"16-true": torch.float16, "bf16-true": torch.bfloat16, "32-true": torch.float32}[precision]
        from lightning.fabric.plugins import BitsandbytesPrecision
        plugins = BitsandbytesPrecision(mode[4:], dtype)
        precision = None
    # accelerator "cuda" is what "auto" picks on a GPU machine; named here so that a broken
    # fake device fails loudly instead of falling back to the CPU.
    fabric = L.Fabric(accelerator="cuda", devices=spec.gpus, num_nodes=1, strategy=_strategy(spec, script),
                      precision=precision, plugins=plugins, loggers=None)
    return fabric, precision


# ---- the data ------------------------------------------------------------------------------
def _data_module(spec: Spec) -> Any:
    """A litgpt DataModule of token-id samples shaped like SFTDataset's (litgpt/data/base.py):
    input_ids, labels and token counts, batched by litgpt's get_sft_collate_fn."""
    import torch
    from litgpt.data import DataModule
    from litgpt.data.base import get_sft_collate_fn
    from torch.utils.data import DataLoader, Dataset

    class Samples(Dataset):
        def __init__(self, lengths: list[int]) -> None:
            self.lengths = lengths

        def __len__(self) -> int:
            return len(self.lengths)

        def __getitem__(self, i: int) -> dict[str, Any]:
            n = self.lengths[i]
            ids = torch.ones(n, dtype=torch.int64)
            return {"input_ids": ids, "labels": ids.clone(),
                    "token_counts": {"raw": n, "raw_plus_prompt_template": n}}

    def train_lengths() -> list[int]:
        # every sample of a micro batch as long as its longest; at least 2 tokens, which
        # litgpt's input and target shift needs
        return every_rank([max(2, spec.longest(i // spec.batch))
                           for i in range(spec.batch * spec.accumulation * spec.steps)])

    def every_rank(lengths: list[int]) -> list[int]:
        # Fabric's DistributedSampler gives rank 0 the samples 0, N, 2N, ...
        return [lengths[i // spec.gpus] for i in range(len(lengths) * spec.gpus)]

    @dataclasses.dataclass
    class TokenIds(DataModule):
        batch_size: int = 1
        max_seq_length: int = -1
        prompt_style: Any = None  # the scripts save it with the final checkpoint

        def __post_init__(self) -> None:
            super().__init__()

        def connect(self, tokenizer: Any = None, batch_size: int = 1, max_seq_length: int | None = None,
                    **_: Any) -> None:
            self.batch_size = batch_size
            self.max_seq_length = -1 if max_seq_length is None else max_seq_length

        def _loader(self, lengths: list[int]) -> Any:
            return DataLoader(Samples(lengths), batch_size=self.batch_size, shuffle=False, num_workers=0,
                              collate_fn=get_sft_collate_fn(max_seq_length=self.max_seq_length))

        def train_dataloader(self) -> Any:
            return self._loader(train_lengths())

        def val_dataloader(self) -> Any:
            # two batches: fit()'s sanity check validates on two
            return self._loader(every_rank([spec.seq] * (2 * spec.batch)))

    return TokenIds()


# ---- the script's I/O, replaced for the run ----------------------------------------------------
class _NoTokenizer:
    """Stands in for litgpt.tokenizer.Tokenizer: the samples are token ids already."""

    bos_id, eos_id, backend = 1, 2, "none"

    def __init__(self, *_: Any, **__: Any) -> None: ...


def _load_checkpoint(dtype: Any) -> Any:
    """litgpt/utils.py load_checkpoint on one device: ``model.load_state_dict`` of what
    ``lazy_load`` reads from lit_model.pth, here tensors of the checkpoint's shapes on the
    CPU: the base model's parameters and persistent buffers (the adapters are not in it,
    hence the scripts' strict=False), a quantized weight at its full shape."""
    import torch

    def load(fabric: Any, model: Any, checkpoint_path: Any, strict: bool = True) -> None:
        if fabric.world_size > 1:
            _load_sharded(fabric, model, dtype, strict)
            return
        module = getattr(model, "module", model)  # _FabricModule.module: the user's model
        persistent = set(module.state_dict(keep_vars=True))
        tensors = dict(module.named_parameters())
        tensors.update({k: v for k, v in module.named_buffers() if k in persistent})
        state = {k: torch.empty(_checkpoint_shape(v), dtype=dtype if _is_float(v) else v.dtype, device="cpu")
                 for k, v in tensors.items() if not _is_adapter_key(k)}
        model.load_state_dict(state, strict=strict)

    return load


def _load_sharded(fabric: Any, model: Any, dtype: Any, strict: bool) -> None:
    """litgpt/utils.py load_checkpoint under FSDP: Fabric's ``load_raw`` with FSDPStrategy
    (each FSDP1 unit gathered, written and resharded in turn: fabric/strategies/
    model_parallel.py ``_load_raw_module_state``), ``load_from_full_model_state_dict``
    with ModelParallelStrategy (each parameter distributed from the full one), from a full
    state dict on the CPU: the names and shapes of the base model, made on the meta device
    (the sharded one has flat or sharded parameters)."""
    import torch
    from lightning.fabric.strategies import FSDPStrategy
    from lightning.fabric.strategies.model_parallel import _load_raw_module_state
    from lightning.fabric.wrappers import _unwrap_objects
    from litgpt.config import Config
    from litgpt.model import GPT
    from litgpt.utils import load_from_full_model_state_dict

    sharded = _unwrap_objects(model)
    original = getattr(model, "_original_module", sharded)
    # The checkpoint is the base model's (convert_hf_checkpoint), whatever the script adds.
    base = Config(**{f.name: getattr(original.config, f.name) for f in dataclasses.fields(Config)})
    with torch.device("meta"):
        reference = GPT(base)
    state = {k: torch.empty(v.shape, dtype=dtype if v.is_floating_point() else v.dtype, device="cpu")
             for k, v in reference.state_dict(keep_vars=True).items() if not _is_adapter_key(k)}
    if isinstance(fabric.strategy, FSDPStrategy):
        _load_raw_module_state(state, module=sharded, world_size=fabric.world_size, strict=strict)
    else:
        load_from_full_model_state_dict(model=sharded, full_sd=state, device=fabric.device, strict=strict,
                                        cpu_offload=True)


def _is_float(t: Any) -> bool:
    return t.is_floating_point() or getattr(t, "quant_state", None) is not None


def _is_adapter_key(key: str) -> bool:
    return any(part in key for part in ("lora_", "adapter_", "gating_factor"))


def _checkpoint_shape(t: Any) -> tuple[int, ...]:
    """A quantized weight's checkpoint holds the whole matrix; its quant_state knows the shape."""
    state = getattr(t, "quant_state", None)
    return tuple(state.shape) if state is not None else tuple(t.shape)


WRITERS = ("save_lora_checkpoint", "save_adapter_checkpoint", "save_adapter_v2_checkpoint",
           "copy_config_files", "save_hyperparameters", "save_prompt_style", "merge_lora")


def _stand_ins(script: Any, spec: Spec) -> dict[str, Any]:
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[spec.weights]
    names = {"Tokenizer": _NoTokenizer, "load_checkpoint": _load_checkpoint(dtype)}
    names.update({w: (lambda *_a, **_k: None) for w in WRITERS if hasattr(script, w)})
    return names


# ---- bitsandbytes on the fake device -----------------------------------------------------------
def _no_kernel(*_: Any, **__: Any) -> int:
    return 0


class _NoKernels:
    """bitsandbytes' native library with every CUDA kernel a no-op."""

    def __getattr__(self, name: str) -> Any:
        return _no_kernel


def bitsandbytes_without_kernels() -> None:
    """bitsandbytes' Python code allocates every output and state with torch and then has a
    CUDA kernel, called through ctypes with the tensors' raw pointers, fill them in place.
    Up to 0.44 (litgpt 0.3.0 pins 0.42.0) that is all of it (functional.py quantize_4bit:
    ``absmax = torch.zeros(blocks)``, ``out = torch.zeros((n + 1) // 2, 1, uint8)``;
    dequantize_4bit: ``out = torch.empty(shape, dtype)``; the optimizer states:
    ``torch.zeros_like``); from 0.45 the kernels are torch.library ops whose fake
    implementations serve the fake device (bitsandbytes/_ops.py) and ctypes is left for paged
    memory and fills. On the fake device nothing is to be computed: every ctypes kernel
    becomes a no-op and a fake tensor's pointer NULL, while all that allocates stays the
    release's own code, its autograd functions included (0.42 autograd/_functions.py
    MatMul4Bit keeps ``ctx.tensors = (A, B)``; 0.50 keeps ``(None, B)``). Two things are
    made outside the caching allocator and are replaced: ``get_paged`` (a paged optimizer
    state is a CPU tensor over cudaMallocManaged memory, functional.py ``get_paged``: here a
    CPU tensor of the same shape, flagged as paged) and, in 0.42, the optimizer kernel
    tables that a CPU-only build leaves undefined (functional.py ``if COMPILED_WITH_CUDA``)."""
    import collections
    import ctypes

    import torch
    from bitsandbytes import functional as F
    from torch._subclasses.fake_tensor import FakeTensor

    def get_ptr(A: Any) -> Any:
        if A is None or isinstance(A, FakeTensor) or getattr(A, "is_paged", False):
            return None
        return ctypes.c_void_p(A.data.data_ptr())

    def get_paged(*shape: int, dtype: Any = torch.float32, device: Any = None) -> Any:
        out = torch.empty(shape, dtype=dtype, device="cpu")
        out.is_paged = True
        out.page_deviceid = 0 if device is None else device.index
        return out

    F.lib = _NoKernels()
    F.get_ptr = get_ptr
    F.get_paged = get_paged
    kernels = (_no_kernel, _no_kernel, _no_kernel)
    for table in ("str2optimizer32bit", "str2optimizer8bit", "str2optimizer8bit_blockwise"):
        if not hasattr(F, table):
            setattr(F, table, collections.defaultdict(lambda: kernels))


# ---- phases ----------------------------------------------------------------------------------
def _marked(validate: Any, evaluating: list[bool]) -> Any:
    """The script's validate() (the sanity check before training, the final validation)
    with evaluating[0] set while it runs."""
    def marked(*args: Any, **kwargs: Any) -> Any:
        evaluating[0] = True
        try:
            return validate(*args, **kwargs)
        finally:
            evaluating[0] = False
    return marked


def _mark_phases(fabric: Any, run: Run, evaluating: list[bool]) -> None:
    """Phase markers around Fabric's own functions: the model's forward, its head (the
    loss follows), Fabric's backward, the optimizer step; a forward while evaluating[0]
    (the script's validate()) is the "eval" phase, its loss included."""
    models: list[Any] = []
    setup_module = fabric.setup_module
    setup_optimizers = fabric.setup_optimizers
    backward = fabric.backward

    def on_model(module: Any, *args: Any, **kwargs: Any) -> Any:
        wrapped = setup_module(module, *args, **kwargs)
        module.register_forward_pre_hook(lambda *_: run.phase("eval" if evaluating[0] else "forward"))
        def before_loss(*_: Any) -> None:  # a forward hook's return value replaces the output
            if not evaluating[0]:
                run.phase("loss")

        module.lm_head.register_forward_hook(before_loss)
        models.append(module)
        return wrapped

    def on_optimizer(*optimizers: Any, **kwargs: Any) -> Any:
        for optimizer in optimizers:
            def before_step(opt: Any, *_: Any) -> None:
                run.phase("optimizer")
                run.label_model(models[-1], opt)
            optimizer.register_step_pre_hook(before_step)
        return setup_optimizers(*optimizers, **kwargs)

    def on_backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        run.phase("backward")
        return backward(tensor, *args, **kwargs)

    fabric.setup_module = on_model
    fabric.setup_optimizers = on_optimizer
    fabric.backward = on_backward
    # full.py calls fabric.setup(model), which forwards to setup_module only when there are
    # no optimizers; route it the same way.
    fabric.setup = lambda module, *opts, **kw: on_model(module, **kw) if not opts else \
        (on_model(module, **kw), *on_optimizer(*opts))


# ---- main() ----------------------------------------------------------------------------------
def _train_args(script: Any, spec: Spec) -> Any:
    """TrainArgs as the config hub's recipes give them: micro batch, the global batch that
    makes --accumulation micro batches per step on one device, --seq as max_seq_length,
    --steps optimizer steps; no checkpoints written mid-run."""
    from litgpt.args import TrainArgs
    wanted = dict(save_interval=None, log_interval=1, global_batch_size=spec.batch * spec.accumulation * spec.gpus,
                  micro_batch_size=spec.batch, lr_warmup_steps=100, epochs=1, max_steps=spec.steps,
                  max_seq_length=spec.seq)
    known = {f.name for f in dataclasses.fields(TrainArgs)}
    return TrainArgs(**{k: v for k, v in wanted.items() if k in known})


def _eval_args(spec: Spec) -> Any:
    """Validation as in the recipes, less the periodic one (its interval lies beyond the
    traced steps; the final validation holds the same tensors)."""
    from litgpt.args import EvalArgs
    wanted = dict(interval=spec.steps + 1, max_new_tokens=100, max_iters=100)
    known = {f.name for f in dataclasses.fields(EvalArgs)}
    return EvalArgs(**{k: v for k, v in wanted.items() if k in known})


def _call_main(script: Any, spec: Spec, fabric: Any, precision: str | None, config: Any,
               out_dir: Path) -> None:
    offered = dict(fabric=fabric, devices=spec.gpus, num_nodes=1, seed=SEED, config=config,
                   data=_data_module(spec), checkpoint_dir=out_dir / "checkpoint", out_dir=out_dir / "out",
                   train=_train_args(script, spec), eval=_eval_args(spec), optimizer=OPTIMIZERS[spec.optimizer],
                   precision=precision, resume=False)
    params = list(inspect.signature(script.main).parameters)
    if "optimizer" not in params and spec.optimizer != "adamw":
        raise Unsupported(f"--optimizer {spec.optimizer}: litgpt {_release(spec)}'s scripts make AdamW only")
    missing = [p for p in params if p not in offered]
    if missing:
        raise FrameworkMissing(f"litgpt's {script.__name__}.main() takes '{missing[0]}', which this "
                               f"tracer does not know")
    # fabric.launch is how setup() starts main(): it sets the device up first.
    fabric.launch(script.main, **{p: offered[p] for p in params if p != "fabric"})


def _release(spec: Spec) -> str:
    from importlib.metadata import version
    installed = version("litgpt")
    if spec.framework_version and spec.framework_version != installed:
        raise FrameworkMissing(f"--framework litgpt@{spec.framework_version}: this environment has "
                               f"litgpt {installed}")
    return installed


def run(spec: Spec, run: Run) -> None:
    import importlib

    _check(spec)
    run.framework("litgpt", _release(spec))
    run.phase("load")
    script = importlib.import_module(f"litgpt.finetune.{SCRIPTS[spec.method]}")
    fields = litgpt_config(spec)
    config = script.Config(**{**fields, **_method_fields(spec, fields)})
    if spec.seq > config.block_size:
        raise Unsupported(f"--seq {spec.seq}: litgpt attends to at most {config.block_size} positions "
                          f"(block_size of {spec.model}; GPT.forward refuses longer inputs)")
    if spec.method == "adapter" and config.adapter_start_layer >= config.n_layer:
        raise Unsupported(f"--method adapter: litgpt's adapter starts at layer {config.adapter_start_layer} "
                          f"(adapter_start_layer) and {spec.model} has {config.n_layer}: nothing to train")
    bitsandbytes_without_kernels()  # quantization and bitsandbytes' optimizers
    with distributed.node_gpus(spec.gpus):
        _fit(spec, run, script, config)


def _fit(spec: Spec, run: Run, script: Any, config: Any) -> None:
    fabric, precision = _fabric(spec, script)
    evaluating = [False]
    _mark_phases(fabric, run, evaluating)
    # full.py writes its final checkpoint with fabric.save; torch.save copies each tensor
    # to the host, so not writing it changes nothing on the GPU.
    fabric.save = lambda *_a, **_k: None
    run.note(f"litgpt finetune/{SCRIPTS[spec.method]}.py, config {config.name}, "
             f"precision {precision or 'bitsandbytes ' + str(spec.quant)}")
    stand_ins = {**_stand_ins(script, spec), "validate": _marked(script.validate, evaluating)}
    originals = {name: getattr(script, name) for name in stand_ins if hasattr(script, name)}
    try:
        for name, value in stand_ins.items():
            setattr(script, name, value)
        with tempfile.TemporaryDirectory(prefix="vramfit-trace-") as out_dir:
            _call_main(script, spec, fabric, precision, config, Path(out_dir))
        if spec.gpus > 1:
            run.note(f"rank 0 of {spec.gpus}, {type(fabric.strategy).__name__}")
    finally:
        for name, value in originals.items():
            setattr(script, name, value)
