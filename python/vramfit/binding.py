"""vramfit from Python: the commands' ``--json`` answers as dicts, through ctypes over
``libvramfit.so`` (the library the ``vramfit`` executable is built from, with its commands),
so that a training script can pick its own batch at start-up::

    import vramfit
    plan = vramfit.plan_workload("workload.yaml", gpu="auto")
    batch = plan["stages"][0]["batch"]

Options are the command-line flags with ``_`` for ``-`` (``lora_r=16`` is ``--lora-r 16``;
``True`` passes a flag alone). The library is found through ``$VRAMFIT_LIBRARY``, else in the
source tree's ``build/`` folder, else on the system's library path.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import threading
from typing import Any

EXIT_NO = 1  # the answer is "no" (does not fit, nothing fits): the dict still says why

_lock = threading.Lock()  # the commands keep state (getopt) between calls
_lib: ctypes.CDLL | None = None


class VramfitError(Exception):
    """A command refused its input or failed; ``code`` is its exit status (2 bad input,
    3 environment, 4 internal) and the message its one-line error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _library_path() -> str:
    given = os.environ.get("VRAMFIT_LIBRARY")
    if given:
        return given
    beside = os.path.join(os.path.dirname(__file__), "..", "..", "build", "libvramfit.so")
    if os.path.exists(beside):
        return os.path.abspath(beside)
    found = ctypes.util.find_library("vramfit")
    if not found:
        raise VramfitError(3, "libvramfit.so not found: build vramfit (make build) or set VRAMFIT_LIBRARY")
    return found


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(_library_path())
        lib.vf_cli_json.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                    ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        lib.vf_cli_json.restype = ctypes.c_int
        lib.vf_free.argtypes = [ctypes.c_void_p]
        lib.vf_free.restype = None
        _lib = lib
    return _lib


def _take(lib: ctypes.CDLL, p: ctypes.c_void_p) -> str | None:
    if not p.value:
        return None
    try:
        return ctypes.string_at(p.value).decode()
    finally:
        lib.vf_free(p)


def flags(options: dict[str, Any]) -> list[str]:
    """``{"lora_r": 16, "json": True}`` as ``["--lora-r", "16", "--json"]``; None and False
    leave a flag out."""
    out: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        out.append("--" + key.replace("_", "-"))
        if value is not True:
            out.append(str(value))
    return out


def run(args: list[str]) -> dict[str, Any]:
    """``vramfit ARGS --json`` in-process: its JSON as a dict. Exit 1 ("no") still returns
    the dict; any other failure raises VramfitError."""
    lib = _load()
    argv = (ctypes.c_char_p * (len(args) + 1))(*[a.encode() for a in args + ["--json"]])
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    with _lock:
        code = lib.vf_cli_json(len(args) + 1, argv, ctypes.byref(out), ctypes.byref(err))
    text, message = _take(lib, out), _take(lib, err)
    if text is not None and code in (0, EXIT_NO):
        result: dict[str, Any] = json.loads(text)
        return result
    raise VramfitError(code, message or f"vramfit {args[0]}: exit status {code}")


def estimate(model: str, **options: Any) -> dict[str, Any]:
    """``vramfit estimate MODEL [options] --json``: the peak and its breakdown."""
    return run(["estimate", model] + flags(options))


def plan(model: str, gpu: str, **options: Any) -> dict[str, Any]:
    """``vramfit plan MODEL --gpu GPU [options] --json``: the recommended setting and tiers."""
    return run(["plan", model, "--gpu", gpu] + flags(options))


def plan_workload(workload: str, gpu: str = "auto", safety: float | None = None,
                  target_effective_batch: int | None = None) -> dict[str, Any]:
    """``vramfit plan --workload FILE --gpu GPU --json``: every stage's batch, accumulation
    and knobs."""
    return run(["plan", "--workload", workload, "--gpu", gpu] +
               flags({"safety": safety, "target_effective_batch": target_effective_batch}))
