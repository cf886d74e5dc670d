"""LimitedDevice's counting (devices.py): a dispatch mode that sees every operation's
outputs, kept apart because it subclasses torch's TorchDispatchMode and so imports torch."""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class CountingMode(TorchDispatchMode):  # type: ignore[misc]
    def __init__(self, device: Any) -> None:
        super().__init__()
        self.device = device

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {_key(t) for t in tree_leaves((args, kwargs)) if _counted(t)}
        for leaf in tree_leaves(out):
            if _counted(leaf):
                self.device.count(leaf, _key(leaf) in inputs)
        return out


def _counted(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type != "meta"


def _key(t: Any) -> int:
    return id(t.untyped_storage())
