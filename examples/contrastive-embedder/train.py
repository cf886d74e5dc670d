"""Trains the contrastive embedder for a few steps of one curriculum stage, on random tokens.

    python train.py --stage 01 --steps 3                 # the values the configs hold
    python train.py --stage 01 --auto-batch --gpu auto   # vramfit plans them at start-up
    python train.py --stage 02 --batch 96 --n-negatives 16   # as `vramfit probe` runs it
    python train.py --tiny --device cpu --steps 2        # the CPU-sized setting of the tests

The micro batch and the accumulation come from conf/config.yaml, the stage's positives and
negatives per anchor from conf/text_curriculum/<stage>_stage.yaml; options override them.
On a GPU the last line gives the peak as PyTorch counts it.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from embedder.model import ContrastiveEmbedder, Settings, info_nce, random_batch  # noqa: E402


def load_configs(stage: str) -> tuple[dict[str, Any], dict[str, Any]]:
    with open(os.path.join(HERE, "conf", "config.yaml")) as f:
        config = yaml.safe_load(f)
    with open(os.path.join(HERE, "conf", "text_curriculum", f"{stage}_stage.yaml")) as f:
        return config, yaml.safe_load(f)


def planned(stage: str, gpu: str) -> dict[str, int]:
    """The stage's values as vramfit plans them for this GPU (the vramfit package, over
    libvramfit.so: see docs/python.md in the repository)."""
    try:
        import vramfit
    except ImportError:  # run from the repository: its python/ folder holds the package
        sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
        import vramfit
    plan = vramfit.plan_workload(os.path.join(HERE, "workload.yaml"), gpu=gpu)
    if not plan["found"]:
        raise SystemExit(f"vramfit: nothing fits on {gpu}: {plan['changes']}")
    chosen = next(s for s in plan["stages"] if s["name"] == stage)
    return {"batch": chosen["batch"], "accumulation": chosen["accumulation"], **chosen["knobs"]}


def settings_for(config: dict[str, Any], tiny: bool) -> Settings:
    settings = Settings.from_config(config, HERE)
    if tiny:
        settings.encoder_config = os.path.join(HERE, "encoders", "tiny.json")
        settings.tokens = {c: 8 for c in settings.tokens}
        settings.expert_hidden, settings.fusion_out, settings.embedding_dim = 32, 32, 16
    return settings


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", default="01", help="curriculum stage: 01 ... 05")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--batch", type=int, help="anchors per micro batch (data_loader.batch_size)")
    p.add_argument("--accumulation", type=int, help="micro batches per step (accumulate_grad_batches)")
    p.add_argument("--n-positives", type=int, help="positives per anchor (the stage's n_positives)")
    p.add_argument("--n-negatives", type=int, help="negatives per anchor (the stage's n_negatives)")
    p.add_argument("--auto-batch", action="store_true", help="take all four from vramfit's plan")
    p.add_argument("--gpu", default="auto", help="the GPU --auto-batch plans for (auto: this one)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="tiny encoders and 8 tokens per channel (CPU tests)")
    return p.parse_args()


def main() -> int:
    args = arguments()
    config, stage = load_configs(args.stage)
    values = {"batch": config["data_loader"]["batch_size"],
              "accumulation": config["training"]["trainer"]["accumulate_grad_batches"],
              "n_positives": stage["n_positives"], "n_negatives": stage["n_negatives"]}
    if args.auto_batch:
        values.update(planned(args.stage, args.gpu))
    for key in values:
        given = getattr(args, key)
        if given is not None:
            values[key] = given
    b, acc, pos, neg = values["batch"], values["accumulation"], values["n_positives"], values["n_negatives"]
    print(f"stage {args.stage}: micro batch {b}, accumulation {acc}, {pos} positives and {neg} negatives "
          f"per anchor", flush=True)

    settings = settings_for(config, args.tiny)
    device = torch.device(args.device)
    torch.manual_seed(config.get("seed", 0))
    model = ContrastiveEmbedder(settings).to(device).train()
    vocab = next(iter(model.encoders.values())).config.vocab_size
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config["training"]["learning_rate"],
                                  weight_decay=config["training"]["weight_decay"])
    amp = torch.bfloat16 if config["training"]["precision"].startswith("bf16") else None
    for step in range(args.steps):
        total = 0.0
        for _ in range(acc):
            batch = random_batch(settings, b, pos, neg, device, vocab=vocab)
            with torch.autocast(device.type, dtype=amp or torch.float32, enabled=amp is not None):
                embeddings = model(batch)
            loss = info_nce(embeddings, b, pos, neg, settings.temperature) / acc
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step + 1}: loss {total:.4f}", flush=True)
    if device.type == "cuda":
        print(f"peak: max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
              f"max_memory_reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
