#!/usr/bin/env python3
"""Bytes per logit that torchtitan's cross-entropy takes beyond the logits themselves, in its
forward and backward, run eager and under torch.compile: the figures head.c's compiled loss
(the profile's compiled_loss) stands on. The loss is torchtitan's (torchtitan/components/
loss.py@v0.1.0: F.cross_entropy over pred.flatten(0, 1).float()) over bf16 logits; the CPU's
allocator, seen through the profiler's memory events, holds what Inductor's kernels allocate
too, and what AOTAutograd saves and Inductor fuses does not depend on the device. Then the
head's matmul and the loss compiled as one graph, as a model compiled whole runs them
(the Trainer's torch_compile). Usage, with
the tracer's environment (make trace-env): .venv-trace/hf/bin/python bench/compiled_loss.py"""
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
BATCH, SEQ, VOCAB, HIDDEN = 2, 512, 32000, 256


def cross_entropy_loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def peak_and_left(run: Callable[[], None]) -> tuple[int, int]:
    """The most bytes the CPU's allocator held at once while run() ran, beyond what it held
    before, and what it still held after."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak, live


def peak_beyond_logits(loss_fn: Loss) -> tuple[float, float]:
    """The most bytes per logit the loss's forward and backward held at once beyond the
    logits, and what is left after (the logits' gradient)."""
    torch.manual_seed(0)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ))
    warm = torch.randn(BATCH, SEQ, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    loss_fn(warm, labels).backward()  # compiles, outside the measurement
    logits = torch.randn(BATCH, SEQ, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    peak, left = peak_and_left(lambda: loss_fn(logits, labels).backward())
    n = BATCH * SEQ * VOCAB
    return peak / n, left / n


def head_and_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The head's matmul and the loss in one function, as a model compiled whole computes them
    (transformers' ForCausalLMLoss up-casts the logits inside the model's forward)."""
    return torch.nn.functional.cross_entropy((hidden @ weight.t()).float(), labels)


def peak_with_head(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> float:
    """The most bytes per logit the head and the loss held at once, their weight's and input's
    gradients included."""
    torch.manual_seed(0)
    hidden = torch.randn(BATCH * SEQ, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(VOCAB, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (BATCH * SEQ,))
    fn(hidden, weight, labels).backward()  # compiles, outside the measurement
    hidden.grad = weight.grad = None
    peak, _ = peak_and_left(lambda: fn(hidden, weight, labels).backward())
    return peak / (BATCH * SEQ * VOCAB)


def main() -> None:
    print(f"torch {torch.__version__}, bf16 logits [{BATCH}, {SEQ}, {VOCAB}]: bytes per logit beyond the logits")
    for name, fn in (("eager", cross_entropy_loss), ("compiled", torch.compile(cross_entropy_loss))):
        peak, left = peak_beyond_logits(fn)
        print(f"  {name:8s}  peak {peak:5.2f}  after the backward {left:4.2f} (the logits' gradient)")
    print(f"the head (hidden {HIDDEN}) and the loss together: bytes per logit at the peak, the logits and "
          f"the head's gradients included ({(BATCH * SEQ + VOCAB) * HIDDEN * 2 / (BATCH * SEQ * VOCAB):.2f})")
    for name, both in (("eager", head_and_loss), ("compiled", torch.compile(head_and_loss))):
        print(f"  {name:8s}  peak {peak_with_head(both):5.2f}")


if __name__ == "__main__":
    main()
