"""vramfit's Python side: the binding (``vramfit.estimate``, ``vramfit.plan``,
``vramfit.plan_workload``: the commands' ``--json`` answers as dicts, over libvramfit.so) and
the tracer (``python -m vramfit.trace``), which runs frameworks' training code on a fake CUDA
device for `vramfit trace`."""
from .binding import VramfitError, estimate, plan, plan_workload

__all__ = ["VramfitError", "estimate", "plan", "plan_workload"]
