"""examples/python/train.py runs as a user would run it (its own process, the package from
the source tree, no GPU: LimitedDevice stands in), and says what it found. Runs in the hf
environment; needs build/libvramfit.so."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_the_example_runs(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("VRAMFIT_FAKECUDA_SHIM", None)
    log = tmp_path / "memory.csv"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "train.py"), "--steps", "2",
                          "--log", str(log)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "largest batch:" in out.stdout and "recommended:" in out.stdout
    with open(log) as f:
        assert len(list(csv.DictReader(f))) == 2
