"""A fake CUDA device on a CPU-only PyTorch build.

Tensors live on ``cuda:0`` under FakeTensorMode: they have shapes, dtypes and a device but
no data, so a 70B model's training step runs in seconds on a laptop-sized machine. Three
things make that possible:

* the C++ shim (shim/fakecuda.cpp, built by ``make trace-env``) tells autograd's engine that
  CUDA exists, so backward passes of fake CUDA tensors run;
* ``FakeCudaMode`` is FakeTensorMode told to avoid initialising the device, which makes
  ``torch.tensor(..., device="cuda")`` build on the CPU and move (PyTorch's own path for
  tracing CUDA programs on CPU-only machines);
* the Python ``torch.cuda`` API the frameworks call (is_available, capabilities, streams,
  memory statistics, RNG) answers as a real device would, the memory figures coming from
  the tracker.

``load_shim()`` must run before ``import torch``.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import types
from typing import Any, Callable, Iterator, Protocol

SHIM_ENV = "VRAMFIT_FAKECUDA_SHIM"


class ShimMissing(RuntimeError):
    """The fake-CUDA shim is not built (``make trace-env`` builds it)."""


def load_shim(path: str | None = None) -> None:
    """Loads the shim library globally; must precede the first ``import torch``."""
    path = path or os.environ.get(SHIM_ENV, "")
    if not path or not os.path.exists(path):
        raise ShimMissing(f"fake-CUDA shim not found at '{path}'")
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def fake_mode() -> Any:
    """A FakeTensorMode that creates CUDA tensors without a CUDA runtime."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    class FakeCudaMode(FakeTensorMode):
        # The property reads torch.cuda.is_available(), which we make say True for the
        # frameworks; the mode itself must keep treating the device as absent.
        avoid_device_init = True

    # Inputs the frameworks build outside the mode (datasets, constants) become fake on use.
    return FakeCudaMode(allow_non_fake_inputs=True)


class StreamLog(Protocol):
    """What the fake streams tell the allocation tracker (tracker.py ``Tracker``): the
    current stream (0 the default), streams made, CUDA events recorded and waited for, one
    stream's waits on another's events, synchronizations, and ``record_stream``."""

    current_stream: int

    def new_stream(self) -> int: ...
    def record_event(self, stream: int) -> int: ...
    def wait_event(self, event: int) -> None: ...
    def stream_waits(self, stream: int, event: int) -> None: ...
    def synchronize(self, stream: int | None) -> None: ...
    def record_stream(self, tensor: Any, stream: int) -> None: ...


class _Unlogged:
    """Streams when nothing listens: numbered, never waited on."""

    def __init__(self) -> None:
        self.current_stream = 0
        self._streams = 0
        self._events = 0

    def new_stream(self) -> int:
        self._streams += 1
        return self._streams

    def record_event(self, stream: int) -> int:
        self._events += 1
        return self._events

    def wait_event(self, event: int) -> None: ...
    def stream_waits(self, stream: int, event: int) -> None: ...
    def synchronize(self, stream: int | None) -> None: ...
    def record_stream(self, tensor: Any, stream: int) -> None: ...


_log: StreamLog = _Unlogged()


class _Stream:
    """A CUDA stream stand-in. The fake device runs every op at once; what a stream adds is
    where the caching allocator files the blocks made while it is current, and the points
    where the host learns that its work is done (its waits on events and streams), which
    decide when a block another stream used can be reused (``record_stream``)."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device = device
        self.priority = priority
        self.stream_id = _log.new_stream()
        self.cuda_stream = self.stream_id
        self.device_index = 0
        self.device_type = 1

    @classmethod
    def default(cls) -> "_Stream":
        s = cls.__new__(cls)
        s.device, s.priority, s.stream_id, s.cuda_stream = None, 0, 0, 0
        s.device_index, s.device_type = 0, 1
        return s

    def wait_stream(self, other: "_Stream") -> None:
        if other.stream_id != self.stream_id:
            _log.stream_waits(self.stream_id, _log.record_event(other.stream_id))

    def wait_event(self, event: "_Event") -> None:
        event.wait(self)

    def synchronize(self) -> None:
        _log.synchronize(self.stream_id)

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False

    def record_event(self, event: "_Event | None" = None) -> "_Event":
        event = event or _Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return self.stream_id

    def __enter__(self) -> "_Stream":
        _outer.append(_current())
        _set_current(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _set_current(_outer.pop())


_DEFAULT = _Stream.default()
_streams: dict[int, _Stream] = {0: _DEFAULT}  # every stream made current, by number
_outer: list[_Stream] = []  # the streams current outside the stream contexts entered


def _current() -> _Stream:
    return _streams.get(_log.current_stream, _DEFAULT)


def _set_current(stream: "_Stream | None") -> None:
    if stream is not None:
        _streams[stream.stream_id] = stream
        _log.current_stream = stream.stream_id


@contextlib.contextmanager
def _stream_context(stream: "_Stream | None" = None) -> Iterator[None]:
    """``torch.cuda.stream(s)``: s is current inside (None changes nothing)."""
    if stream is None:
        yield
        return
    with stream:
        yield


class _Event:
    """A CUDA event stand-in: recording it marks a point in a stream's work, and waiting
    for it (``synchronize``) tells the host the work up to there is done."""

    def __init__(self, *_: Any, **__: Any) -> None:
        self.number = 0

    def record(self, stream: "_Stream | None" = None) -> None:
        self.number = _log.record_event((stream or _current()).stream_id)

    def wait(self, stream: "_Stream | None" = None) -> None:
        if self.number:
            _log.stream_waits((stream or _current()).stream_id, self.number)

    def synchronize(self) -> None:
        if self.number:
            _log.wait_event(self.number)

    def query(self) -> bool:
        return True

    def elapsed_time(self, _other: Any) -> float:
        return 0.0


class DeviceFacts:
    """What the impersonated GPU reports."""

    def __init__(self, name: str, capability: tuple[int, int], total_bytes: int) -> None:
        self.name = name
        self.capability = capability
        self.total_bytes = total_bytes


def install(facts: DeviceFacts, memory: Callable[[], dict[str, int]],
            on_empty_cache: Callable[[], None], streams: StreamLog | None = None) -> None:
    """Makes ``torch.cuda`` describe one GPU with ``facts``; ``memory()`` gives the
    tracker's current and peak bytes, ``on_empty_cache`` records empty_cache() calls,
    ``streams`` hears what the streams do."""
    import torch

    global _log
    _log = streams or _Unlogged()
    _log.current_stream = 0
    _streams.clear()
    _streams[0] = _DEFAULT

    cuda = torch.cuda
    props = types.SimpleNamespace(
        name=facts.name, major=facts.capability[0], minor=facts.capability[1],
        total_memory=facts.total_bytes, multi_processor_count=132, is_integrated=False,
        is_multi_gpu_board=False, gcnArchName="", uuid="GPU-fake", L2_cache_size=50 << 20,
        warp_size=32)

    def stat(key: str) -> Callable[..., int]:
        return lambda *_a, **_k: memory()[key]

    answers: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": lambda: None,
        "init": lambda: None,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda _d: None,
        "get_device_name": lambda *_a: facts.name,
        "get_device_capability": lambda *_a: facts.capability,
        "get_device_properties": lambda *_a: props,
        "is_bf16_supported": lambda *_a, **_k: facts.capability[0] >= 8,
        "is_tf32_supported": lambda: facts.capability[0] >= 8,
        "synchronize": lambda *_a: _log.synchronize(None),
        "ipc_collect": lambda: None,
        "empty_cache": lambda: on_empty_cache(),
        "Stream": _Stream,
        "Event": _Event,
        "current_stream": lambda *_a: _current(),
        "default_stream": lambda *_a: _DEFAULT,
        "stream": _stream_context,
        "set_stream": _set_current,
        "manual_seed": lambda _s: None,
        "manual_seed_all": lambda _s: None,
        "seed": lambda: None,
        "seed_all": lambda: None,
        "initial_seed": lambda: 0,
        "get_rng_state": lambda *_a: torch.zeros(16, dtype=torch.uint8),
        "get_rng_state_all": lambda: [torch.zeros(16, dtype=torch.uint8)],
        "set_rng_state": lambda *_a: None,
        "set_rng_state_all": lambda *_a: None,
        "mem_get_info": lambda *_a: (facts.total_bytes - memory()["reserved"],
                                     facts.total_bytes),
        "memory_allocated": stat("allocated"),
        "max_memory_allocated": stat("peak_allocated"),
        "memory_reserved": stat("reserved"),
        "max_memory_reserved": stat("peak_reserved"),
        "reset_peak_memory_stats": lambda *_a: None,
        "reset_max_memory_allocated": lambda *_a: None,
        "memory_stats": lambda *_a: {
            "allocated_bytes.all.current": memory()["allocated"],
            "allocated_bytes.all.peak": memory()["peak_allocated"],
            "reserved_bytes.all.current": memory()["reserved"],
            "reserved_bytes.all.peak": memory()["peak_reserved"],
            # Blocks freed on one stream but pending on another stay active; the fake
            # device has one stream, so active is allocated (torchtune logs the peak).
            "active_bytes.all.current": memory()["allocated"],
            "active_bytes.all.peak": memory()["peak_allocated"],
            "num_alloc_retries": 0, "num_ooms": 0},
        "set_per_process_memory_fraction": lambda *_a, **_k: None,
    }
    for name, value in answers.items():
        setattr(cuda, name, value)
        if hasattr(cuda, "memory") and hasattr(cuda.memory, name):
            setattr(cuda.memory, name, value)
    # The device-generic API answers for the current accelerator: FSDP2 waits on its
    # streams' events through it (_fsdp_param_group.py ``finalize_backward``), events the
    # fake streams made.
    torch.accelerator.current_stream = answers["current_stream"]
    torch.accelerator.set_stream = answers["set_stream"]
    _streams_record_uses(torch)
    _with_nccl(torch)
    _keep_modules_in_place(torch)
    _swappable(torch)
    _tensor_of_tensors(torch)
    _deep_copies_are_clones(torch)
    _subclasses_of_fake_tensors(torch)
    _list_indices(torch)
    _foreach_takes_fake_tensors(torch)


def _streams_record_uses(torch: Any) -> None:
    """``Tensor.record_stream`` tells the caching allocator that another stream still uses
    a block, which it then keeps from reuse until that stream's work up to the tensor's
    free is done (FSDP1 records its gathered and reduced tensors on its streams:
    torch/distributed/fsdp/_common_utils.py ``_no_dispatch_record_stream``). The C++ method
    takes no stand-in stream; the use goes to the tracker instead."""
    original = getattr(torch.Tensor.record_stream, "vramfit_original", torch.Tensor.record_stream)

    def record_stream(self: Any, stream: Any) -> None:
        if not isinstance(stream, _Stream):
            original(self, stream)
        elif self.device.type == "cuda":
            _log.record_stream(self, stream.stream_id)

    record_stream.vramfit_original = original  # type: ignore[attr-defined]
    torch.Tensor.record_stream = record_stream


def _foreach_takes_fake_tensors(torch: Any) -> None:
    """torch.optim picks its default implementation by the parameters' exact type: foreach
    (multi-tensor kernels, with state-sized temporaries) for ``Tensor`` and ``Parameter`` on
    CUDA (torch/optim/optimizer.py ``_default_to_fused_or_foreach``), else one tensor at a
    time; ``clip_grad_norm_`` does the same (torch/utils/_foreach_utils.py). A fake
    parameter is a ``FakeTensor`` (nn.Parameter keeps a tensor subclass as it is and marks
    it ``_is_param``), which would take the single-tensor path a GPU run does not take. The
    fake class is added to both lists, as torch.distributed.tensor adds DTensor."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.optim import optimizer
    from torch.utils import _foreach_utils
    for supported in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if FakeTensor not in supported:
            supported.append(FakeTensor)


def _list_indices(torch: Any) -> None:
    """A list in an index (``t[..., [-2], :]``) becomes an index tensor on the indexed
    tensor's device, as it does on a GPU. PyTorch builds it on the host and moves it in C++
    (torch/csrc/utils/tensor_new.cpp ``internal_new_from_data``), and on autograd's device
    thread, where a backward or a checkpoint's recompute runs, that move misses the fake
    mode (transformers 5.23 models/falcon/modeling_falcon.py ``_split_heads`` under
    gradient checkpointing). Each list becomes the host tensor first and then a device
    tensor by a factory and a copy, which the mode sees on every thread; the same bytes."""
    original = getattr(torch.Tensor.__getitem__, "vramfit_original", torch.Tensor.__getitem__)

    def as_tensor(index: Any, device: Any) -> Any:
        if not isinstance(index, list):
            return index
        host = torch.tensor(index, device="cpu")
        return torch.empty(host.shape, dtype=host.dtype, device=device).copy_(host)

    def getitem(self: Any, index: Any) -> Any:
        if self.device.type == "cuda":
            if isinstance(index, tuple) and any(isinstance(i, list) for i in index):
                index = tuple(as_tensor(i, self.device) for i in index)
            elif isinstance(index, list):
                index = as_tensor(index, self.device)
        return original(self, index)

    getitem.vramfit_original = original  # type: ignore[attr-defined]
    torch.Tensor.__getitem__ = getitem


def _tensor_of_tensors(torch: Any) -> None:
    """``torch.tensor(list)`` reads tensor elements with ``_local_scalar_dense`` in C++,
    beneath the Python modes that answer data-dependent values, which looks for a CUDA
    kernel the CPU build lacks (torchtune 0.6 models/llama3_1/_position_embeddings.py
    builds its scaled RoPE frequencies so). Each element is read with ``.item()`` first,
    which the tracker answers; the values never change memory."""
    original = getattr(torch.tensor, "vramfit_original", torch.tensor)
    # ``with torch.device("cuda"):`` gives the device to the factories it knows by identity,
    # a set made at its first use (torch/utils/_device.py ``_device_constructors``): made
    # now, it holds the original, which the replacement calls (Lightning's bitsandbytes
    # layers test ``torch.tensor(0).device`` to quantize as they are built).
    import torch.utils._device
    torch.utils._device._device_constructors()

    def tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in data):
            data = [x.item() if isinstance(x, torch.Tensor) else x for x in data]
        return original(data, *args, **kwargs)

    tensor.vramfit_original = original  # type: ignore[attr-defined]
    torch.tensor = tensor


def _swappable(torch: Any) -> None:
    """``torch.utils.swap_tensors`` refuses tensors that have weak references. A fake tensor
    that a factory call made is held weakly by its mode's converter memo
    (torch/_subclasses/meta_utils.py ``MetaConverter.tensor_memo``), a reference the GPU
    tensor would not have, so the memo's entries for the two tensors go first (torchtune
    0.6 modules/low_precision/nf4_linear.py swaps each weight for its NF4 form)."""
    original = getattr(torch.utils.swap_tensors, "vramfit_original", torch.utils.swap_tensors)

    def swap_tensors(t1: Any, t2: Any) -> None:
        for t in (t1, t2):
            mode = getattr(t, "fake_mode", None)
            if mode is not None:
                memo = mode.fake_tensor_converter.meta_converter.tensor_memo
                for key in [k for k, v in memo.items() if v is t]:
                    del memo[key]
        return original(t1, t2)

    swap_tensors.vramfit_original = original  # type: ignore[attr-defined]
    torch.utils.swap_tensors = swap_tensors


def _with_nccl(torch: Any) -> None:
    """PyTorch's CUDA builds for Linux ship NCCL, and frameworks test for it before they
    allow bf16 (torchtune 0.6 training/precision.py ``verify_bf16_support``: NCCL >= 2.10).
    The version is the NCCL the CUDA 12 builds pin (pytorch .ci/docker/ci_commit_pins/
    nccl-cu12.txt, v2.27.x); frameworks only compare it with minimums."""
    torch.cuda.nccl.version = lambda: (2, 27, 3)
    if torch.distributed.is_available():
        torch.distributed.is_nccl_available = lambda: True


def _deep_copies_are_clones(torch: Any) -> None:
    """``copy.deepcopy`` of a tensor copies its storage (``Tensor.__deepcopy__``), which a
    fake tensor cannot do (its storage is on the meta device); a clone is the same
    allocation. (torchmetrics deep-copies every metric state's default, metric.py
    ``add_state``.)"""
    from torch._subclasses.fake_tensor import FakeTensor

    def deepcopy(self: Any, memo: dict[int, Any]) -> Any:
        if id(self) not in memo:
            with torch.no_grad():
                new = self.clone()
            new.requires_grad_(self.requires_grad)
            memo[id(self)] = new
        return memo[id(self)]

    FakeTensor.__deepcopy__ = deepcopy


def _subclasses_of_fake_tensors(torch: Any) -> None:
    """Parameter subclasses that wrap their data with ``Tensor._make_subclass``
    (bitsandbytes' ``Params4bit`` and ``Int8Params``) cannot wrap a fake tensor: its
    TensorImpl already has its Python object. Such a parameter becomes the fake tensor
    itself, retyped to a class that is both (``FakeTensor`` first, so the fake mode still
    answers its ops; the subclass's methods and attributes are all there)."""
    from torch._subclasses.fake_tensor import FakeTensor

    make_subclass = getattr(torch.Tensor._make_subclass, "vramfit_original", torch.Tensor._make_subclass)
    both: dict[type, type] = {}

    # The parameter names are the C function's: torch._dynamo checks them against its polyfill.
    def make(cls: type, data: Any, requires_grad: bool = False, **kwargs: Any) -> Any:
        if not isinstance(data, FakeTensor) or issubclass(cls, FakeTensor):
            return make_subclass(cls, data, requires_grad, **kwargs)
        if cls not in both:
            both[cls] = type(f"Fake{cls.__name__}", (FakeTensor, cls), {})
        t = data.detach().requires_grad_(requires_grad)
        t.__class__ = both[cls]
        return t

    make.vramfit_original = make_subclass  # type: ignore[attr-defined]
    torch.Tensor._make_subclass = staticmethod(make)


def _keep_modules_in_place(torch: Any) -> None:
    """``Module.to()`` moves each parameter and buffer with ``Tensor.to`` and puts the
    result in its place, as ``Module._apply`` does on a GPU.

    ``_apply`` itself cannot be used: for fake parameters it swaps the tensor objects,
    which fails while the fake mode holds weak references to them, and ``param.data =``
    would leave a fake tensor's device unchanged. A tensor already on the device in the
    dtype is kept (``Tensor.to`` returns it), so no memory moves."""

    def move(t: Any, device: Any, dtype: Any) -> Any:
        wanted = dtype if dtype is not None and (t.is_floating_point() or t.is_complex()) else None
        return t.to(device=device, dtype=wanted)

    original = getattr(torch.nn.Module.to, "vramfit_original", torch.nn.Module.to)

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if next(self.parameters(), None) is None:
            # Nothing to swap: ``_apply`` also moves what a module keeps besides buffers
            # (torchmetrics' metric states, metric.py ``_apply``).
            return original(self, *args, **kwargs)
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        moved: dict[int, Any] = {}
        with torch.no_grad():
            for module in self.modules():
                for kind in ("_parameters", "_buffers"):
                    table = getattr(module, kind)
                    for name, t in list(table.items()):
                        if t is None:
                            continue
                        if id(t) not in moved:
                            new = move(t, device, dtype)
                            if new is not t and kind == "_parameters" and \
                                    not isinstance(new, torch.nn.Parameter):
                                new = torch.nn.Parameter(new, requires_grad=t.requires_grad)
                            moved[id(t)] = new
                        table[name] = moved[id(t)]
        return self

    to.vramfit_original = original  # type: ignore[attr-defined]

    def cuda(self: Any, device: Any = None) -> Any:
        return to(self, torch.device("cuda", device) if isinstance(device, int)
                  else torch.device(device or "cuda"))

    torch.nn.Module.to = to
    # cpu() and cuda() go through _apply too (Lightning 2.6's Strategy.teardown moves the
    # module to the CPU when fit ends, pytorch/strategies/strategy.py).
    torch.nn.Module.cpu = lambda self: to(self, "cpu")
    torch.nn.Module.cuda = cuda
