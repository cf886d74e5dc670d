"""The command's answer to compare the package with: `vramfit ARGS --json` of the build
(build/vramfit, or $VRAMFIT), parsed."""
from __future__ import annotations

import json
import os
import subprocess
from typing import Any

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def cli(*args: str) -> dict[str, Any]:
    binary = os.environ.get("VRAMFIT", os.path.join(ROOT, "build", "vramfit"))
    run = subprocess.run([binary, *args, "--json"], capture_output=True, text=True)
    assert run.returncode in (0, 1), run.stderr
    result: dict[str, Any] = json.loads(run.stdout)
    return result
