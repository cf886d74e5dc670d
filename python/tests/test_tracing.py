"""vramfit.trace of a module vramfit cannot describe (a class of the test's own), measured by
`vramfit trace --workload` on the fake CUDA device: a point per batch and the fit; what
cannot travel to the tracer is refused. Runs in the hf environment (its tracer too); needs
the plain build."""
from __future__ import annotations

import pytest
import torch

import vramfit


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 512), torch.nn.Linear(512, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def make_batch(n: int) -> torch.Tensor:
    return torch.randn(n, 64)


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_a_module_of_its_own():
    net = Net()
    got = vramfit.trace(net, make_batch, batches=(1, 2, 4))
    assert [p["knobs"]["batch"] for p in got["points"]] == [1, 2, 4]
    peaks = [p["allocated_bytes"] for p in got["points"]]
    assert peaks == sorted(peaks) and peaks[0] > 0
    assert got["fit"]["allocated_bytes"][1] > 0  # bytes per sample
    assert next(net.parameters()).device.type == "cpu"  # the module itself is untouched


def test_what_cannot_travel_is_refused():
    with pytest.raises(ValueError, match="must pickle"):
        vramfit.trace(Net(), lambda n: torch.randn(n, 64))
    with pytest.raises(ValueError, match="three or more different batches"):
        vramfit.trace(Net(), make_batch, batches=(1, 2))
