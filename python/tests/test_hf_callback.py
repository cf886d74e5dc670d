"""vramfit.hf.MemoryCallback in a two-step run of the Hugging Face Trainer on the CPU: memory
in the Trainer's logs at each logging step (seen by a callback after it, as the reporting
integrations see it), beside the estimate of the live model, and the run in the history
store. Runs in the hf environment; needs build/libvramfit.so."""
from __future__ import annotations

import torch
import transformers

import vramfit
from vramfit.binding import run
from vramfit.hf import MemoryCallback


class Recorder(transformers.TrainerCallback):
    """Stands for a reporting integration (TensorBoard, wandb): what on_log hands it."""

    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 128, (16,))
        return {"input_ids": ids, "labels": ids}


def test_two_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
    device = vramfit.LimitedDevice(1 << 30, name="cpu stand-in")
    with device:
        model = transformers.AutoModelForCausalLM.from_config(config)
    estimate = vramfit.estimate(model, batch=2, seq=16)
    recorder = Recorder()
    args = transformers.TrainingArguments(str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2,
                                          logging_steps=1, report_to=[], use_cpu=True, save_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[recorder])
    callback = MemoryCallback(estimate, device=device).attach(trainer)
    with device:
        trainer.train()
    steps = [logs for logs in recorder.logs if "loss" in logs]
    assert len(steps) == 2
    for logs in steps:
        assert logs["memory/peak_allocated_gib"] > 0
        assert logs["memory/estimate_allocated_gib"] == round(estimate["peak"]["allocated_bytes"] / 2**30, 4)
    assert callback.monitor is not None and [s["step"] for s in callback.monitor.samples] == [1, 2]
    last = run(["history"])["runs"][-1]
    assert last["source"] == "python" and last["gpu"] == "cpu stand-in" and last["batch"] == 2
    assert last["setup"]["model"] == "LlamaForCausalLM" and last["peak_device_bytes"] > 0
