"""Run by `scripts/python-package.sh install` in a fresh virtual environment where
`pip install ./python` put vramfit: the package imports from there (not from the sources),
its version is CMakeLists.txt's, it loads the libvramfit.so inside it, and an estimate of a
model on the meta device equals the command's estimate of its config.json (parameters exactly,
the peaks within 1%). With --base, run where nothing but vramfit was installed (pip install
./python, or the wheel): no other distribution came with it, importing it imports no torch,
and a catalogue model's estimate is the command's. Prints 'N passed, N failed'."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

import vramfit
from vramfit.binding import library_path

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
passed = failed = 0


def check(ok: bool, what: str) -> None:
    global passed, failed
    passed, failed = passed + ok, failed + (not ok)
    if not ok:
        print(f"install_check: FAILED: {what}", file=sys.stderr)


package = os.path.dirname(vramfit.__file__)
check("site-packages" in package, f"vramfit imported from {package}")
with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
    version = re.search(r"project\(vramfit VERSION ([0-9.]+)", f.read())
check(version is not None and vramfit.__version__ == version.group(1), f"version {vramfit.__version__}")
check(library_path() == os.path.join(package, "lib", "libvramfit.so"), f"library {library_path()}")
check(os.path.exists(os.path.join(package, "py.typed")), "py.typed")


def command(*args: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([os.environ["VRAMFIT_BINARY"], *args, "--json"], capture_output=True, text=True,
                             env=dict(os.environ, XDG_STATE_HOME=tmp))
    return json.loads(out.stdout)


def finish() -> None:
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if sys.argv[1:] == ["--base"]:
    from importlib.metadata import distributions

    others = sorted({d.metadata["Name"] for d in distributions()} - {"vramfit", "pip", "setuptools"})
    check(not others, f"installed with vramfit: {others}")
    check("torch" not in sys.modules, "import vramfit imported torch")
    live = vramfit.estimate("llama-3.2-1b", batch=2, seq=512, method="lora")
    check(live == command("estimate", "llama-3.2-1b", "--batch", "2", "--seq", "512", "--method", "lora"),
          "vramfit.estimate('llama-3.2-1b') against the command")
    print(f"install_check: llama-3.2-1b: peak device_bytes {live['peak']['device_bytes']}")
    finish()

import torch  # noqa: E402  (the base install has neither)
import transformers  # noqa: E402

config = transformers.LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                                  num_attention_heads=8, num_key_value_heads=2, vocab_size=32000)
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
live = vramfit.estimate(model, batch=4, seq=512, gpu="24GiB")
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "config.json")
    with open(path, "w") as f:
        f.write(model.config.to_json_string())
    cli = command("estimate", path, "--batch", "4", "--seq", "512", "--gpu", "24GiB", "--weights", "bf16",
                  "--task", "causal-lm", "--attention", "sdpa", "--method", "full")
check(live["model"]["params"] == cli["model"]["params"] == sum(p.numel() for p in model.parameters()),
      "parameters")
for key in ("allocated_bytes", "reserved_bytes", "device_bytes"):
    got, want = live["peak"][key], cli["peak"][key]
    check(abs(got - want) <= 0.01 * want, f"peak {key}: {got} against {want}")
    print(f"install_check: peak {key}: vramfit.estimate {got}, vramfit estimate config.json {want}")
try:
    vramfit.estimate(model, batch=0)
    check(False, "batch 0 accepted")
except ValueError as e:
    check("--batch" in str(e), f"the CLI's message: {e}")
finish()
