"""Every allocation and free of CUDA tensor storage, as the caching allocator sees them.

``Tracker`` is a TorchDispatchMode pushed above the fake-CUDA mode. Each op's outputs are
looked at once: a storage not seen before is an allocation of ``storage.nbytes()`` bytes,
and a weak reference on the storage's Python object reports its free (PyTorch keeps that
object alive exactly as long as the C++ storage, torch/csrc/Storage.cpp). Views share a
storage and so count once, as they do on the GPU. A storage resized in place
(``UntypedStorage.resize_``, below the dispatcher) frees its old block and allocates the new
one, as the caching allocator's resize does. Sizes are recorded unrounded; the C side
replays the events through its caching-allocator model, which rounds and splits blocks as
PyTorch does.

The mode also answers what fake tensors cannot: data-dependent scalars (``.item()``, ``if
tensor:``) get a value from what is known of the tensor (a fill value, a NaN check: never
NaN) or a documented default, and in-place random fills and host pinning leave the tensor
as it is.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

aten = torch.ops.aten

ROUND = 512  # the allocator's smallest block; for the running figures only
HINTED_NUMEL = 16  # tensors larger than this never get a value hint


def leaves(t: torch.Tensor) -> list[torch.Tensor]:
    """The tensors that hold memory: a wrapper subclass (torchao's NF4Tensor) has none of
    its own, only its inner tensors; its ops run them inside its ``__torch_dispatch__``,
    below this mode, so the tracker meets them through the wrapper."""
    if not is_traceable_wrapper_subclass(t):
        return [t]
    # DTensor (torch 2.13) names its DeviceMesh among the flattened attributes too.
    inner = (getattr(t, name) for name in t.__tensor_flatten__()[0])
    return [leaf for x in inner if isinstance(x, torch.Tensor) for leaf in leaves(x)]


def _ops(*names: str) -> set[Any]:
    found = set()
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(aten, packet, None)
        if op is not None and hasattr(op, overload or "default"):
            found.add(getattr(op, overload or "default"))
    return found


# Random fills need a CUDA generator, which a CPU-only build lacks; their values never
# change memory, so the tensor is returned untouched.
RANDOM_FILLS = _ops("uniform_", "normal_", "bernoulli_.float", "bernoulli_.Tensor",
                    "exponential_", "random_", "random_.from", "random_.to",
                    "log_normal_", "cauchy_", "geometric_")
# Pinning copies a host tensor into page-locked host memory, which the CUDA host allocator
# keeps apart from the device's (never in max_memory_allocated); a CPU-only build has no
# host allocator to pin with, so the tensor is returned as it is (a DataLoader with
# pin_memory=True, as Lightning's LightningDataModule.from_datasets makes, pins each batch).
HOST_PINNING = _ops("_pin_memory")
NEVER_TRUE = _ops("isnan", "isinf", "isposinf", "isneginf")
ALWAYS_TRUE = _ops("isfinite")
SAME_VALUE = _ops("any", "any.dim", "any.dims", "all", "all.dim", "all.dims", "max", "min",
                  "amax", "amin", "clone", "_to_copy", "abs", "detach", "alias", "view",
                  "squeeze", "squeeze.dim", "unsqueeze", "reshape", "expand", "lift_fresh",
                  "lift_fresh_copy", "_local_scalar_dense", "mean", "mean.dim")
SCALARS = _ops("_local_scalar_dense", "is_nonzero", "equal")
# A copy to host memory that is not non_blocking waits for the stream's work
# (aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda: cudaStreamSynchronize).
HOST_COPIES = _ops("_to_copy", "copy_")


def _on_device(args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args[:2])


def _to_host(func: Any, args: tuple, kwargs: dict) -> bool:
    if kwargs.get("non_blocking") or (len(args) > 2 and args[2] is True):
        return False
    if func is aten.copy_.default:
        return args[0].device.type == "cpu"
    device = kwargs.get("device")
    return device is not None and torch.device(device).type == "cpu"


@dataclass
class Hints:
    """Values assumed where data would decide. ``full_masks``: attention masks hold no
    padding, so ``mask.all()`` is true (fixed-length batches)."""
    full_masks: bool = True
    known: WeakTensorKeyDictionary = field(default_factory=WeakTensorKeyDictionary)


class Tracker(TorchDispatchMode):
    """Records ``("a", id, bytes[, stream])``, ``("f", id)``, ``("p", phase)`` and ``("e",)``
    (empty_cache) events for storages on the CUDA device, and what the fake streams do
    (fakecuda.py ``StreamLog``): ``("r", id, stream)`` for record_stream, ``("m", event,
    stream)`` for a CUDA event recorded, ``("w", event)`` when the host waits for one,
    ``("s", stream)`` or ``("s",)`` when it synchronizes a stream or the device.

    Where one stream waited on another's event (``wait_stream``, ``Event.wait``), the host
    waiting for the first stream's later work knows the other's up to that event is done
    too: each wait is followed by the waits it implies."""

    def __init__(self, hints: Hints | None = None,
                 after_op: Callable[[Any, tuple, dict, Any, "Tracker"], None] | None = None,
                 kernels: dict[Any, Callable[..., Any]] | None = None) -> None:
        """after_op: called after every op (kernel buffers); kernels: ops to answer with
        another function of (func, args, kwargs), whose own intermediate tensors are not
        seen (a CUDA kernel that makes only its output where the meta kernel differs)."""
        super().__init__()
        self.events: list[tuple] = []
        self.hints = hints or Hints()
        self.after_op = after_op
        self.kernels = kernels or {}
        # id(storage) -> [storage id, bytes] of the block it holds now (a resize changes both)
        self._blocks: dict[int, list[int]] = {}
        self._next = 1
        self._lock = threading.Lock()
        self.current = 0
        self.peak = 0
        self.peak_phase = ""
        self._phase = ""
        self.current_stream = 0  # fakecuda.StreamLog
        self._streams = 0
        self._clock = 0
        # CUDA events: number -> (stream, time); per stream, the events it waited on, with
        # the time it did, and the time up to which the host knows its work is done
        self._events: dict[int, tuple[int, int]] = {}
        self._waited: dict[int, list[tuple[int, int]]] = {}
        self._done: dict[int, int] = {}

    # ---- what the driver says ----------------------------------------------------------
    def phase(self, name: str) -> None:
        with self._lock:
            self._phase = name
            self.events.append(("p", name))

    def empty_cache(self) -> None:
        with self._lock:
            self.events.append(("e",))

    def label(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        """Names the category of tensors that are alive now (weights, gradients,
        optimizer); everything else is an activation or temporary."""
        with self._lock:
            for leaf in (leaf for t in tensors for leaf in leaves(t)):
                block = self._blocks.get(id(leaf.untyped_storage()))
                if block is not None:
                    self.events.append(("c", block[0], category))

    def storage_id(self, t: torch.Tensor) -> int | None:
        block = self._blocks.get(id(t.untyped_storage()))
        return block[0] if block is not None else None

    def allocate(self, nbytes: int) -> int:
        """An allocation a CUDA kernel makes beside its outputs (a workspace); returns its
        id for ``release``."""
        with self._lock:
            return self._record_alloc(nbytes)

    def release(self, sid: int) -> None:
        with self._lock:
            self._record_free(sid, 0)

    def memory(self) -> dict[str, int]:
        return {"allocated": self.current, "peak_allocated": self.peak,
                "reserved": self.current, "peak_reserved": self.peak}

    # ---- streams (fakecuda.StreamLog) ------------------------------------------------------
    def new_stream(self) -> int:
        self._streams += 1
        return self._streams

    def record_event(self, stream: int) -> int:
        with self._lock:
            self._clock += 1
            number = len(self._events) + 1
            self._events[number] = (stream, self._clock)
            self.events.append(("m", number, stream))
            return number

    def stream_waits(self, stream: int, event: int) -> None:
        with self._lock:
            self._clock += 1
            self._waited.setdefault(stream, []).append((self._clock, event))

    def wait_event(self, event: int) -> None:
        with self._lock:
            self.events.append(("w", event))
            self._implied(*self._events[event])

    def synchronize(self, stream: int | None) -> None:
        with self._lock:
            self._clock += 1
            if stream is None:
                self.events.append(("s",))
                for s in list(self._waited):
                    self._done[s] = self._clock
                return
            self.events.append(("s", stream))
            self._implied(stream, self._clock)

    def _implied(self, stream: int, upto: int) -> None:
        """The host knows `stream`'s work up to time `upto` is done: so is the work of the
        events it had waited on by then."""
        if self._done.get(stream, 0) >= upto:
            return
        self._done[stream] = upto
        for when, event in self._waited.get(stream, []):
            if when <= upto:
                other, at = self._events[event]
                if self._done.get(other, 0) < at:
                    self.events.append(("w", event))
                    self._implied(other, at)

    def record_stream(self, tensor: torch.Tensor, stream: int) -> None:
        with self._lock:
            for leaf in leaves(tensor):
                block = self._blocks.get(id(leaf.untyped_storage()))
                if block is not None:
                    self.events.append(("r", block[0], stream))

    # ---- bookkeeping ----------------------------------------------------------------------
    def _record_alloc(self, nbytes: int) -> int:
        sid = self._next
        self._next += 1
        self.events.append(("a", sid, nbytes) if self.current_stream == 0
                           else ("a", sid, nbytes, self.current_stream))
        self.current += -(-nbytes // ROUND) * ROUND if nbytes else 0
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self._phase
        return sid

    def _record_free(self, sid: int, nbytes: int) -> None:
        self.events.append(("f", sid))
        self.current -= -(-nbytes // ROUND) * ROUND if nbytes else 0

    def _freed(self, key: int, block: list[int]) -> None:
        with self._lock:
            if self._blocks.get(key) is block:
                del self._blocks[key]
            self._record_free(*block)

    def _see(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            return
        if is_traceable_wrapper_subclass(t):
            for leaf in leaves(t):
                self._see(leaf)
            return
        storage = t.untyped_storage()
        key = id(storage)
        with self._lock:
            if key in self._blocks:
                return
            nbytes = storage.nbytes()
            block = [self._record_alloc(nbytes), nbytes]
            self._blocks[key] = block
        weakref.finalize(storage, self._freed, key, block)

    def resized(self, storage: Any, nbytes: int) -> None:
        """``storage`` now holds ``nbytes``: the caching allocator frees the old block and
        allocates a new one (FSDP2 gives each gathered parameter's storage its bytes before
        the all-gather and takes them back after, torch/distributed/fsdp/_fully_shard/
        _fsdp_param.py ``alloc_storage``/``free_storage``)."""
        with self._lock:
            block = self._blocks.get(id(storage))
            if block is None or block[1] == nbytes:
                return
            self._record_free(*block)
            block[:] = [self._record_alloc(nbytes), nbytes]

    def __enter__(self) -> "Tracker":
        original = torch.UntypedStorage.resize_
        tracker = self

        def resize_(storage: Any, nbytes: int) -> Any:
            out = original(storage, nbytes)
            tracker.resized(storage, storage.nbytes())
            return out

        self._resize = original
        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        torch.UntypedStorage.resize_ = self._resize
        return super().__exit__(*exc)

    # ---- data-dependent values --------------------------------------------------------------
    def _hint(self, func: Any, args: tuple, out: Any) -> None:
        # A weak reference on a parameter would stop Module._apply from swapping it; the
        # values that decide control flow are flags and scalars, never weights.
        if not isinstance(out, torch.Tensor):
            return
        known = self.hints.known
        if func in NEVER_TRUE:  # a finite run: no NaN or inf anywhere
            known[out] = False
        elif func in ALWAYS_TRUE:
            known[out] = True
        elif out.requires_grad or out.numel() > HINTED_NUMEL:
            return
        elif func in (aten.zeros.default, aten.zero_.default, aten.zeros_like.default):
            known[out] = 0
        elif func in (aten.ones.default, aten.ones_like.default):
            known[out] = 1
        elif func in (aten.full.default, aten.fill_.Scalar, aten.full_like.default):
            known[out] = args[1]
        elif func in SAME_VALUE and args and isinstance(args[0], torch.Tensor):
            if args[0] in known:
                known[out] = known[args[0]]

    def _scalar(self, func: Any, args: tuple) -> Any:
        t = args[0]
        if t in self.hints.known:
            value = self.hints.known[t]
        elif t.dtype == torch.bool:
            value = self.hints.full_masks
        else:
            value = 1
        if func is aten.equal.default or func is aten.is_nonzero.default or t.dtype == torch.bool:
            return bool(value)
        return float(value) if t.dtype.is_floating_point else int(value)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in RANDOM_FILLS or func in HOST_PINNING:
            return args[0]
        if func in SCALARS and _on_device(args):
            # Reading a value copies it to the host and waits for the stream
            # (aten/src/ATen/native/cuda/Copy.cu memcpy_and_sync).
            self.synchronize(self.current_stream)
        elif func in HOST_COPIES and _on_device(args) and _to_host(func, args, kwargs):
            self.synchronize(self.current_stream)
        if func in SCALARS:
            try:
                return func(*args, **kwargs)
            except Exception:  # data-dependent: FakeTensorMode cannot know
                return self._scalar(func, args)
        kernel = self.kernels.get(func)
        out = kernel(func, args, kwargs) if kernel else func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            self._see(t)
        self._hint(func, args, out)
        if self.after_op is not None:
            self.after_op(func, args, kwargs, out, self)
        return out
