"""The factory of the workloads vramfit.trace (tracing.py) writes for `trace --workload`: the
module, make_batch and loss_fn the training script pickled beside the workload, as
build(knobs) returns them (the workload's factory.py calls build_from with its folder)."""
from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from typing import Any

import torch

from .tracing import PAYLOAD


class _Unpickler(pickle.Unpickler):
    """Classes and functions of the training script (``__main__`` when it pickled them) come
    from that script, imported as a module of another name, so its ``if __name__ ==
    "__main__"`` part does not run."""

    main: Any = None

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__" and self.main is not None:
            return getattr(self.main, name)
        return super().find_class(module, name)


class _Pickle:
    Unpickler = _Unpickler
    load = pickle.load


def _script(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("vramfit_live_main", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules["vramfit_live_main"] = module
    spec.loader.exec_module(module)
    return module


class Called(torch.nn.Module):  # type: ignore[misc]
    """model(batch) as the workload tracer calls it: model(**batch) for a dict."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: Any) -> Any:
        return self.model(**batch) if isinstance(batch, dict) else self.model(batch)


def _on(batch: Any, device: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _on(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_on(v, device) for v in batch)
    return batch


def _default_loss(output: Any, batch: Any) -> Any:
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    return loss if loss is not None else output.float().sum()


def build_from(folder: str, main: str | None, knobs: dict[str, int]) -> tuple[Any, Any, Any]:
    """build(knobs) of the workload vramfit.trace wrote in folder."""
    _Unpickler.main = _script(main) if main else None
    with open(os.path.join(folder, PAYLOAD), "rb") as f:
        payload = torch.load(f, weights_only=False, pickle_module=_Pickle)
    make_batch, loss_fn = payload["make_batch"], payload["loss_fn"] or _default_loss
    return Called(payload["model"]), lambda device: _on(make_batch(knobs["batch"]), device), loss_fn
