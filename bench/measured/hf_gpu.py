"""Real-GPU runs of traced hf setups: the same Trainer arguments, data and PEFT adapters as
the tracer's hf driver (python/vramfit/trace/drivers/hf.py), on a real CUDA device, each
setup in a fresh process; prints one JSON line per setup with max_memory_allocated and
max_memory_reserved over the whole run (load included), as the tracer measures it.

usage (on a machine with a GPU, from the repository root):
    PYTHONPATH=python python3 bench/measured/hf_gpu.py OUT.jsonl [TEXT]
(TEXT: only the setups whose JSON contains it)
The setups are the list below; each is a tracer setup (python/vramfit/trace/spec.py)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import gpu_common  # noqa: E402

SETUPS = [
    dict(model="llama-3.2-1b", weights="bf16", batch=1, seq=512),
    dict(model="llama-3.2-1b", weights="bf16", batch=4, seq=2048, grad_ckpt="full"),
    dict(model="qwen2.5-0.5b", weights="bf16", method="lora", lora_r=16, batch=2, seq=1024),
    dict(model="qwen2.5-0.5b", weights="bf16", method="dora", batch=1, seq=512),
    dict(model="qwen2.5-0.5b", weights="fp32", amp="bf16", method="lora", batch=2, seq=512),
    dict(model="llama-3.2-1b", weights="fp32", amp="bf16", batch=8, seq=512),
    dict(model="gemma-2-2b", weights="bf16", method="lora", lora_r=16, batch=2, seq=1024),
    dict(model="gpt2", weights="bf16", method="lora", lora_r=16, batch=2, seq=1024),
    dict(model="gpt2", weights="fp32", amp="fp16", batch=2, seq=1024, grad_ckpt="full"),
    dict(model="bert-base-uncased", task="seq-classification", weights="fp32", batch=8, seq=512),
    dict(model="roberta-large", task="masked-lm", weights="fp32", amp="fp16", batch=32, seq=128),
    dict(model="phi-2", weights="bf16", method="lora", lora_r=16, batch=2, seq=1024),
    dict(model="mistral-7b", weights="bf16", method="lora", lora_r=16, batch=2, seq=1024),
    dict(model="llama-3.2-1b", weights="bf16", batch=8, seq=512, lengths="varied"),
    dict(model="qwen2.5-0.5b", weights="bf16", optimizer="adafactor", batch=4, seq=1024),
    dict(model="pythia-1b", weights="bf16", batch=1, seq=512),
    dict(model="bert-base-uncased", task="seq-classification", weights="fp32", batch=32, seq=64,
         lengths="varied"),
    dict(model="qwen2.5-0.5b", weights="bf16", method="lora", batch=32, seq=256, lengths="varied",
         accumulation=2),
]


def one(setup: dict) -> dict:
    """Runs in a fresh process: the Trainer for two steps, then the allocator's peaks."""
    import torch
    import transformers as tf

    from vramfit.trace.drivers import hf
    from vramfit.trace.spec import Spec

    spec = Spec(**setup)
    model = gpu_common.model_on_gpu(spec)
    with tempfile.TemporaryDirectory() as out:
        trainer = tf.Trainer(model=model, args=hf._training_args(spec, out),
                             train_dataset=hf.Batches(spec), data_collator=hf._collate(spec))
        trainer.train()
    return {"allocated_bytes": torch.cuda.max_memory_allocated(),
            "reserved_bytes": torch.cuda.max_memory_reserved(),
            "torch": torch.__version__, "transformers": tf.__version__,
            "gpu": torch.cuda.get_device_name()}


if __name__ == "__main__":
    gpu_common.main(__file__, "hf", SETUPS, one)
