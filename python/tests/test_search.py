"""find_max_batch on the CPU, against LimitedDevice (a device of a fixed size that counts the
storages made under it and raises torch.OutOfMemoryError past it): the boundary, the
recommended batch and accumulation, the search the C library steers, and that a try that ran
out of memory leaves nothing behind (measured: allocated bytes after it, gradients,
optimizer state). Runs in the hf environment; needs build/libvramfit.so."""
from __future__ import annotations

import math

import pytest
import torch

import vramfit
from vramfit import LimitedDevice

MIB = 1 << 20
WIDTH = 512  # the model: two 1 MiB weights, 4 MiB of AdamW state
PER_SAMPLE = 2 * MIB  # what one sample's activations take
LIMIT = 1024 * MIB
kept: list[torch.Tensor] = []


class Setup:
    """A model and optimizer made on the device, and a training step whose activations are
    PER_SAMPLE a sample, made after the backward so that a try that runs out of memory has
    gradients (and, from its second step, optimizer state) to leave behind."""

    def __init__(self, leak: bool = False) -> None:
        self.device = LimitedDevice(LIMIT)
        with self.device:
            self.model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH, bias=False),
                                             torch.nn.Linear(WIDTH, WIDTH, bias=False))
        self.optimizer = torch.optim.AdamW(self.model.parameters())
        self.leak = leak

    def make_batch(self, n: int) -> torch.Tensor:
        return torch.empty(n, WIDTH)

    def step(self, batch: torch.Tensor) -> None:
        self.model(batch[:1]).sum().backward()
        self.optimizer.step()
        activations = torch.empty(len(batch) * PER_SAMPLE // 4)
        if self.leak:
            kept.append(activations)
        self.optimizer.zero_grad(set_to_none=True)

    def fixed(self) -> int:
        """Weights, their gradients and AdamW's two states at the step's peak."""
        return 2 * (WIDTH * WIDTH * 4) * 4


def boundary() -> int:
    """The largest batch whose step fits: the fixed bytes and the batch's activations (and the
    small tensors of the step, found by trying the neighbours)."""
    n = (LIMIT - Setup().fixed()) // PER_SAMPLE
    while not fits(n):
        n -= 1
    while fits(n + 1):
        n += 1
    return n


def fits(n: int) -> bool:
    s = Setup()
    try:
        with s.device:
            for _ in range(2):
                s.step(s.make_batch(n))
        return True
    except torch.OutOfMemoryError:
        return False


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_the_boundary_and_nothing_left_behind():
    s = Setup()
    before = s.device.allocated_bytes()
    found = vramfit.find_max_batch(s.step, s.make_batch, model=s.model, optimizer=s.optimizer, device=s.device)
    assert found["max_batch"] == boundary()
    ooms = [t for t in found["trials"] if t["outcome"] == "oom"]
    assert ooms and all(t["left_behind_bytes"] == 0 for t in found["trials"])
    # The search leaves the process as it found it.
    assert s.device.allocated_bytes() == before
    assert all(p.grad is None for p in s.model.parameters()) and not s.optimizer.state
    # Steered by the measured peaks: far fewer tries than doubling from 1 and bisecting.
    assert found["launches"] <= 12 and found["ceiling_bytes"] == LIMIT


def test_the_measurement_sees_what_a_try_leaves():
    # Without the model and the optimizer, an out-of-memory try's gradients and state stay.
    s = Setup()
    found = vramfit.find_max_batch(s.step, s.make_batch, device=s.device, max_batch=1024)
    assert any(t["left_behind_bytes"] > 0 for t in found["trials"] if t["outcome"] == "oom")
    s = Setup(leak=True)
    found = vramfit.find_max_batch(s.step, s.make_batch, model=s.model, optimizer=s.optimizer, device=s.device,
                                   max_batch=1024)
    # Each step of a try kept its activations.
    assert all(t["left_behind_bytes"] >= 2 * t["batch"] * PER_SAMPLE for t in found["trials"] if t["outcome"] == "ok")
    kept.clear()


def test_starting_from_an_estimate():
    s = Setup()
    grows = PER_SAMPLE * 64  # an estimate at batch 64, 10% above what the step takes
    estimate = {"setup": {"batch": 64}, "peak": {"allocated_bytes": s.fixed() + int(1.1 * grows)},
                "breakdown": {"activations": int(1.1 * grows) // 2, "temporaries": int(1.1 * grows) // 2}}
    found = vramfit.find_max_batch(s.step, s.make_batch, start=estimate, model=s.model, optimizer=s.optimizer,
                                   device=s.device)
    assert found["max_batch"] == boundary()
    assert found["trials"][0]["move"] == "start" and found["estimate_batch"] == found["trials"][0]["batch"]
    assert abs(found["estimate_batch"] - boundary() / 1.1) <= 2
    assert found["launches"] <= 6


def test_the_recommended_batch_and_accumulation():
    s = Setup()
    found = vramfit.find_max_batch(s.step, s.make_batch, model=s.model, optimizer=s.optimizer, device=s.device,
                                   margin=0.2, target_effective_batch=1000)
    rec = found["recommended"]
    assert rec is not None and rec["batch"] < found["max_batch"]
    assert rec["predicted_peak_bytes"] <= 0.8 * LIMIT
    assert rec["accumulation"] == math.ceil(1000 / rec["batch"]) and rec["effective_batch"] >= 1000


def test_nothing_fits():
    s = Setup()
    found = vramfit.find_max_batch(s.step, s.make_batch, model=s.model, optimizer=s.optimizer,
                                   device=s.device, min_batch=600)
    assert found["max_batch"] == 0 and found["recommended"] is None and found["launches"] == 1


def test_a_step_that_fails_otherwise_stops_the_search():
    s = Setup()

    def broken(batch: torch.Tensor) -> None:
        s.step(batch)
        raise KeyError("labels")

    with pytest.raises(KeyError):
        vramfit.find_max_batch(broken, s.make_batch, model=s.model, optimizer=s.optimizer, device=s.device)
    assert all(p.grad is None for p in s.model.parameters()) and not s.optimizer.state


@pytest.mark.parametrize("bad, message", [
    ({"margin": 1.5}, "margin 1.5"), ({"min_batch": 8, "max_batch": 4}, "min_batch 8, max_batch 4"),
    ({"device": "cpu"}, "device 'cpu'"), ({"start": 0}, "start 0"),
    ({"target_effective_batch": 0}, "target_effective_batch 0")])
def test_bad_arguments(bad, message):
    s = Setup()
    with pytest.raises(ValueError, match=message):
        vramfit.find_max_batch(s.step, s.make_batch, **{"device": s.device, **bad})
