"""Real-GPU runs of traced Lightning setups: the lightning driver's own LightningModule,
optimizer, data and Trainer arguments (python/vramfit/trace/drivers/lightning.py), with
real tensors on a real CUDA device, each setup in a fresh process; prints one JSON line per
setup with max_memory_allocated and max_memory_reserved over the whole run (load included),
as the tracer measures it.

usage (on a machine with a GPU, from the repository root):
    PYTHONPATH=python python3 bench/measured/lightning_gpu.py OUT.jsonl [TEXT]
(TEXT: only the setups whose JSON contains it). Each setup is a row of the traced corpus
(bench/traced/lightning.tsv)."""
import json
import subprocess
import sys

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

    from vramfit.trace.drivers import hf, lightning as driver
    from vramfit.trace.spec import Spec

    spec = Spec(**setup)
    lightning.seed_everything(0, verbose=False)
    config = tf.AutoConfig.from_pretrained(spec.config)
    if spec.task == "seq-classification":
        config.num_labels = 2
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = getattr(config, "eos_token_id", None) or 0
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[spec.weights]
    with torch.device("cuda"):
        model = hf._model_class(spec).from_config(config, dtype=dtype, **hf._attention(spec))
    if spec.lora:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=spec.lora_r, lora_alpha=2 * spec.lora_r, lora_dropout=hf.LORA_DROPOUT,
            use_dora=spec.method == "dora", target_modules=hf._lora_targets(spec, config.model_type),
            task_type={"causal-lm": "CAUSAL_LM", "seq-classification": "SEQ_CLS", "masked-lm": None}[spec.task]))
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


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print("RESULT " + json.dumps(one(json.loads(sys.argv[2]))), flush=True)
        return
    out = open(sys.argv[1], "w")
    for setup in SETUPS:
        if len(sys.argv) > 2 and sys.argv[2] not in json.dumps(setup):
            continue
        full = dict(setup, config=f"data/models/{setup['model']}.json", framework="lightning")
        p = subprocess.run([sys.executable, __file__, "--one", json.dumps(full)],
                           capture_output=True, text=True, timeout=300)
        line = next((l[7:] for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
        row = dict(setup=setup, **(json.loads(line) if line else
                                   {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}))
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
