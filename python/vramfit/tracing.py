"""vramfit.trace(model, make_batch): a module vramfit cannot describe (no Hugging Face
config: the user's own architecture), measured as `vramfit trace --workload` measures a
workload's factory: two training steps on the fake CUDA device of the tracer, in its own
process, at each batch asked for, replayed through the caching-allocator model, and the fit
of the peak over the batch. The module travels to the tracer as a copy on the meta device
(its structure, no weights), pickled with make_batch and loss_fn; the tracer's factory
(_tracer_factory.py) unpickles them, the classes of the user's script (``__main__``)
from that script imported under another name."""
from __future__ import annotations

import contextlib
import copy
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from .binding import EXIT_BAD_INPUT, VramfitError, run
from .results import WorkloadTrace

PAYLOAD = "payload.pt"
FACTORY = """import os
import sys

sys.path.extend({paths})
from vramfit._tracer_factory import build_from

def build(knobs):
    return build_from(os.path.dirname(os.path.abspath(__file__)), {main}, knobs)
"""


def meta_copy(model: Any) -> Any:
    """The module with every parameter and buffer on the meta device, the original untouched
    (tied weights stay tied: deepcopy's memo maps each tensor once)."""
    import torch

    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(model, memo)


def _workload(batches: Sequence[int], weights: str, amp: str, optimizer: str) -> str:
    points = "".join(f"    - {{batch: {b}}}\n" for b in batches)
    return (f"name: live\nweights: {weights}\namp: {amp}\noptimizer: {optimizer}\n"
            f"model:\n  factory: factory.py:build\n"
            f"sample:\n  sequences: 1\n"
            f"knobs:\n  batch: {{min: 1, max: {max(batches)}}}\n"
            f"trace:\n  points:\n{points}")


def trace(model: Any, make_batch: Callable[[int], Any], loss_fn: Callable[[Any, Any], Any] | None = None, *,
          batches: Sequence[int] = (1, 2, 4), weights: str = "fp32", amp: str = "none",
          optimizer: str = "adamw", gpu: str | None = None) -> WorkloadTrace:
    """``make_batch(n)``: a batch of n samples (tensors, or a dict or tuple of them);
    ``loss_fn(output, batch)``: the loss (default: the output's ``loss``, else its sum). The
    model is called as ``model(**batch)`` for a dict, else ``model(batch)``. make_batch and
    loss_fn are pickled by name: module-level functions. The tracer's environment (`make
    trace-env`, or $VRAMFIT_TRACE_ENV) imports the model's classes from the script's own
    import path (not its installed packages: the tracer has its own)."""
    if len(set(batches)) < 3 or min(batches) < 1:
        raise VramfitError(EXIT_BAD_INPUT, "vramfit.trace: batches: three or more different batches of at "
                                           "least 1 (the fit has three terms)")
    import torch

    main = getattr(sys.modules.get("__main__"), "__file__", None)
    with tempfile.TemporaryDirectory(prefix="vramfit-trace-") as tmp:
        try:
            torch.save({"model": meta_copy(model), "make_batch": make_batch, "loss_fn": loss_fn},
                       os.path.join(tmp, PAYLOAD))
        except (pickle.PicklingError, AttributeError, TypeError) as e:  # a lambda, a local class
            raise VramfitError(EXIT_BAD_INPUT, f"vramfit.trace: the model, make_batch and loss_fn must pickle "
                                               f"(module-level functions and classes): {e}") from e
        with open(os.path.join(tmp, "factory.py"), "w") as f:
            f.write(FACTORY.format(main=repr(os.path.abspath(main) if main else None), paths=repr(_own_paths())))
        spec = os.path.join(tmp, "workload.yaml")
        with open(spec, "w") as f:
            f.write(_workload(batches, weights, amp, optimizer))
        with _package_for_tracer():
            return cast(WorkloadTrace, run(["trace", "--workload", spec, *(["--gpu", gpu] if gpu else [])]))


def _own_paths() -> list[str]:
    """The training process's import path, less its Python's and its environment's packages:
    where its own modules (the model's classes) are found, for the tracer to find them too."""
    installed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    return [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)
            and not any(os.path.realpath(p).startswith(root + os.sep) for root in installed)]


@contextlib.contextmanager
def _package_for_tracer() -> Iterator[None]:
    """The tracer imports this vramfit package (the workload's factory calls into it), not
    the one of the source tree libvramfit.so was built in."""
    before = os.environ.get("VRAMFIT_PYTHON_DIR")
    os.environ["VRAMFIT_PYTHON_DIR"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        yield
    finally:
        if before is None:
            del os.environ["VRAMFIT_PYTHON_DIR"]
        else:
            os.environ["VRAMFIT_PYTHON_DIR"] = before
