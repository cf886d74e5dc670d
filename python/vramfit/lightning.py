"""The Lightning callback: memory per optimizer step beside the estimate, into the loggers the
Trainer has (TensorBoard, CSV, wandb, ...: each one's log_metrics), the warnings of
vramfit.monitor, and the run into the history store when fitting ends. Importing this module
imports Lightning (``lightning.pytorch``, else ``pytorch_lightning``)::

    from vramfit.lightning import MemoryCallback
    trainer = L.Trainer(callbacks=[MemoryCallback(vramfit.estimate(model.model, batch=8))])
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:
    from pytorch_lightning import Callback

from .monitor import Monitor


class MemoryCallback(Callback):  # type: ignore[misc]
    """``estimate`` and ``options`` as vramfit.monitor's."""

    def __init__(self, estimate: Mapping[str, Any] | None = None, **options: Any) -> None:
        super().__init__()
        self.estimate, self.options = estimate, options
        self.monitor: Monitor | None = None  # this run's, kept after it ends

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.monitor = Monitor(self.estimate, loggers=list(trainer.loggers) if trainer.is_global_zero else [],
                               **self.options)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.monitor is not None:
            self.monitor.step(trainer.global_step)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.monitor is not None:
            self.monitor.close("oom" if self.monitor.device.is_out_of_memory(exception) else "error")

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor is not None:
            self.monitor.close("ok")
