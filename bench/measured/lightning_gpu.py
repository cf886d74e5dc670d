"""Real-GPU runs of traced Lightning setups: the lightning driver's own LightningModule,
optimizer, data and Trainer arguments (python/vramfit/trace/drivers/lightning.py), with
real tensors on a real CUDA device, each setup in a fresh process; prints one JSON line per
setup with max_memory_allocated and max_memory_reserved over the whole run (load included),
as the tracer measures it.

usage (on a machine with a GPU, from the repository root):
    PYTHONPATH=python python3 bench/measured/lightning_gpu.py OUT.jsonl [TEXT]
(TEXT: only the setups whose JSON contains it). Each setup is a row of the traced corpus
(bench/traced/lightning.tsv)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import gpu_common  # noqa: E402

SETUPS = [
    dict(model="llama-3.2-1b", weights="bf16", batch=2, seq=512),
    dict(model="qwen2.5-0.5b", weights="fp32", amp="bf16", batch=4, seq=256),
    dict(model="llama-3.2-1b", weights="bf16", method="lora", lora_r=16, batch=2, seq=1024, grad_ckpt="full"),
    dict(model="qwen2.5-0.5b", weights="fp32", amp="bf16", method="lora", lora_targets=["all-linear"],
         batch=1, seq=2048),
    dict(model="gpt2", weights="fp32", amp="fp16", batch=8, seq=256),
    dict(model="qwen2.5-0.5b", weights="bf16", method="dora", batch=2, seq=512),
    dict(model="bert-base-uncased", task="seq-classification", weights="fp32", batch=16, seq=256),
]


def one(setup: dict) -> dict:
    """Runs in a fresh process: Lightning's Trainer for two steps, then the allocator's peaks."""
    import lightning
    import torch
    import transformers as tf

    from vramfit.trace.drivers import lightning as driver
    from vramfit.trace.spec import Spec

    spec = Spec(**setup)
    lightning.seed_everything(0, verbose=False)
    model = gpu_common.model_on_gpu(spec)
    if spec.grad_ckpt == "full":
        driver._checkpoint_layers(model)
    trainer = lightning.Trainer(
        accelerator="cuda", devices=1, precision=driver.precision(spec),
        accumulate_grad_batches=spec.accumulation, max_steps=spec.steps,
        enable_checkpointing=False, logger=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(driver.module_class()(model, driver.optimizer_factory(spec)),
                train_dataloaders=driver._loader(spec))
    return {"allocated_bytes": torch.cuda.max_memory_allocated(),
            "reserved_bytes": torch.cuda.max_memory_reserved(),
            "torch": torch.__version__, "transformers": tf.__version__,
            "lightning": lightning.__version__, "gpu": torch.cuda.get_device_name()}


if __name__ == "__main__":
    gpu_common.main(__file__, "lightning", SETUPS, one)
