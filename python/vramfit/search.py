"""find_max_batch: the largest micro batch that fits, found in the training process itself by
running its own step at different batches, steered as ``vramfit probe`` steers its launches
(the search is the C library's, vf_probe_* of include/vramfit/probe.h, driven through
ctypes): from the estimate when there is one, each try's ``max_memory_allocated()`` fitted
against what the process may hold. A try that runs out of memory leaves nothing behind: its
gradients, the optimizer state it created, the references its traceback holds and the cached
blocks are freed before the next, and what is still allocated after it is measured."""
from __future__ import annotations

import ctypes
import gc
import math
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from .binding import EXIT_BAD_INPUT, VramfitError, library
from .devices import Device, device_for
from .results import BatchSearch, Recommended, Settled, Trial

OK, OOM = 0, 1  # enum vf_probe_outcome


class Prior(ctypes.Structure):
    """struct vf_probe_prior: the estimate's peak(batch) = fixed + slope b + bend b^2."""
    _fields_ = [("fixed", ctypes.c_double), ("slope", ctypes.c_double), ("bend", ctypes.c_double)]


def _prior(estimate: Mapping[str, Any]) -> tuple[Prior, int]:
    """The estimate's line: what grows with the batch is its activations and temporaries at
    the peak (vf_estimate_batch_part), the rest stays; and the batch it was made for."""
    batch = int(estimate["setup"]["batch"])
    grows = int(estimate["breakdown"]["activations"]) + int(estimate["breakdown"]["temporaries"])
    fixed = int(estimate["peak"]["allocated_bytes"]) - grows
    return Prior(max(fixed, 0), grows / batch, 0.0), batch


def _start(start: int | Mapping[str, Any] | None, ceiling: int) -> tuple[int, Prior | None]:
    """The first batch (0: none) and the estimate's curve, from a batch or an estimate."""
    if start is None:
        return 0, None
    if isinstance(start, int):
        if start < 1:
            raise VramfitError(EXIT_BAD_INPUT, f"find_max_batch: start {start}: a batch of at least 1")
        return start, None
    prior, batch = _prior(start)
    if prior.slope <= 0:
        return batch, None
    return max(1, int((ceiling - prior.fixed) / prior.slope)), prior


class _Cleanup:
    """What a try may leave: gradients, the optimizer state the search created, cached
    blocks."""

    def __init__(self, model: Any, optimizer: Any, device: Device) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.states = set(optimizer.state) if optimizer is not None else set()

    def __call__(self) -> None:
        if self.model is not None:
            self.model.zero_grad(set_to_none=True)
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
            for param in [p for p in self.optimizer.state if p not in self.states]:
                del self.optimizer.state[param]
        gc.collect()
        self.device.release_cache()


def _run_try(step_fn: Callable[[Any], Any], make_batch: Callable[[int], Any], batch: int, steps: int,
             device: Device) -> None:
    with device.tracking():
        data = make_batch(batch)
        for _ in range(steps):
            step_fn(data)


def _try(step_fn: Callable[[Any], Any], make_batch: Callable[[int], Any], batch: int, steps: int,
         device: Device, cleanup: _Cleanup) -> tuple[int, int, float, int]:
    """One try: its outcome, its peak, its seconds and what it left allocated."""
    before = device.allocated_bytes()
    device.reset_peak()
    started = time.monotonic()
    outcome = OK
    try:
        _run_try(step_fn, make_batch, batch, steps, device)
    except Exception as e:
        # The traceback's frames hold the batch and the activations until they are cleared.
        traceback.clear_frames(e.__traceback__)
        if not device.is_out_of_memory(e):
            cleanup()
            raise
        outcome = OOM
    seconds = time.monotonic() - started
    peak = device.peak_allocated_bytes()
    cleanup()  # every try starts as a training step does: no gradients, no new state
    return outcome, peak, seconds, max(device.allocated_bytes() - before, 0)


def _recommend(probe: Any, found: int, ceiling: int, margin: float, smallest: int,
               target: int | None) -> Recommended | None:
    """The largest batch up to the boundary whose predicted peak stays within 1 - margin of
    the ceiling (without a prediction, the boundary less the margin), and the accumulation
    that reaches the target effective batch."""
    if not found:
        return None
    lib = library()
    batch = found
    predicted: int | None = lib.vf_probe_predict(probe, batch) or None
    if predicted is None:
        batch = max(smallest, math.floor(found * (1 - margin)))
    while predicted is not None and batch > smallest and predicted > (1 - margin) * ceiling:
        batch -= 1
        predicted = lib.vf_probe_predict(probe, batch) or None
    accumulation = max(1, math.ceil(target / batch)) if target else 1
    return {"batch": batch, "accumulation": accumulation, "effective_batch": batch * accumulation,
            "predicted_peak_bytes": predicted}


def _settled(probe: Any) -> Settled | None:
    batch, predicted, limit = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
    if not library().vf_probe_settled(probe, ctypes.byref(batch), ctypes.byref(predicted), ctypes.byref(limit)):
        return None
    return {"batch": batch.value, "predicted_bytes": predicted.value, "limit_bytes": limit.value}


def find_max_batch(step_fn: Callable[[Any], Any], make_batch: Callable[[int], Any], *,
                   start: int | Mapping[str, Any] | None = None, margin: float = 0.1,
                   target_effective_batch: int | None = None, model: Any = None, optimizer: Any = None,
                   min_batch: int = 1, max_batch: int = 4096, steps: int = 2,
                   device: str | Device = "cuda") -> BatchSearch:
    """The largest micro batch whose training step fits the device.

    ``make_batch(n)`` makes a batch of n samples and ``step_fn(batch)`` runs one training step
    on it (forward, backward, the optimizer's step); each try runs ``steps`` of them (the
    second has the optimizer's state: the peak). ``start``: a batch to try first, or the dict
    of ``vramfit.estimate`` for the step's setup, whose curve starts and steers the search.
    ``model`` and ``optimizer``: what a try that runs out of memory leaves there (gradients,
    new optimizer state) is freed, as is the optimizer state the search created, at its end.
    ``margin``: the recommended batch keeps its predicted peak within 1 - margin of what the
    process may hold. ``device``: "cuda", "cuda:N" or a vramfit.Device (LimitedDevice tries
    the search on the CPU).
    """
    if not 0 <= margin < 1:
        raise VramfitError(EXIT_BAD_INPUT, f"find_max_batch: margin {margin}: a fraction from 0 to below 1")
    if target_effective_batch is not None and target_effective_batch < 1:
        raise VramfitError(EXIT_BAD_INPUT, f"find_max_batch: target_effective_batch {target_effective_batch}: "
                                           "at least 1")
    lib = library()
    dev = device_for(device)
    cleanup = _Cleanup(model, optimizer, dev)
    dev.release_cache()
    ceiling = dev.capacity_bytes()
    hint, prior = _start(start, ceiling)
    probe = ctypes.create_string_buffer(lib.vf_probe_size())
    if lib.vf_probe_init(probe, min_batch, max_batch, hint):
        raise VramfitError(EXIT_BAD_INPUT, f"find_max_batch: min_batch {min_batch}, max_batch {max_batch}: "
                                           "need 1 <= min_batch <= max_batch")
    lib.vf_probe_steer(probe, ceiling, ctypes.byref(prior) if prior else None)
    trials: list[Trial] = []
    move = ctypes.c_int()
    try:
        while batch := lib.vf_probe_next(probe, ctypes.byref(move)):
            predicted = lib.vf_probe_predict(probe, batch) or None
            outcome, peak, seconds, left = _try(step_fn, make_batch, batch, steps, dev, cleanup)
            lib.vf_probe_record(probe, batch, outcome, peak)
            trials.append({"batch": batch, "outcome": lib.vf_probe_outcome_name(outcome).decode(),
                           "peak_allocated_bytes": peak, "predicted_peak_bytes": predicted,
                           "move": lib.vf_probe_move_name(move.value).decode(), "seconds": round(seconds, 3),
                           "left_behind_bytes": left})
    finally:
        cleanup()
    found = max((t["batch"] for t in trials if t["outcome"] == "ok"), default=0)
    return {"max_batch": found, "recommended": _recommend(probe, found, ceiling, margin, min_batch,
                                                           target_effective_batch),
            "margin": margin, "ceiling_bytes": ceiling, "estimate_batch": hint or None,
            "launches": len(trials), "trials": trials, "settled_by_peaks": _settled(probe)}
