"""``python -m vramfit.trace --events FILE --summary FILE < setup.json``

Runs the setup's training steps on the fake CUDA device and writes the allocation events
(one per line: ``a ID BYTES``, ``f ID``, ``p PHASE``, ``e``, ``c ID CATEGORY``) and a JSON
summary (framework and release, torch, the tracker's unrounded peak, notes). `vramfit trace`
starts this and replays the events through its caching-allocator model.

Exit status: 0; 2 the setup cannot be traced (one line on stderr); 3 the environment lacks
the shim or a framework; 4 an internal error (one line; the traceback goes to
``$VRAMFIT_TRACE_LOG`` when set).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import traceback
import warnings

from . import fakecuda
from .spec import Spec, Unsupported

EXIT_BAD_SETUP, EXIT_ENVIRONMENT, EXIT_INTERNAL = 2, 3, 4


def _quiet() -> None:
    """The frameworks' warnings are about the fake device, not the user's setup."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")


def _progress(started: float) -> "callable":
    def say(text: str) -> None:
        print(f"trace: {time.monotonic() - started:6.1f} s  {text}", file=sys.stderr, flush=True)
    return say


def write_events(path: str, events: list[tuple]) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write("vramfit-trace-events 1\n")
        for e in events:
            f.write(" ".join(str(x) for x in e))
            f.write("\n")


def trace(spec: Spec, events_path: str) -> dict:
    import torch

    from . import distributed, drivers, rules
    from .tracker import Hints, Tracker

    started = time.monotonic()
    drivers.check_layout(spec)
    drivers.preload(spec)
    buffers = rules.KernelBuffers(rules.cublas_workspace_bytes(spec.gpu.capability))
    # A batch of one, or of fixed lengths, has no padding: its attention mask is all ones.
    full_masks = spec.lengths == "fixed" or spec.batch == 1
    tracker = Tracker(Hints(full_masks=full_masks), after_op=buffers.after_op,
                      kernels=rules.KERNELS)
    fakecuda.install(fakecuda.DeviceFacts(spec.gpu.name, spec.gpu.capability,
                                          spec.gpu.total_bytes),
                     tracker.memory, tracker.empty_cache, tracker)
    policy = rules.SdpaPolicy(capability=spec.gpu.capability,
                              force="flash" if spec.attention == "flash" else None)
    rules.install(policy)
    ranks = distributed.one_rank(spec.gpus) if spec.gpus > 1 else contextlib.nullcontext()
    with ranks, fakecuda.fake_mode(), tracker:
        run = drivers.run(spec, tracker, _progress(started))
    write_events(events_path, tracker.events)
    return {"framework": {"name": run.framework_name, "version": run.framework_version},
            "torch": torch.__version__.split("+")[0],
            "tracked_peak_bytes": tracker.peak, "tracked_peak_phase": tracker.peak_phase,
            "sdpa_backends": policy.chosen, "cublas_workspaces": len(buffers.threads),
            "kernel_buffers": buffers.transient, "notes": run.notes,
            "seconds": round(time.monotonic() - started, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vramfit.trace")
    parser.add_argument("--events", required=True)
    parser.add_argument("--summary", required=True)
    parser.add_argument("--setup", default="-", help="setup JSON file (- for stdin)")
    args = parser.parse_args(argv)
    _quiet()

    def work() -> dict:
        text = sys.stdin.read() if args.setup == "-" else open(args.setup).read()
        spec = Spec.from_json(text)
        fakecuda.load_shim()
        return trace(spec, args.events)

    return run_reporting(work, args.summary, _framework_missing, "internal error in the tracer")


def run_reporting(work: "callable", summary_path: str, missing: "callable", failure: str) -> int:
    """Runs work() and writes the summary it returns; a failure becomes one line on stderr
    and the exit status vramfit reads (bad setup, environment, internal). missing() gives the
    exception type of a missing package: called only once something failed, since importing
    the drivers imports torch, which must come after the fake device's shim."""
    try:
        summary = work()
    except Unsupported as e:
        print(f"vramfit trace: {e}", file=sys.stderr)
        return EXIT_BAD_SETUP
    except (fakecuda.ShimMissing, missing()) as e:
        print(f"vramfit trace: {e}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    except Exception as e:  # one line for the user; the traceback for us
        log = os.environ.get("VRAMFIT_TRACE_LOG")
        if log:
            with open(log, "a") as f:
                traceback.print_exc(file=f)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"vramfit trace: {failure}: {type(e).__name__}: {first}", file=sys.stderr)
        return EXIT_INTERNAL
    with open(summary_path, "w") as f:
        json.dump(summary, f)
    return 0


def _framework_missing() -> type:
    from .drivers import FrameworkMissing
    return FrameworkMissing


if __name__ == "__main__":
    sys.exit(main())
