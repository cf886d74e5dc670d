"""The litgpt driver at litgpt 0.3.0, the release of the config hub's benchmark table
(bench/README.md "Tracer self-check"), with bitsandbytes 0.42, whose CUDA kernels the
tracer turns into no-ops (this file runs in the litgpt@0.3.0 environment)."""
import os
import sys
from importlib.metadata import version

import pytest

pytest.importorskip("litgpt")  # this file runs in a litgpt environment only
if version("litgpt") != "0.3.0":
    pytest.skip("litgpt 0.3.0 is not installed here", allow_module_level=True)

sys.path.insert(0, os.path.dirname(__file__))
from test_litgpt import VALIDATION, allocated_in, micro_batches, phases, run  # noqa: E402

from vramfit.trace import fakecuda  # noqa: E402
from vramfit.trace.drivers.litgpt import bitsandbytes_without_kernels  # noqa: E402
from vramfit.trace.spec import Unsupported  # noqa: E402
from vramfit.trace.tracker import Tracker  # noqa: E402


def test_the_release_runs_its_own_scripts(tmp_path):
    summary, events = run(tmp_path, method="lora", framework_version="0.3.0")
    assert summary["framework"] == {"name": "litgpt", "version": "0.3.0"}
    assert phases(events) == ["load"] + VALIDATION + ["forward", "loss", "backward", "optimizer"] * 2 + VALIDATION


def test_the_release_makes_adamw_only(tmp_path):
    with pytest.raises(Unsupported, match="AdamW only"):
        run(tmp_path, method="lora", optimizer="sgd", framework_version="0.3.0")


def test_qlora_runs_on_bitsandbytes_0_42(tmp_path):
    summary, events = run(tmp_path, method="qlora", quant="nf4", framework_version="0.3.0")
    assert "bitsandbytes nf4" in summary["notes"][0]
    # MatMul4Bit dequantizes each weight in Python: the bf16 copy of the head (512 x 64)
    # appears in every forward and backward that uses it.
    assert all(allocated_in(events, span, 512 * 64 * 2) for span in micro_batches(events))


def test_matmul4bit_keeps_its_input_while_its_graph_lives():
    # bitsandbytes 0.42 autograd/_functions.py MatMul4Bit: ctx.tensors = (A, B), an attribute
    # of the graph node that backward does not release (save_for_backward would).
    import bitsandbytes as bnb
    import torch

    tracker = Tracker()
    fakecuda.install(fakecuda.DeviceFacts("NVIDIA A10G", (8, 6), 24 << 30), tracker.memory, tracker.empty_cache)
    bitsandbytes_without_kernels()
    with fakecuda.fake_mode(), tracker:
        weight = torch.empty(256, 128, dtype=torch.half, device="cuda")
        packed, state = bnb.functional.quantize_4bit(weight, quant_type="nf4")
        leaf = torch.empty(4, 128, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        x = leaf * 2  # held by nothing but MatMul4Bit (mul by a scalar saves nothing)
        x_id = tracker.storage_id(x)
        out = bnb.matmul_4bit(x, packed.t(), quant_state=state)
        out.sum().backward()
        del x
        assert ("f", x_id) not in tracker.events
        del out
        assert ("f", x_id) in tracker.events
