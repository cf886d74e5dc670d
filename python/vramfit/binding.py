"""vramfit from Python: the commands' ``--json`` answers as dicts, through ctypes over
``libvramfit.so`` (the library the ``vramfit`` executable is built from, with its commands),
so that a training script can pick its own setting at start-up::

    import vramfit
    est = vramfit.estimate(model, batch=8, seq=1024)    # the model in hand (live.py)
    est = vramfit.estimate("llama-3.1-8b", weights="bf16", method="lora")
    plan = vramfit.plan_workload("workload.yaml", gpu="auto")

Options are the command-line flags with ``_`` for ``-`` (``lora_r=16`` is ``--lora-r 16``;
``True`` passes a flag alone). The library is the one ``$VRAMFIT_LIBRARY`` names, else the one
installed inside this package (a wheel bundles it), else the source tree's ``build/``, else
the system's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.resources
import json
import os
import threading
from collections.abc import Mapping
from typing import Any, Union, cast

from .results import Estimate, Plan, WorkloadPlan

EXIT_NO = 1  # the answer is "no" (does not fit, nothing fits): the dict still says why
EXIT_BAD_INPUT, EXIT_ENV = 2, 3

# A model: a catalogue name, Hub id, alias or path, as the command line takes it, or a live
# torch.nn.Module (a Hugging Face model, PEFT-wrapped or not, real or on the meta device).
Model = Union[str, "os.PathLike[str]", Any]

_lock = threading.Lock()  # the commands keep state (getopt) between calls
_lib: ctypes.CDLL | None = None


class VramfitError(ValueError):
    """A command refused its input or failed; ``code`` is its exit status (2 bad input,
    3 environment, 4 internal) and the message its one-line error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def library_path() -> str:
    """The libvramfit.so to load: ``$VRAMFIT_LIBRARY``; the one inside the installed package;
    the source tree's ``build/``; the system's (``cmake --install``)."""
    given = os.environ.get("VRAMFIT_LIBRARY")
    if given:
        return given
    bundled = importlib.resources.files("vramfit") / "lib" / "libvramfit.so"
    if bundled.is_file():
        return str(bundled)
    beside = os.path.join(os.path.dirname(__file__), "..", "..", "build", "libvramfit.so")
    if os.path.exists(beside):
        return os.path.abspath(beside)
    found = ctypes.util.find_library("vramfit")
    if not found:
        raise VramfitError(EXIT_ENV, "libvramfit.so not found: build vramfit (make build), install a "
                                     "wheel (make wheel), or set VRAMFIT_LIBRARY")
    return found


def _declare(lib: ctypes.CDLL) -> None:
    """The C signatures of what the package calls (include/vramfit/command.h, probe.h,
    monitor.h)."""
    u64, p = ctypes.c_uint64, ctypes.POINTER
    signatures: dict[str, tuple[list[Any], Any]] = {
        "vf_cli_json": ([ctypes.c_int, p(ctypes.c_char_p), p(ctypes.c_void_p), p(ctypes.c_void_p)],
                        ctypes.c_int),
        "vf_free": ([ctypes.c_void_p], None),
        "vf_history_record": ([ctypes.c_char_p, p(ctypes.c_void_p)], ctypes.c_int),
        "vf_probe_size": ([], ctypes.c_size_t),
        "vf_probe_init": ([ctypes.c_void_p, u64, u64, u64], ctypes.c_int),
        "vf_probe_steer": ([ctypes.c_void_p, u64, ctypes.c_void_p], None),
        "vf_probe_next": ([ctypes.c_void_p, p(ctypes.c_int)], u64),
        "vf_probe_record": ([ctypes.c_void_p, u64, ctypes.c_int, u64], ctypes.c_int),
        "vf_probe_predict": ([ctypes.c_void_p, u64], u64),
        "vf_probe_settled": ([ctypes.c_void_p, p(u64), p(u64), p(u64)], ctypes.c_bool),
        "vf_probe_move_name": ([ctypes.c_int], ctypes.c_char_p),
        "vf_probe_outcome_name": ([ctypes.c_int], ctypes.c_char_p),
        "vf_trend_config_default": ([ctypes.c_void_p], None),
        "vf_trend_analyze": ([p(ctypes.c_double), p(ctypes.c_double), ctypes.c_size_t, ctypes.c_double,
                              ctypes.c_void_p, ctypes.c_void_p], None),
    }
    for name, (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result


def library() -> ctypes.CDLL:
    """libvramfit.so, loaded once, its functions declared."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(library_path())
        _declare(lib)
        _lib = lib
    return _lib


def _take(lib: ctypes.CDLL, p: ctypes.c_void_p) -> str | None:
    if not p.value:
        return None
    try:
        return ctypes.string_at(p.value).decode()
    finally:
        lib.vf_free(p)


def flags(options: Mapping[str, Any]) -> list[str]:
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


def run(args: list[str]) -> Any:
    """``vramfit ARGS --json`` in-process: its JSON (an object as a dict, a list as a list).
    Exit 1 ("no") still returns it; any other failure raises VramfitError."""
    lib = library()
    argv = (ctypes.c_char_p * (len(args) + 1))(*[a.encode() for a in [*args, "--json"]])
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    with _lock:
        code = lib.vf_cli_json(len(args) + 1, argv, ctypes.byref(out), ctypes.byref(err))
    text, message = _take(lib, out), _take(lib, err)
    if text is not None and code in (0, EXIT_NO):
        return json.loads(text)
    raise VramfitError(code, message or f"vramfit {args[0]}: exit status {code}")


def record_run(run: Mapping[str, Any]) -> None:
    """Adds a measured run to the history store (``vramfit history``): ``source``,
    ``command``, ``outcome`` and what else include/vramfit/command.h's vf_history_record
    takes."""
    lib = library()
    err = ctypes.c_void_p()
    code = lib.vf_history_record(json.dumps(dict(run)).encode(), ctypes.byref(err))
    message = _take(lib, err)
    if code:
        raise VramfitError(code, message or f"vramfit history: exit status {code}")


def _answer(command: str, model: Model, before: list[str], options: dict[str, Any]) -> Any:
    if isinstance(model, (str, os.PathLike)):
        return run([command, os.fspath(model), *before, *flags(options)])
    from .live import model_folder, name_results

    with model_folder(model) as folder:
        result = run([command, folder.path, *before, *flags({**folder.options, **options})])
    return name_results(result, folder.path, folder.name)


def estimate(model: Model, **options: Any) -> Estimate:
    """``vramfit estimate MODEL [options] --json``: the peak and its breakdown. MODEL is a
    name or path, or a live module whose structure is read from it (live.py)."""
    return cast(Estimate, _answer("estimate", model, [], options))


def plan(model: Model, gpu: str, **options: Any) -> Plan:
    """``vramfit plan MODEL --gpu GPU [options] --json``: the recommended setting and tiers."""
    return cast(Plan, _answer("plan", model, ["--gpu", gpu], options))


def plan_workload(workload: str, gpu: str = "auto", safety: float | None = None,
                  target_effective_batch: int | None = None) -> WorkloadPlan:
    """``vramfit plan --workload FILE --gpu GPU --json``: every stage's batch, accumulation
    and knobs."""
    return cast(WorkloadPlan, run(["plan", "--workload", workload, "--gpu", gpu,
                                   *flags({"safety": safety, "target_effective_batch": target_effective_batch})]))
