"""vramfit.lightning.MemoryCallback in a two-step run of the Lightning Trainer on the CPU:
memory per step in the Trainer's own logger (CSVLogger here; TensorBoard and wandb loggers
take the same log_metrics), beside the estimate of the live model inside the
LightningModule, and the run in the history store. Runs in the lightning environment; needs
build/libvramfit.so."""
from __future__ import annotations

import csv

import lightning as L
import torch
import transformers
from lightning.pytorch.loggers import CSVLogger

import vramfit
from vramfit.binding import run
from vramfit.lightning import MemoryCallback


class Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
        self.model = transformers.AutoModelForCausalLM.from_config(config)

    def training_step(self, batch, batch_idx):
        return self.model(input_ids=batch, labels=batch).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


def test_two_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    device = vramfit.LimitedDevice(1 << 30)
    with device:
        module = Module()
    estimate = vramfit.estimate(module, batch=2, seq=16)  # the HF model inside is found
    logger = CSVLogger(str(tmp_path), name="run")
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=logger, log_every_n_steps=1,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback := MemoryCallback(estimate, device=device)])
    data = torch.utils.data.DataLoader(torch.randint(0, 128, (8, 16)), batch_size=2)
    with device:
        trainer.fit(module, data)
    with open(f"{logger.log_dir}/metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("memory/allocated_gib")]
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert all(float(r["memory/peak_allocated_gib"]) > 0 for r in rows)
    assert float(rows[0]["memory/estimate_device_gib"]) == round(estimate["peak"]["device_bytes"] / 2**30, 4)
    assert callback.monitor is not None and len(callback.monitor.samples) == 2
    last = run(["history"])["runs"][-1]
    assert last["source"] == "python" and last["outcome"] == "ok" and last["setup"]["seq"] == 16
