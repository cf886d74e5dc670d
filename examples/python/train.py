"""A training script that fits itself to its GPU with vramfit (docs/python.md): the estimate
and the plan of the model in hand, the largest micro batch found in-process, and memory
logged per step beside the estimate, into a CSV file and the run history.

    python examples/python/train.py [--steps N] [--log memory.csv]

Without a GPU it runs on the CPU against vramfit.LimitedDevice, a stand-in of 256 MiB, so the
same code can be tried anywhere (the tests run it so)."""
from __future__ import annotations

import argparse

import torch
import transformers

import vramfit

SEQ = 64


def build() -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1024)
    return transformers.AutoModelForCausalLM.from_config(config)


def make_batch(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1024, (n, SEQ))
    return {"input_ids": ids, "labels": ids}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--log", default="memory.csv")
    args = parser.parse_args()
    device: str | vramfit.Device = "cuda" if torch.cuda.is_available() else vramfit.LimitedDevice(256 << 20)
    on = "cuda" if device == "cuda" else "cpu"

    # The model's structure, not its name: estimated as it stands (on the meta device it
    # would cost nothing).
    with device if isinstance(device, vramfit.LimitedDevice) else torch.device(on):
        model = build()
    estimate = vramfit.estimate(model, batch=8, seq=SEQ)
    print(f"estimate at batch 8: {estimate['peak']['allocated_bytes'] / 2**20:.1f} MiB allocated, "
          f"{estimate['peak']['device_bytes'] / 2**20:.1f} MiB on the device")
    plan = vramfit.plan(model, gpu="24GiB", seq=SEQ)
    print(f"plan for a 24 GiB GPU: batch {plan['recommended']['batch']}, "
          f"accumulation {plan['recommended']['accumulation']}")

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch: dict[str, torch.Tensor]) -> None:
        model(**{k: v.to(on) for k, v in batch.items()}).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    found = vramfit.find_max_batch(step, make_batch, start=estimate, model=model, optimizer=optimizer,
                                   device=device, max_batch=512, target_effective_batch=256)
    rec = found["recommended"]
    assert rec is not None, "not even a batch of 1 fits"
    print(f"largest batch: {found['max_batch']} ({found['launches']} tries); "
          f"recommended: {rec['batch']} x {rec['accumulation']} accumulation")

    at_batch = vramfit.estimate(model, batch=rec["batch"], seq=SEQ)
    with vramfit.monitor(at_batch, device=device, loggers=[args.log], batch=rec["batch"]) as memory:
        for _ in range(args.steps):
            with device if isinstance(device, vramfit.LimitedDevice) else torch.device(on):
                step(make_batch(rec["batch"]))
            sample = memory.step()
            print(f"step {sample['step']}: {sample['peak_allocated_bytes'] / 2**20:.1f} MiB peak allocated")
    print(f"memory per step in {args.log}; the run is in 'vramfit history'")


if __name__ == "__main__":
    main()
