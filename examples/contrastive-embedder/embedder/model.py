"""The model: channel encoders, a mixture-of-experts fusion and a projection head.

``build(knobs)`` is the factory `vramfit trace --workload` runs (workload.yaml names it):
it returns the model, a function making one micro batch, and the loss.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Settings:
    """What the model is made of (conf/config.yaml's model section and token lengths)."""
    encoder_config: str = os.path.join(HERE, "encoders", "config.json")
    tokens: dict[str, int] = field(default_factory=lambda: {"title": 24, "description": 128,
                                                           "examples": 64, "excluded": 32})
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.05
    checkpointing: bool = True
    experts: int = 4
    top_k: int = 2
    expert_hidden: int = 768
    fusion_out: int = 384
    embedding_dim: int = 256
    temperature: float = 0.05

    @classmethod
    def from_config(cls, cfg: dict[str, Any], root: str = HERE) -> "Settings":
        model, lengths = cfg["model"], cfg["data_loader"]["tokenization"]["max_length"]
        return cls(encoder_config=os.path.join(root, model["encoder_config"]),
                   tokens={c: int(lengths[c]) for c in model["channels"]},
                   lora_r=model["lora"]["r"], lora_alpha=model["lora"]["alpha"],
                   lora_dropout=model["lora"]["dropout"],
                   checkpointing=model["gradient_checkpointing"], experts=model["moe"]["experts"],
                   top_k=model["moe"]["top_k"], expert_hidden=model["moe"]["hidden"],
                   fusion_out=model["moe"].get("out", 384), embedding_dim=model["embedding_dim"],
                   temperature=model["temperature"])


def channel_encoder(settings: Settings) -> nn.Module:
    """A BERT encoder from the shipped config, random weights, LoRA on query and value."""
    import peft
    import transformers as tf

    config = tf.AutoConfig.from_pretrained(settings.encoder_config)
    encoder = tf.BertModel(config)
    if settings.checkpointing:
        # transformers 5.2x names it activation_checkpointing_enable (non-reentrant by
        # default); earlier releases have gradient_checkpointing_enable only.
        if hasattr(encoder, "activation_checkpointing_enable"):
            encoder.activation_checkpointing_enable()
        else:
            encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = peft.LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha,
                           lora_dropout=settings.lora_dropout, target_modules=["query", "value"])
    return peft.get_peft_model(encoder, lora)


class MoEFusion(nn.Module):
    """The channels' pooled outputs, concatenated, through a mixture of experts. Every
    expert runs on every sequence and a gate that is zero outside each sequence's top_k
    weights them (dense: no data-dependent gather, steady memory from step to step)."""

    def __init__(self, d_in: int, experts: int, top_k: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d_in, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))
            for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.router(x).float().softmax(dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        gate = torch.zeros_like(probs).scatter(-1, chosen, weights / weights.sum(-1, keepdim=True))
        out = None
        for e, expert in enumerate(self.experts):
            y = expert(x) * gate[:, e:e + 1]
            out = y if out is None else out + y
        return out


class ContrastiveEmbedder(nn.Module):
    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.channels = list(settings.tokens)
        self.encoders = nn.ModuleDict({c: channel_encoder(settings) for c in self.channels})
        hidden = sum(self.encoders[c].config.hidden_size for c in self.channels)
        self.fusion = MoEFusion(hidden, settings.experts, settings.top_k, settings.expert_hidden,
                                settings.fusion_out)
        self.projection = nn.Linear(settings.fusion_out, settings.embedding_dim)

    def forward(self, batch: dict[str, dict[str, torch.Tensor]]) -> torch.Tensor:
        """One embedding per sequence: [sequences, embedding_dim], unit length."""
        pooled = [self.encoders[c](**batch[c]).pooler_output for c in self.channels]
        z = self.projection(self.fusion(torch.cat(pooled, dim=-1)))
        return F.normalize(z.float(), dim=-1)


def info_nce(emb: torch.Tensor, batch: int, n_positives: int, n_negatives: int,
             temperature: float) -> torch.Tensor:
    """Each anchor against every candidate of the batch (its own positives and negatives and
    the other anchors'); the loss pulls up the probability of its own positives. The
    sequences come anchor by anchor: the anchor, its positives, its negatives."""
    group = emb.view(batch, 1 + n_positives + n_negatives, -1)
    anchors = group[:, 0]
    candidates = group[:, 1:].reshape(batch * (n_positives + n_negatives), -1)
    scores = (anchors @ candidates.T).float() / temperature
    log_probs = scores.log_softmax(dim=-1).view(batch, batch, n_positives + n_negatives)
    own = torch.arange(batch, device=emb.device)
    positives = log_probs[own, own, :n_positives]
    return -torch.logsumexp(positives, dim=-1).mean()


def random_batch(settings: Settings, batch: int, n_positives: int, n_negatives: int,
                 device: Any, vocab: int = 30522) -> dict[str, dict[str, torch.Tensor]]:
    """Token ids of the right shape, padded to the fixed lengths (padding: max_length)."""
    sequences = batch * (1 + n_positives + n_negatives)
    out = {}
    for channel, length in settings.tokens.items():
        ids = torch.randint(1, vocab, (sequences, length), device=device)
        out[channel] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    return out


def build(knobs: dict[str, int], settings: Settings | None = None
          ) -> tuple[nn.Module, Callable[[Any], Any], Callable[[Any, Any], torch.Tensor]]:
    """The factory workload.yaml names: the model, a micro batch of knobs["batch"] anchors
    with their positives and negatives, and the loss of the model's output on it."""
    settings = settings or Settings()
    model = ContrastiveEmbedder(settings)
    b, p, n = knobs["batch"], knobs["n_positives"], knobs["n_negatives"]

    def make_batch(device: Any) -> Any:
        return random_batch(settings, b, p, n, device)

    def loss(output: torch.Tensor, _batch: Any) -> torch.Tensor:
        return info_nce(output, b, p, n, settings.temperature)

    return model, make_batch, loss
