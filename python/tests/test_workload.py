"""The workload tracer (python -m vramfit.trace.workload): a factory of the test's own,
traced on the fake device at two points, and its refusals."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from vramfit.trace.spec import Unsupported
from vramfit.trace.workload import WorkloadSpec, load_factory

FACTORY = textwrap.dedent('''
    import torch
    from torch import nn

    def build(knobs):
        model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
        rows = knobs["batch"] * (1 + knobs["extra"])

        def make_batch(device):
            return torch.randn(rows, 64, device=device)

        def loss(output, batch):
            return output.float().pow(2).mean()

        return model, make_batch, loss
    ''')


def spec_json(tmp_path, points, **extra):
    module = tmp_path / "factory.py"
    module.write_text(FACTORY)
    return json.dumps({"factory": str(module), "function": "build", "root": str(tmp_path), "points": points,
                       **extra})


def test_two_points_grow_with_the_batch(tmp_path):
    setup = tmp_path / "setup.json"
    setup.write_text(spec_json(tmp_path, [{"batch": 8, "extra": 1}, {"batch": 64, "extra": 1}]))
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    run = subprocess.run([sys.executable, "-m", "vramfit.trace.workload", "--setup", str(setup), "--out",
                          str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    small, large = summary["points"]
    assert small["knobs"] == {"batch": 8, "extra": 1}
    # The weights, their gradients and AdamW's two states are there at both points.
    params = (64 * 256 + 256 + 256 * 64 + 64) * 4
    assert small["tracked_peak_bytes"] >= 4 * params
    assert large["tracked_peak_bytes"] > small["tracked_peak_bytes"]
    for i in range(2):
        head = (tmp_path / f"events-{i}").read_text().splitlines()[0]
        assert head == "vramfit-trace-events 1"


def test_refusals(tmp_path):
    with pytest.raises(Unsupported, match="no points"):
        WorkloadSpec.from_json(spec_json(tmp_path, []))
    with pytest.raises(Unsupported, match="workload setup"):
        WorkloadSpec.from_json(spec_json(tmp_path, [{"batch": 1}], unknown=1))
    spec = WorkloadSpec.from_json(spec_json(tmp_path, [{"batch": 1}]))
    spec.function = "nothing"
    with pytest.raises(Unsupported, match="has no function 'nothing'"):
        load_factory(spec)
    spec.factory = str(tmp_path / "missing.py")
    with pytest.raises(Unsupported, match="does not exist"):
        load_factory(spec)
