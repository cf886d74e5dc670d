"""Memory per step beside the estimate: what monitor() and the callbacks of vramfit.lightning
and vramfit.hf log (allocated, reserved, the device's memory and the estimate's peaks), the
warnings they give (memory that keeps growing after warm-up, judged as `vramfit watch` judges
it, by vf_trend_analyze; a peak above the estimate's range; a GPU left mostly unused) and the
run they add to the history store (`vramfit history`). Loggers are written through what they
offer (a Lightning logger's log_metrics, TensorBoard's add_scalar, wandb's log, a CSV file,
any callable), none of them imported."""
from __future__ import annotations

import csv
import ctypes
import logging
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .binding import VramfitError, library, record_run
from .devices import Device, device_for
from .results import Sample

log = logging.getLogger("vramfit")
MIB = 1 << 20
PROCESS_EVERY_S = 1.0  # NVML's view of the process, at most this often (as `vramfit watch`)


class TrendConfig(ctypes.Structure):
    """struct vf_trend_config (include/vramfit/monitor.h), in steps instead of seconds."""
    _fields_ = [("warmup_s", ctypes.c_double), ("window_s", ctypes.c_double),
                ("min_slope_bps", ctypes.c_double)]


class Trend(ctypes.Structure):
    _fields_ = [("state", ctypes.c_int), ("slope_bps", ctypes.c_double), ("seconds_to_full", ctypes.c_double)]


GROWING = 2  # VF_TREND_GROWING


def _writer(target: Any) -> Callable[[dict[str, float], int], None]:
    """How to write metrics to a logger, by what it offers."""
    if isinstance(target, (str, os.PathLike)):
        return _csv_writer(os.fspath(target))
    if hasattr(target, "log_metrics"):  # a Lightning logger: TensorBoard, CSV, wandb, ...
        return lambda metrics, step: target.log_metrics(metrics, step=step)
    if hasattr(target, "add_scalar"):  # torch.utils.tensorboard's SummaryWriter
        def scalars(metrics: dict[str, float], step: int) -> None:
            for key, value in metrics.items():
                target.add_scalar(key, value, step)
        return scalars
    if hasattr(target, "log"):  # wandb, or a wandb run
        return lambda metrics, step: target.log(metrics, step=step)
    if callable(target):
        return lambda metrics, step: target(metrics, step)
    raise VramfitError(2, f"vramfit.monitor: cannot write to a {type(target).__name__}: give a logger, "
                          "a SummaryWriter, wandb, a .csv path or a function(metrics, step)")


def _csv_writer(path: str) -> Callable[[dict[str, float], int], None]:
    def write(metrics: dict[str, float], step: int) -> None:
        new = not os.path.exists(path)
        with open(path, "a", newline="") as f:
            out = csv.writer(f)
            if new:
                out.writerow(["step", *metrics])
            out.writerow([step, *metrics.values()])
    return write


class Monitor:
    """Samples the device at each step's end; see the module's first comment.

    ``estimate``: the dict of vramfit.estimate for this run (its peaks are logged beside the
    measured ones, its setup goes into the history). ``loggers``: where the metrics go.
    ``warmup_steps``: steps before growth counts; ``window_steps``: the steps growth is judged
    over; ``leak_bytes_per_step``: slower growth is never a leak; ``headroom``: warn when the
    peak leaves more than this fraction of the device unused after warm-up. ``history``: add
    the run to the history store at the end.
    """

    def __init__(self, estimate: Mapping[str, Any] | None = None, *, device: str | Device = "cuda",
                 loggers: list[Any] | None = None, prefix: str = "memory/", warmup_steps: int = 3,
                 window_steps: int = 20, leak_bytes_per_step: int = MIB, headroom: float = 0.5,
                 history: bool = True, batch: int | None = None) -> None:
        self.estimate = estimate
        self.device = device_for(device)
        self.writers = [_writer(t) for t in loggers or []]
        self.prefix = prefix
        self.trend = TrendConfig(warmup_steps, window_steps, leak_bytes_per_step)
        self.headroom = headroom
        self.history = history
        self.batch = batch if batch is not None else (estimate["setup"]["batch"] if estimate else None)
        self.samples: list[Sample] = []
        self.warnings: dict[str, str] = {}  # kind -> the warning, each given once
        self.process_peak = 0
        self.process_seen = 0.0
        self.closed = False
        self.started = time.time()
        self.device.reset_peak()

    def _estimated(self, key: str) -> int | None:
        return int(self.estimate["peak"][key]) if self.estimate else None

    def step(self, step: int | None = None) -> Sample:
        """The step that just ended: sampled, logged, judged; the peaks start anew."""
        d = self.device
        sample: Sample = {
            "step": len(self.samples) if step is None else step,
            "allocated_bytes": d.allocated_bytes(), "reserved_bytes": d.reserved_bytes(),
            "peak_allocated_bytes": d.peak_allocated_bytes(), "peak_reserved_bytes": d.peak_reserved_bytes(),
            "device_used_bytes": d.used_bytes(), "device_total_bytes": d.total_bytes(),
            "estimate_allocated_bytes": self._estimated("allocated_bytes"),
            "estimate_device_bytes": self._estimated("device_bytes")}
        self.samples.append(sample)
        if time.monotonic() - self.process_seen >= PROCESS_EVERY_S:
            self.process_seen = time.monotonic()
            self.process_peak = max(self.process_peak, d.process_bytes() or 0)
        d.reset_peak()
        metrics = self.metrics(sample)
        for write in self.writers:
            write(metrics, sample["step"])
        self._judge(sample)
        return sample

    def metrics(self, sample: Sample) -> dict[str, float]:
        """The sample as a logger's metrics, in GiB."""
        gib = float(1 << 30)
        return {self.prefix + k.removesuffix("_bytes") + "_gib": round(v / gib, 4)
                for k, v in sample.items() if k.endswith("_bytes") and isinstance(v, int)}

    def _warn(self, kind: str, text: str) -> None:
        if kind not in self.warnings:
            self.warnings[kind] = text
            log.warning("vramfit: %s", text)

    def _judge(self, sample: Sample) -> None:
        lib = library()
        n = len(self.samples)
        steps = (ctypes.c_double * n)(*[float(i) for i in range(n)])
        held = (ctypes.c_double * n)(*[float(s["allocated_bytes"]) for s in self.samples])
        room = float(max(self.device.capacity_bytes() - sample["allocated_bytes"], 0))
        trend = Trend()
        lib.vf_trend_analyze(steps, held, n, room, ctypes.byref(self.trend), ctypes.byref(trend))
        if trend.state == GROWING:
            left = f", out of memory in about {trend.seconds_to_full:.0f} steps" if trend.seconds_to_full > 0 else ""
            self._warn("leak", f"allocated memory keeps growing after warm-up, {trend.slope_bps / MIB:.1f} MiB "
                               f"per step{left}: a leak? (tensors kept across steps: losses kept "
                               "without .item(), outputs appended to a list)")
        high = self.estimate["peak"]["allocated_range"]["high"] if self.estimate else None
        if high is not None and sample["peak_allocated_bytes"] > high:
            self._warn("estimate", f"step {sample['step']} peaked at {sample['peak_allocated_bytes'] / 2**30:.2f} "
                                   f"GiB allocated, above the estimate's {high / 2**30:.2f} GiB: is the setup the "
                                   "estimate's (batch, sequence, precision)?")
        if n > self.trend.warmup_s:
            peak = max(s["peak_reserved_bytes"] for s in self.samples)
            total = sample["device_total_bytes"]
            if total and peak < (1 - self.headroom) * total:
                self._warn("headroom", f"memory headroom: the peak reserved is {peak / 2**30:.2f} GiB of "
                                       f"{total / 2**30:.2f} GiB ({100 * peak / total:.0f}%): a larger batch "
                                       "would fit (vramfit.find_max_batch finds it)")

    def close(self, outcome: str = "ok") -> None:
        """Adds the run to the history store: its command, the estimate's setup, the batch,
        the outcome and the most this process held on the device; once."""
        if not self.history or self.closed:
            return
        self.closed = True
        peak = self.process_peak or max((s["peak_reserved_bytes"] for s in self.samples), default=0)
        try:
            record_run({"source": "python", "command": shlex.join([sys.executable, *sys.argv]),
                        "setup": self.estimate["setup"] if self.estimate else None,
                        "batch": self.batch or 0, "outcome": outcome, "exit_code": 0 if outcome == "ok" else 1,
                        "peak_device_bytes": peak, "gpu": self.device.name, "when": self.started,
                        "seconds": time.time() - self.started})
        except VramfitError as e:  # the run goes on without its history
            log.warning("vramfit: the run is not kept in the history: %s", e)


@contextmanager
def monitor(estimate: Mapping[str, Any] | None = None, **options: Any) -> Iterator[Monitor]:
    """For a hand-written loop: call ``.step()`` at the end of each training step::

        with vramfit.monitor(est, loggers=[writer]) as memory:
            for batch in loader:
                ...
                memory.step()

    The run goes into the history when the block ends (outcome ok, oom or error)."""
    m = Monitor(estimate, **options)
    outcome = "error"
    try:
        yield m
        outcome = "ok"
    except BaseException as e:
        outcome = "oom" if m.device.is_out_of_memory(e) else "error"
        raise
    finally:
        m.close(outcome)
