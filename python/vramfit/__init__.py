"""vramfit in a training script: ``estimate`` and ``plan`` of the model in hand (or of a
catalogue name or a path), ``plan_workload``, ``find_max_batch`` (the largest batch, found
in-process), ``monitor`` (memory per step beside the estimate, into the run history), the
callbacks of ``vramfit.lightning`` and ``vramfit.hf``, and ``trace`` (a module vramfit cannot
describe, measured on the CPU). The answers are the commands' ``--json`` objects as typed
dicts (``vramfit.results``), over libvramfit.so; the tracer (``python -m vramfit.trace``) runs
frameworks' training code on a fake CUDA device for `vramfit trace`. docs/python.md is the
manual."""
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from .binding import VramfitError, estimate, plan, plan_workload
from .devices import CudaDevice, Device, LimitedDevice
from .monitor import monitor
from .search import find_max_batch
from .tracing import trace

try:
    __version__ = _version("vramfit")
except PackageNotFoundError:  # run from the source tree, not installed
    __version__ = "0+source"

__all__ = ["CudaDevice", "Device", "LimitedDevice", "VramfitError", "__version__", "estimate",
           "find_max_batch", "monitor", "plan", "plan_workload", "trace"]
