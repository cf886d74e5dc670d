"""Lightning: a LightningModule wrapping a Hugging Face model, trained by the Lightning Trainer.

The model is built as the hf driver builds it (transformers from the config, random weights,
PEFT where the setup asks) and handed to ``Trainer.fit`` on one CUDA device: the Trainer's
own precision plugin (``precision=``), accumulation (``accumulate_grad_batches``), closure,
``zero_grad`` and optimizer step run. What the tracer adds is only the phase markers (a
Lightning callback and a forward hook on the model's head).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from typing import Any, Callable

from ..spec import Spec, Unsupported
from .. import distributed
from . import Run
from .hf import Batches, _as_on_a_gpu, _build, _collate, mark_forward_and_loss

# bitsandbytes is optional here (only the 8-bit optimizers and Lion need it); when it is
# installed it must be imported before the fake device exists, as drivers.preload does.
HAS_BITSANDBYTES = importlib.util.find_spec("bitsandbytes") is not None
PACKAGES = ("lightning", "transformers", "peft") + (("bitsandbytes",) if HAS_BITSANDBYTES else ())

# Trainer(precision=...) for --weights and --amp. Autocast leaves the weights in the dtype
# they were loaded in ("-mixed"); "-true" converts the module (HalfPrecision.convert_module).
TRUE_PRECISION = {"fp32": "32-true", "bf16": "bf16-true", "fp16": "16-true"}
MIXED_PRECISION = {"bf16": "bf16-mixed", "fp16": "16-mixed"}


def precision(spec: Spec) -> str:
    if spec.amp == "none":
        return TRUE_PRECISION[spec.weights]
    if spec.amp == "fp16" and spec.weights == "fp16":
        # torch/amp/grad_scaler.py _unscale_grads_: "Attempting to unscale FP16 gradients."
        raise Unsupported("--weights fp16 --amp fp16: 16-mixed's GradScaler cannot unscale "
                          "fp16 gradients (load the weights in fp32)")
    return MIXED_PRECISION[spec.amp]


def _bitsandbytes(spec: Spec) -> Any:
    if not HAS_BITSANDBYTES:
        raise Unsupported(f"--optimizer {spec.optimizer}: needs bitsandbytes, which the lightning "
                          "tracer environment does not install")
    import bitsandbytes
    return bitsandbytes.optim


def optimizer_factory(spec: Spec) -> Callable[[list[Any]], Any]:
    """What ``configure_optimizers`` builds over the trainable parameters (the learning
    rates change no memory)."""
    import torch

    if spec.optimizer == "adamw":
        return lambda params: torch.optim.AdamW(params, lr=2e-5)
    if spec.optimizer in ("sgd", "none"):  # none: plain SGD, which keeps no state
        return lambda params: torch.optim.SGD(params, lr=1e-3)
    if spec.optimizer == "sgd-momentum":
        return lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if spec.optimizer == "adafactor":
        from transformers.optimization import Adafactor
        return lambda params: Adafactor(params, lr=1e-3, relative_step=False)
    optim = _bitsandbytes(spec)
    made = {"adamw-8bit": lambda params: optim.AdamW8bit(params, lr=2e-5),
            "lion": lambda params: optim.Lion(params, lr=1e-4)}
    return made[spec.optimizer]


def module_class() -> type:
    import lightning.pytorch as pl

    class FineTune(pl.LightningModule):
        """Stands for the user's module: the common minimal one of Lightning's documented
        fine-tuning examples (a Hugging Face model as ``self.model``, ``training_step``
        returning its loss, AdamW over the trainable parameters)."""

        def __init__(self, model: Any, make_optimizer: Callable[[list[Any]], Any]) -> None:
            super().__init__()
            self.model = model
            self.make_optimizer = make_optimizer

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
            return self.model(**batch).loss

        def configure_optimizers(self) -> Any:
            return self.make_optimizer([p for p in self.parameters() if p.requires_grad])

    return FineTune


def phase_callback(run: Run) -> Any:
    import lightning.pytorch as pl

    class Phases(pl.Callback):
        """Marks the phases from the Trainer's own hooks; "loss" starts with the model's
        head (hf.mark_forward_and_loss)."""

        def on_train_batch_start(self, *_: Any) -> None:
            run.phase("forward")

        def on_before_backward(self, *_: Any) -> None:
            run.phase("backward")

        def on_before_optimizer_step(self, _trainer: Any, module: Any, optimizer: Any) -> None:
            run.phase("optimizer")
            run.label_model(module, optimizer)

    return Phases()


def _refuse(spec: Spec) -> None:
    if spec.quantized:
        raise Unsupported("--quant/--method qlora: bitsandbytes quantization is not traced by "
                          "the lightning driver yet")
    if spec.method in ("adapter", "adapter-v2"):
        raise Unsupported(f"--method {spec.method}: LLaMA-Adapter is litgpt's; PEFT has no such method")
    if spec.loss != "default":
        raise Unsupported(f"--loss {spec.loss}: the module returns the transformers model's own loss")
    if spec.grad_ckpt == "selective":
        raise Unsupported("--grad-ckpt selective: transformers' activation checkpointing "
                          "checkpoints whole layers only")
    precision(spec)
    if spec.optimizer == "paged-adamw-8bit":
        # bitsandbytes functional.get_paged: states of 1e5+ elements live in CUDA managed
        # memory (cget_managed_ptr), outside the caching allocator; its CPU library has none.
        raise Unsupported("--optimizer paged-adamw-8bit: its states live in CUDA managed memory, "
                          "which the tracer cannot allocate; trace adamw-8bit (the same states, "
                          "in the allocator) instead")
    if spec.optimizer in ("adamw-8bit", "lion"):
        _bitsandbytes(spec)


def _checkpoint_layers(model: Any) -> None:
    # transformers 5.23 renamed gradient_checkpointing_enable (the old name still works,
    # with a FutureWarning, and calls the new one); both default to use_reentrant=False.
    enable = getattr(model, "activation_checkpointing_enable", None) or \
        model.gradient_checkpointing_enable
    enable()


class RankBatches(Batches):
    """The hf driver's samples for each rank of a Lightning run: the Trainer gives its
    loader a ``DistributedSampler`` (trainer/connectors/data_connector.py
    ``_requires_distributed_sampler``), which hands rank r the samples r, r + N, r + 2N, ...
    so rank 0's i-th sample is the dataset's i*N-th, and sees the lengths one GPU would."""

    def __init__(self, spec: Spec) -> None:
        super().__init__(spec)
        self.one_gpu = Batches(dataclasses.replace(spec, gpus=1))

    def length(self, i: int) -> int:
        return self.one_gpu.length(i // self.spec.gpus)


def _loader(spec: Spec) -> Any:
    from torch.utils.data import DataLoader
    # The hf driver's dataset and padding collator. Pinned batches, as Lightning's own
    # LightningDataModule.from_datasets loads them (core/datamodule.py); the Trainer moves
    # each batch to the GPU (Strategy.batch_to_device).
    return DataLoader(RankBatches(spec), batch_size=spec.batch, shuffle=False,
                      collate_fn=_collate(spec), num_workers=0, pin_memory=True)


def check_layout(spec: Spec) -> None:
    """Many GPUs: the Trainer launched by torchrun, one process per GPU, with
    ``strategy="ddp"`` (``--shard none``) or ``FSDPStrategy`` (``--shard fsdp``)."""
    if spec.shard not in ("none", "fsdp"):
        raise Unsupported(f"--gpus {spec.gpus} --shard {spec.shard}: the lightning tracer runs "
                          "strategy=\"ddp\" (--shard none) or FSDPStrategy (--shard fsdp)")


def _sigterm_from_the_host() -> None:
    """Before each batch every rank learns whether rank 0 got SIGTERM: rank 0 broadcasts a
    one-element tensor of 0 or 1 and each rank reads it (loops/training_epoch_loop.py
    ``_broadcast_sigterm_tensor``). The fake device cannot hold the value read back; it
    is rank 0's own flag, which the replacement reads from the host after making and
    broadcasting the same tensor (the same allocation)."""
    import torch
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def broadcast(self: Any) -> None:
        received = bool(getattr(self.trainer, "received_sigterm", False))
        flag = torch.tensor([int(received)], device=self.trainer.strategy.root_device)
        torch.distributed.broadcast(flag, src=0)
        if received:
            raise SIGTERMException()

    _TrainingEpochLoop._broadcast_sigterm_tensor = broadcast


def strategy(spec: Spec, model: Any) -> Any:
    """``strategy="ddp"``, or FSDPStrategy as Lightning's FSDP guide sets it up for a
    transformer: each decoder layer its own FSDP unit (``auto_wrap_policy`` the set of
    block classes, here the model's ``_no_split_modules``, as accelerate takes them), the
    rest of the strategy's defaults: FULL_SHARD, ``use_orig_params=True``, and the
    precision plugin's MixedPrecision (param, reduce and buffer dtype all the
    precision's: bf16 for bf16-mixed and bf16-true; pytorch/plugins/precision/fsdp.py
    ``mixed_precision_config``)."""
    if spec.gpus == 1:
        return "auto"
    if spec.shard == "none":
        return "ddp"
    from lightning.pytorch.strategies import FSDPStrategy
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = {type(m) for m in model.modules() if type(m).__name__ in names}
    if not blocks:
        raise Unsupported(f"--shard fsdp: {type(model).__name__} names no block class to wrap")
    return FSDPStrategy(auto_wrap_policy=blocks)


def run(spec: Spec, run: Run) -> None:
    _refuse(spec)
    import lightning

    _as_on_a_gpu()
    run.framework("lightning", lightning.__version__)
    run.phase("load")
    # As the documented scripts begin (it seeds torch.cuda's generators too).
    lightning.seed_everything(0, verbose=False)
    # The weights are given their GPU memory once, in the dtype the setup loads them in,
    # as a model loaded on the CPU in the module's __init__ (the documented examples) and
    # moved by the Trainer would be: the GPU never sees another copy. A "-true" precision
    # then converts the module in place (a no-op for the base weights, which are already
    # in that dtype; PEFT's fp32 adapters become half, as on the GPU). Building it in the
    # configure_model hook instead would make the same tensors directly on the device.
    model = _build(spec, run)
    if spec.grad_ckpt == "full":
        _checkpoint_layers(model)
    mark_forward_and_loss(model, run)
    if spec.gpus > 1:
        _sigterm_from_the_host()
    with distributed.node_gpus(spec.gpus):
        _fit(spec, run, model)


def _fit(spec: Spec, run: Run, model: Any) -> None:
    import lightning
    trainer = lightning.Trainer(
        accelerator="cuda", devices=spec.gpus, strategy=strategy(spec, model),
        precision=precision(spec),
        accumulate_grad_batches=spec.accumulation, max_steps=spec.steps,
        enable_checkpointing=False, logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, callbacks=[phase_callback(run)])
    run.note(f"Trainer(precision={precision(spec)!r}), no gradient clipping (Lightning's default)")
    with distributed.addresses() if spec.gpus > 1 else contextlib.nullcontext():
        trainer.fit(module_class()(model, optimizer_factory(spec)), train_dataloaders=_loader(spec))
    if spec.gpus > 1:
        run.note(f"rank 0 of {spec.gpus}, {type(trainer.strategy).__name__}")
