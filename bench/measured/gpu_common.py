"""What the real-GPU scripts share: the setup's model made on the GPU as the hf driver makes
it on the fake device (config, dtype, attention, PEFT adapters), and the loop that runs
each setup in a fresh process and writes one JSON line per setup."""
import json
import subprocess
import sys
from typing import Any, Callable


def model_on_gpu(spec: Any) -> Any:
    import torch

    from vramfit.trace.drivers import hf

    config = hf.model_config(spec)
    with torch.device("cuda"):
        model = hf._model_class(spec).from_config(config, dtype=hf.weights_dtype(spec), **hf._attention(spec))
    return hf.adapted(spec, model, config.model_type)


def main(script: str, framework: str, setups: list[dict], one: Callable[[dict], dict]) -> None:
    """`script --one SETUP_JSON` runs one setup (in the fresh process); `script OUT.jsonl
    [TEXT]` runs every setup whose JSON contains TEXT."""
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print("RESULT " + json.dumps(one(json.loads(sys.argv[2]))), flush=True)
        return
    out = open(sys.argv[1], "w")
    for setup in setups:
        if len(sys.argv) > 2 and sys.argv[2] not in json.dumps(setup):
            continue
        full = dict(setup, config=f"data/models/{setup['model']}.json", framework=framework)
        p = subprocess.run([sys.executable, script, "--one", json.dumps(full)],
                           capture_output=True, text=True, timeout=300)
        line = next((l[7:] for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
        row = dict(setup=setup, **(json.loads(line) if line else
                                   {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}))
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")
        out.flush()
