"""The Hugging Face Trainer callback: memory per optimizer step beside the estimate, the
warnings of vramfit.monitor, and the run into the history store when training ends. The
memory goes into the logs the Trainer hands its callbacks at each logging step (the console,
and the reporting integrations of ``report_to``: TensorBoard, wandb, ...); the integrations
see it when this callback runs before them, which ``attach`` sees to (callbacks given to the
Trainer run after its reporting ones). Importing this module imports
transformers::

    from vramfit.hf import MemoryCallback
    MemoryCallback(vramfit.estimate(model, batch=8, seq=512)).attach(trainer)
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers import TrainerCallback

from .monitor import Monitor


class MemoryCallback(TrainerCallback):  # type: ignore[misc]
    """``estimate`` and ``options`` as vramfit.monitor's."""

    def __init__(self, estimate: Mapping[str, Any] | None = None, **options: Any) -> None:
        self.estimate, self.options = estimate, options
        self.monitor: Monitor | None = None  # this run's, kept after it ends
        self.latest: dict[str, float] = {}

    def attach(self, trainer: Any) -> MemoryCallback:
        """Adds the callback first among the trainer's, so that the reporting integrations
        log what it adds."""
        trainer.callback_handler.callbacks.insert(0, self)
        return self

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor = Monitor(self.estimate, **self.options)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.monitor is not None:
            self.latest = self.monitor.metrics(self.monitor.step(state.global_step))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        if logs is not None and "loss" in logs:  # a training step's logs, not evaluation's
            logs.update(self.latest)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.monitor is not None:
            self.monitor.close("ok")
