"""Real-GPU runs of traced hf setups: the same Trainer arguments, data and PEFT adapters as
the tracer's hf driver (python/vramfit/trace/drivers/hf.py), on a real CUDA device, each
setup in a fresh process; prints one JSON line per setup with max_memory_allocated and
max_memory_reserved over the whole run (load included), as the tracer measures it.

usage (on a machine with a GPU, from the repository root):
    PYTHONPATH=python python3 bench/measured/hf_gpu.py OUT.jsonl [TEXT]
(TEXT: only the setups whose JSON contains it)
The setups are the list below; each is a tracer setup (python/vramfit/trace/spec.py)."""
import json
import os
import subprocess
import sys
import tempfile

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
    with tempfile.TemporaryDirectory() as out:
        trainer = tf.Trainer(model=model, args=hf._training_args(spec, out),
                             train_dataset=hf.Batches(spec), data_collator=hf._collate(spec))
        trainer.train()
    return {"allocated_bytes": torch.cuda.max_memory_allocated(),
            "reserved_bytes": torch.cuda.max_memory_reserved(),
            "torch": torch.__version__, "transformers": tf.__version__,
            "gpu": torch.cuda.get_device_name()}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print("RESULT " + json.dumps(one(json.loads(sys.argv[2]))), flush=True)
        return
    out = open(sys.argv[1], "w")
    for setup in SETUPS:
        if len(sys.argv) > 2 and sys.argv[2] not in json.dumps(setup):
            continue
        full = dict(setup, config=f"data/models/{setup['model']}.json", framework="hf")
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
