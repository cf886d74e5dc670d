"""``python -m vramfit.trace.workload --setup FILE --out DIR``

Traces a workload's own model (its factory, ``module.py:build``) at several knob settings on
the fake CUDA device: for each point, the factory builds the model on the meta device, the
model is given its memory on the device as a checkpoint load would, and two training steps
run in a plain loop (forward, loss, backward, the optimizer's step, ``zero_grad``), under
autocast when the workload asks for it. The factory's contract::

    build(knobs: dict[str, int]) -> (model, make_batch, loss)
        model(batch) -> output;  make_batch(device) -> batch;  loss(output, batch) -> scalar

The events of point i go to DIR/events-i (the format of ``python -m vramfit.trace``), and
DIR/summary.json says what ran. Exit status as ``python -m vramfit.trace``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import fakecuda
from .__main__ import _progress, _quiet, run_reporting, write_events
from .spec import Gpu, Unsupported

STEPS = 2  # the second step is the first with every optimizer state


@dataclass
class WorkloadSpec:
    factory: str            # the module's path
    function: str           # the factory's name in it
    root: str               # the workload's folder: the module's imports start there
    points: list[dict[str, int]]
    weights: str = "fp32"
    amp: str = "none"
    optimizer: str = "adamw"
    gpu: Gpu = field(default_factory=Gpu)

    @classmethod
    def from_json(cls, text: str) -> "WorkloadSpec":
        raw = json.loads(text)
        gpu = raw.pop("gpu", None)
        try:
            spec = cls(**raw)
        except TypeError as e:
            raise Unsupported(f"workload setup: {e}") from e
        if gpu:
            spec.gpu = Gpu(name=gpu["name"], capability=tuple(gpu["capability"]),
                           total_bytes=int(gpu["total_bytes"]))
        if not spec.points:
            raise Unsupported("workload setup: no points to trace")
        return spec


def load_factory(spec: WorkloadSpec) -> Callable[..., Any]:
    """The user's function, imported from its file with the workload's folder on the path."""
    if not os.path.isfile(spec.factory):
        raise Unsupported(f"factory: {spec.factory} does not exist")
    sys.path.insert(0, spec.root)
    name = "vramfit_workload_" + os.path.splitext(os.path.basename(spec.factory))[0]
    module_spec = importlib.util.spec_from_file_location(name, spec.factory)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    fn = getattr(module, spec.function, None)
    if not callable(fn):
        raise Unsupported(f"factory: {spec.factory} has no function '{spec.function}'")
    return fn


# Libraries that choose a backend when imported (bitsandbytes, through PEFT) must take the
# CPU one before the fake device exists, as drivers.preload does for the frameworks: the
# user's code may import them only when the factory runs.
PRELOAD = ("bitsandbytes", "peft", "transformers")


def preload() -> None:
    for name in PRELOAD:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


def optimizer_for(name: str, params: list[Any]) -> Any:
    """PyTorch's own optimizers; AdamW fused, as transformers' and Lightning's defaults on
    a GPU with torch >= 2.8 (one kernel, no state-sized temporaries)."""
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name in ("sgd", "none"):
        return torch.optim.SGD(params, lr=1e-3)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    raise Unsupported(f"optimizer {name}: the workload tracer runs adamw, sgd and sgd-momentum")


def autocast(amp: str) -> Any:
    import contextlib

    import torch
    if amp == "none":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[amp])


def run_point(spec: WorkloadSpec, factory: Callable[..., Any], knobs: dict[str, int], record: Any) -> None:
    """Builds the model at these knobs and runs its training steps, telling the tracker
    the phases."""
    import torch

    from .drivers import materialize

    record.phase("load")
    with torch.device("meta"):
        built = factory(dict(knobs))
    try:
        model, make_batch, loss_fn = built
    except (TypeError, ValueError) as e:
        raise Unsupported("factory: build(knobs) must return (model, make_batch, loss)") from e
    if spec.weights != "fp32":
        model.to({"bf16": torch.bfloat16, "fp16": torch.float16}[spec.weights])
    materialize(model, "cuda")
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = optimizer_for(spec.optimizer, params)
    for _ in range(STEPS):
        record.phase("forward")
        batch = make_batch(torch.device("cuda"))
        with autocast(spec.amp):
            output = model(batch)
            record.phase("loss")
            loss = loss_fn(output, batch)
        record.phase("backward")
        loss.backward()
        record.phase("optimizer")
        record.label_model(model, optimizer)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del batch, output, loss


def trace_point(spec: WorkloadSpec, factory: Callable[..., Any], knobs: dict[str, int],
                events_path: str, say: Callable[[str], None]) -> dict[str, Any]:
    from . import rules
    from .drivers import Run
    from .tracker import Hints, Tracker

    started = time.monotonic()
    buffers = rules.KernelBuffers(rules.cublas_workspace_bytes(spec.gpu.capability))
    tracker = Tracker(Hints(full_masks=True), after_op=buffers.after_op, kernels=rules.KERNELS)
    fakecuda.install(fakecuda.DeviceFacts(spec.gpu.name, spec.gpu.capability, spec.gpu.total_bytes),
                     tracker.memory, tracker.empty_cache, tracker)
    policy = rules.SdpaPolicy(capability=spec.gpu.capability)
    rules.install(policy)
    record = Run(tracker, say)
    with fakecuda.fake_mode(), tracker:
        run_point(spec, factory, knobs, record)
    write_events(events_path, tracker.events)
    return {"knobs": knobs, "tracked_peak_bytes": tracker.peak, "tracked_peak_phase": tracker.peak_phase,
            "sdpa_backends": policy.chosen, "seconds": round(time.monotonic() - started, 3)}


def trace(spec: WorkloadSpec, out_dir: str) -> dict[str, Any]:
    import torch

    started = time.monotonic()
    say = _progress(started)
    preload()
    factory = load_factory(spec)
    points = []
    for i, knobs in enumerate(spec.points):
        label = ", ".join(f"{k} {v}" for k, v in knobs.items())
        say(f"point {i + 1}/{len(spec.points)}: {label}")
        points.append(trace_point(spec, factory, knobs, os.path.join(out_dir, f"events-{i}"), say))
    return {"torch": torch.__version__.split("+")[0], "points": points,
            "seconds": round(time.monotonic() - started, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vramfit.trace.workload")
    parser.add_argument("--setup", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    _quiet()

    def work() -> dict[str, Any]:
        with open(args.setup) as f:
            spec = WorkloadSpec.from_json(f.read())
        fakecuda.load_shim()
        return trace(spec, args.out)

    return run_reporting(work, os.path.join(args.out, "summary.json"), lambda: ModuleNotFoundError,
                         "the workload's factory failed")


if __name__ == "__main__":
    sys.exit(main())
