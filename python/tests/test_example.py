"""examples/contrastive-embedder runs: its training script in the CPU-sized setting (tiny
encoders, 8 tokens per channel) with the configs' values and with the values vramfit plans
at start-up through the binding (which needs the plain build's libvramfit.so)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "contrastive-embedder")


def train(tmp_path, *args: str) -> str:
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    env.pop("VRAMFIT_FAKECUDA_SHIM", None)  # a real CPU run, no fake device
    run = subprocess.run([sys.executable, os.path.join(EXAMPLE, "train.py"), "--tiny", "--device", "cpu", *args],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def losses(out: str) -> list[float]:
    return [float(x) for x in re.findall(r"^step \d+: loss ([0-9.]+)$", out, re.M)]


def test_the_configs_values(tmp_path):
    out = train(tmp_path, "--stage", "02", "--steps", "2", "--batch", "4", "--accumulation", "2")
    # Stage 02's file: 16 positives, 8 negatives per anchor.
    assert out.splitlines()[0] == "stage 02: micro batch 4, accumulation 2, 16 positives and 8 negatives per anchor"
    got = losses(out)
    assert len(got) == 2 and all(0 < x < 20 for x in got), out


def test_auto_batch_takes_the_plan(tmp_path):
    import vramfit
    plan = vramfit.plan_workload(os.path.join(EXAMPLE, "workload.yaml"), gpu="24GiB")
    stage = next(s for s in plan["stages"] if s["name"] == "03")
    out = train(tmp_path, "--stage", "03", "--steps", "1", "--auto-batch", "--gpu", "24GiB", "--batch", "2")
    # The plan's accumulation and knobs; the micro batch as given (an option overrides the plan).
    assert out.splitlines()[0] == (f"stage 03: micro batch 2, accumulation {stage['accumulation']}, "
                                   f"{stage['knobs']['n_positives']} positives and "
                                   f"{stage['knobs']['n_negatives']} negatives per anchor")
    assert len(losses(out)) == 1


def test_a_bad_stage_fails(tmp_path):
    env = dict(os.environ)
    run = subprocess.run([sys.executable, os.path.join(EXAMPLE, "train.py"), "--tiny", "--stage", "09"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode != 0 and "09_stage.yaml" in run.stderr
