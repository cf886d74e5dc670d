"""One driver per framework: it builds the model the setup describes and runs the
framework's own training code for it, telling the tracker which phase is running."""
from __future__ import annotations

import importlib
from typing import Any, Callable

from ..spec import Spec, Unsupported
from ..tracker import Tracker

DRIVERS = {"hf": "hf", "litgpt": "litgpt", "torchtune": "torchtune", "lightning": "lightning"}


class FrameworkMissing(RuntimeError):
    """The framework's package is not installed in the tracer's environment."""


class Run:
    """What a driver reports while it runs: phases, the framework's release, notes."""

    def __init__(self, tracker: Tracker, progress: Callable[[str], None]) -> None:
        self.tracker = tracker
        self.progress = progress
        self.framework_name = ""
        self.framework_version = ""
        self.notes: list[str] = []

    def framework(self, name: str, version: str) -> None:
        self.framework_name, self.framework_version = name, version

    def phase(self, name: str) -> None:
        if name != self.tracker._phase:
            self.tracker.phase(name)
            self.progress(name)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def label_model(self, model: Any, optimizer: Any) -> None:
        params = [p for p in model.parameters()]
        self.tracker.label(params, "weights")
        self.tracker.label([p.grad for p in params if p.grad is not None], "gradients")
        if optimizer is not None:
            states = [t for s in getattr(optimizer, "state", {}).values()
                      for t in s.values() if hasattr(t, "untyped_storage")]
            self.tracker.label(states, "optimizer")


def materialize(model: Any, device: str) -> None:
    """Gives every parameter and buffer of a meta-device model its memory on ``device``,
    one tensor per distinct parameter, as loading a checkpoint into a model made on the
    meta device does. (``Module.to_empty`` would do the same, but its ``_apply`` cannot
    swap tensors the fake mode has seen.)"""
    import torch

    made: dict[int, Any] = {}
    for module in model.modules():
        for kind in ("_parameters", "_buffers"):
            table = getattr(module, kind)
            for name, t in list(table.items()):
                if t is None or t.device.type != "meta":
                    continue
                if id(t) not in made:
                    empty = torch.empty_like(t, device=device)
                    made[id(t)] = (torch.nn.Parameter(empty, requires_grad=t.requires_grad)
                                   if kind == "_parameters" else empty)
                table[name] = made[id(t)]


def driver(name: str) -> Any:
    if name not in DRIVERS:
        raise Unsupported(f"--framework {name}: no tracer driver (traced: {', '.join(DRIVERS)})")
    return importlib.import_module(f"{__name__}.{DRIVERS[name]}")


def check_layout(spec: Spec) -> None:
    """A driver that traces multi-GPU runs (rank 0 of a fake process group, see
    distributed.py) says which with its own ``check_layout``; the others trace one GPU."""
    if spec.gpus == 1:
        return
    module = driver(spec.framework)
    if not hasattr(module, "check_layout"):
        raise Unsupported(f"--gpus {spec.gpus}: the {spec.framework} tracer runs one GPU "
                          "(multi-GPU traces: --framework torchtune, hf or lightning)")
    module.check_layout(spec)


def preload(spec: Spec) -> None:
    """Imports the framework before the fake CUDA device exists: libraries that choose a
    backend when imported (bitsandbytes) must take the CPU one, since no CUDA library is
    there to load; their fake kernels serve the fake device all the same."""
    module = driver(spec.framework)
    for name in module.PACKAGES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] == name.split(".")[0]:
                raise FrameworkMissing(
                    f"--framework {spec.framework}: the Python package '{name}' is not installed "
                    f"in the tracer's environment (make trace-env builds it)") from e
            raise


def run(spec: Spec, tracker: Tracker, progress: Callable[[str], None]) -> Run:
    record = Run(tracker, progress)
    driver(spec.framework).run(spec, record)
    return record
