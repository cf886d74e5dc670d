"""The Python binding (vramfit.estimate, plan, plan_workload over libvramfit.so): the same
answers as the command's --json, "no" answers as dicts, errors as VramfitError. Needs the
plain build (make build: build/libvramfit.so and build/vramfit, or $VRAMFIT_LIBRARY and
$VRAMFIT)."""
from __future__ import annotations

import os

import pytest
from cli_json import ROOT, cli

import vramfit

EXAMPLE = os.path.join(ROOT, "examples", "contrastive-embedder", "workload.yaml")


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    # plan keeps its plans in the run history: the test's own, never the user's.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_estimate_is_the_commands_json():
    got = vramfit.estimate("llama-3.2-1b", batch=2, seq=512, method="lora", weights="bf16", gpu="24GiB")
    assert got == cli("estimate", "llama-3.2-1b", "--batch", "2", "--seq", "512", "--method", "lora",
                      "--weights", "bf16", "--gpu", "24GiB")
    assert got["fits"] is True and got["peak"]["device_bytes"] > got["peak"]["allocated_bytes"] > 0


def test_a_no_is_still_an_answer():
    got = vramfit.estimate("llama-3.1-8b", batch=8, seq=4096, gpu="8GiB")
    assert got["fits"] is False and got["capacity_bytes"] == 8 * 2**30


def test_plan_and_plan_workload():
    got = vramfit.plan("llama-3.2-1b", gpu="rtx-4090", weights="bf16", amp="bf16", method="lora")
    assert got["recommended"]["batch"] >= 1
    work = vramfit.plan_workload(EXAMPLE, gpu="24GiB")
    assert work == cli("plan", "--workload", EXAMPLE, "--gpu", "24GiB")
    assert all(s["peak_device_bytes"] <= 0.85 * 24 * 2**30 for s in work["stages"])
    more = vramfit.plan_workload(EXAMPLE, gpu="80GiB", safety=0.5, target_effective_batch=512)
    assert more["target_effective_batch"] == 512 and more["budget_bytes"] == int(0.5 * 80 * 2**30)


def test_errors_raise_with_the_exit_status():
    assert issubclass(vramfit.VramfitError, ValueError)
    with pytest.raises(vramfit.VramfitError, match="unknown model 'no-such-model'") as e:
        vramfit.estimate("no-such-model")
    assert e.value.code == 2
    with pytest.raises(vramfit.VramfitError, match="--batch") as e:
        vramfit.estimate("gpt2", batch=0)
    assert e.value.code == 2
    # One call's failure leaves the next call clean.
    assert vramfit.estimate("gpt2", batch=1)["peak"]["device_bytes"] > 0


def test_flags():
    assert vramfit.binding.flags({"lora_r": 16, "json": True, "gpu": None, "eval": False}) == \
        ["--lora-r", "16", "--json"]


def test_from_the_sources_the_library_is_the_build_trees(monkeypatch):
    # Installed, the package loads the libvramfit.so inside it (install_check.py); from the
    # source tree, which has none inside, the build's.
    monkeypatch.delenv("VRAMFIT_LIBRARY", raising=False)
    assert vramfit.binding.library_path() == os.path.abspath(os.path.join(ROOT, "build", "libvramfit.so"))
