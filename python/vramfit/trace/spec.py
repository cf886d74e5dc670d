"""The setup to trace, as `vramfit trace` passes it (JSON on standard input).

Field names and values are the `vramfit estimate` options of the contract; `config` is the
path of the model's Hugging Face config.json (the catalogue's copy for a catalogue name).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any


class Unsupported(ValueError):
    """The framework cannot run this setup, or the tracer cannot trace it yet."""


@dataclass
class Gpu:
    name: str = "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int] = (9, 0)
    total_bytes: int = 80 * 2**30


@dataclass
class Spec:
    model: str
    config: str
    framework: str = "hf"
    framework_version: str = ""
    task: str = "causal-lm"
    batch: int = 1
    seq: int = 2048
    accumulation: int = 1
    lengths: str = "fixed"
    weights: str = "fp32"
    amp: str = "none"
    optimizer: str = "adamw"
    method: str = "full"
    lora_r: int = 8
    lora_targets: list[str] = field(default_factory=lambda: ["q", "v"])
    quant: str = "none"
    grad_ckpt: str = "none"
    attention: str = "default"  # the framework's choice
    loss: str = "default"
    # torchtune's optimizer_in_bwd: each parameter's optimizer steps in the backward
    optimizer_in_bwd: bool = False
    gpus: int = 1
    shard: str = "none"
    offload: list[str] = field(default_factory=list)
    tp: int = 1
    pp: int = 1
    cp: int = 1
    steps: int = 2
    # With --lengths varied:MEAN,MAX or a histogram: each micro batch's longest sample, over
    # every step (vramfit draws them as its estimate does: vf_length_dist_batch)
    batch_lengths: list[int] = field(default_factory=list)
    gpu: Gpu = field(default_factory=Gpu)

    @classmethod
    def from_json(cls, text: str) -> "Spec":
        raw: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise Unsupported(f"unknown setup field '{unknown[0]}'")
        gpu = raw.pop("gpu", None)
        spec = cls(**raw)
        if gpu:
            spec.gpu = Gpu(name=gpu.get("name", Gpu.name),
                           capability=tuple(gpu.get("capability", Gpu.capability)),
                           total_bytes=int(gpu.get("total_bytes", Gpu.total_bytes)))
        spec.check_layout()
        return spec

    def check_layout(self) -> None:
        """Traces run one process: one GPU, or rank 0 of a data-parallel run (plain or
        sharded with FSDP, where the framework's driver can run it); other layouts are
        refused, by name."""
        layout = [(self.shard in ("zero1", "zero2", "zero3"),
                   f"--shard {self.shard}: traces shard with FSDP only (--shard fsdp)"),
                  (self.shard != "none" and self.gpus == 1,
                   f"--shard {self.shard}: sharding needs --gpus 2 or more"),
                  (self.tp > 1, f"--tp {self.tp}: traces run data parallelism only"),
                  (self.pp > 1, f"--pp {self.pp}: traces run data parallelism only"),
                  (self.cp > 1, f"--cp {self.cp}: traces run data parallelism only"),
                  (bool(self.offload) and self.framework != "torchtune",
                   "--offload: only torchtune's recipes are traced offloading (activations)"),
                  (self.optimizer_in_bwd and self.framework != "torchtune",
                   "--optimizer-in-bwd yes: torchtune's full fine-tuning recipes alone step the "
                   "optimizer in the backward")]
        for present, why in layout:
            if present:
                raise Unsupported(why)

    def longest(self, micro_batch: int) -> int:
        """The longest sample of a micro batch, counted over every step: ``--seq`` with fixed
        lengths; vramfit's draw for it with a distribution of lengths; with plain varied
        lengths three quarters of ``--seq`` in the first step and all of it after."""
        if self.lengths == "fixed":
            return self.seq
        if self.batch_lengths:
            return self.batch_lengths[micro_batch % len(self.batch_lengths)]
        return self.seq if micro_batch >= self.accumulation else max(1, self.seq * 3 // 4)

    @property
    def micro_batches(self) -> int:
        return self.steps * self.accumulation

    @property
    def lora(self) -> bool:
        return self.method in ("lora", "qlora", "dora")

    @property
    def quantized(self) -> bool:
        return self.quant != "none" or self.method == "qlora"
