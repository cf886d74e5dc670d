"""vramfit.monitor in a hand-written loop, on LimitedDevice: a sample per step with the
estimate's peaks beside it, written to the loggers given (a CSV file, a SummaryWriter-like
object, a function), a warning for memory that keeps growing (a leak), for a peak above the
estimate and for a device left mostly unused, and the run in the history store. Runs in the
hf environment; needs build/libvramfit.so."""
from __future__ import annotations

import csv
import logging

import pytest
import torch

import vramfit
from vramfit.binding import run

MIB = 1 << 20


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


class Scalars:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float, int]] = []

    def add_scalar(self, key: str, value: float, step: int) -> None:
        self.seen.append((key, value, step))


def estimate_of(allocated: int) -> dict:
    return {"setup": {"batch": 4, "model": "tiny"},
            "peak": {"allocated_bytes": allocated, "device_bytes": allocated + 100 * MIB,
                     "allocated_range": {"low": allocated - MIB, "high": allocated + MIB}}}


def loop(memory: vramfit.monitor, steps: int, leak: list | None = None, size: int = 4 * MIB) -> None:
    weights = torch.empty(size // 4)
    for _ in range(steps):
        activations = weights * 2
        if leak is not None:
            leak.append(torch.empty(MIB // 4 * 8))
        del activations
        memory.step()


def test_samples_go_to_every_logger_and_the_history(tmp_path):
    device = vramfit.LimitedDevice(1 << 30)
    scalars, calls = Scalars(), []
    path = tmp_path / "memory.csv"
    with device, vramfit.monitor(estimate_of(8 * MIB), device=device, loggers=[str(path), scalars,
                                                                             lambda m, s: calls.append(s)]) as m:
        loop(m, 3)
    assert [s["peak_allocated_bytes"] for s in m.samples] == [8 * MIB] * 3
    assert all(s["allocated_bytes"] == 4 * MIB and s["estimate_allocated_bytes"] == 8 * MIB for s in m.samples)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 3 and float(rows[0]["memory/peak_allocated_gib"]) == round(8 / 1024, 4)
    assert ("memory/estimate_device_gib", round(108 / 1024, 4), 2) in scalars.seen and calls == [0, 1, 2]
    runs = run(["history"])["runs"]
    assert runs[-1]["source"] == "python" and runs[-1]["batch"] == 4 and runs[-1]["outcome"] == "ok"
    assert runs[-1]["setup"] == {"batch": 4, "model": "tiny"} and runs[-1]["peak_device_bytes"] == 8 * MIB


def test_a_leak_a_peak_above_the_estimate_and_headroom_warn(caplog):
    device = vramfit.LimitedDevice(1 << 30)
    kept: list = []
    with caplog.at_level(logging.WARNING, "vramfit"), device, \
            vramfit.monitor(estimate_of(4 * MIB), device=device, warmup_steps=3, window_steps=9) as m:
        loop(m, 15, leak=kept)
    assert set(m.warnings) == {"leak", "estimate", "headroom"}
    assert "8.0 MiB per step" in m.warnings["leak"] and "memory headroom" in m.warnings["headroom"]
    assert sum("keeps growing" in r.message for r in caplog.records) == 1  # each warning once


def test_no_leak_no_warning():
    device = vramfit.LimitedDevice(12 * MIB)
    with device, vramfit.monitor(estimate_of(8 * MIB), device=device, warmup_steps=3, window_steps=9) as m:
        loop(m, 15)
    assert m.warnings == {}


def test_an_out_of_memory_error_is_recorded_as_such():
    device = vramfit.LimitedDevice(6 * MIB)
    with pytest.raises(torch.OutOfMemoryError), device, vramfit.monitor(device=device) as m:
        loop(m, 2)
    assert run(["history"])["runs"][-1]["outcome"] == "oom"


def test_a_logger_it_cannot_write_to():
    with pytest.raises(ValueError, match="cannot write to a int"):
        vramfit.monitor(device=vramfit.LimitedDevice(MIB), loggers=[3]).__enter__()
