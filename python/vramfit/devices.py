"""The device whose memory find_max_batch and monitor() read: a CUDA GPU through
``torch.cuda``'s allocator statistics, or ``LimitedDevice``, a stand-in with a fixed amount
of memory for trying the same code on the CPU (the tensors made under it are counted, and an
allocation past its limit raises ``torch.OutOfMemoryError`` as the caching allocator does)."""
from __future__ import annotations

import contextlib
import weakref
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Device(Protocol):
    name: str

    def capacity_bytes(self) -> int:
        """What this process may hold: the device's free memory and what it already holds."""

    def total_bytes(self) -> int:
        """The device's memory, all processes'."""

    def used_bytes(self) -> int:
        """The device's memory in use, all processes', as nvidia-smi shows it."""

    def process_bytes(self) -> int | None:
        """What this process holds on the device as NVML counts it; None when unknown."""

    def allocated_bytes(self) -> int: ...
    def reserved_bytes(self) -> int: ...
    def peak_allocated_bytes(self) -> int: ...
    def peak_reserved_bytes(self) -> int: ...

    def reset_peak(self) -> None:
        """Starts the peaks anew (torch.cuda.reset_peak_memory_stats)."""

    def release_cache(self) -> None:
        """Gives the cached blocks back (torch.cuda.empty_cache)."""

    def is_out_of_memory(self, error: BaseException) -> bool: ...

    def tracking(self) -> contextlib.AbstractContextManager[Any]:
        """The context the device's memory is counted in (a GPU: always)."""


# What a CUDA library that could not get memory raises, besides torch.OutOfMemoryError
# (c10/cuda/CUDACachingAllocator.cpp): cuBLAS and cuDNN report their own failures.
OOM_WORDS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE")


class CudaDevice:
    """A CUDA GPU as torch.cuda sees it from this process."""

    def __init__(self, index: int | None = None) -> None:
        import torch

        self.cuda = torch.cuda
        self.index = torch.cuda.current_device() if index is None else index
        self.name = torch.cuda.get_device_name(self.index)

    def capacity_bytes(self) -> int:
        free, _ = self.cuda.mem_get_info(self.index)
        return int(free) + self.reserved_bytes()

    def total_bytes(self) -> int:
        return int(self.cuda.mem_get_info(self.index)[1])

    def used_bytes(self) -> int:
        free, total = self.cuda.mem_get_info(self.index)
        return int(total - free)

    def process_bytes(self) -> int | None:
        """From `vramfit gpus --json`: this process's memory on the GPU NVML shows it on."""
        import os

        from .binding import VramfitError, run

        try:
            gpus = run(["gpus"])
        except VramfitError:  # no driver NVML can reach
            return None
        held = [int(p["used_bytes"]) for g in gpus for p in g["processes"] if p["pid"] == os.getpid()]
        return max(held) if held else None

    def allocated_bytes(self) -> int:
        return int(self.cuda.memory_allocated(self.index))

    def reserved_bytes(self) -> int:
        return int(self.cuda.memory_reserved(self.index))

    def peak_allocated_bytes(self) -> int:
        return int(self.cuda.max_memory_allocated(self.index))

    def peak_reserved_bytes(self) -> int:
        return int(self.cuda.max_memory_reserved(self.index))

    def reset_peak(self) -> None:
        self.cuda.reset_peak_memory_stats(self.index)

    def release_cache(self) -> None:
        self.cuda.empty_cache()

    def is_out_of_memory(self, error: BaseException) -> bool:
        import torch

        return isinstance(error, torch.OutOfMemoryError) or (
            isinstance(error, RuntimeError) and any(w in str(error) for w in OOM_WORDS))

    def tracking(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


def device_for(device: str | Device) -> Device:
    """A Device for "cuda" or "cuda:N", or the one given."""
    if not isinstance(device, str):
        return device
    if device != "cuda" and not device.startswith("cuda:"):
        from .binding import EXIT_BAD_INPUT, VramfitError

        raise VramfitError(EXIT_BAD_INPUT, f"vramfit: device '{device}': a CUDA device ('cuda', 'cuda:1') "
                                           "or a vramfit.Device (LimitedDevice on the CPU)")
    return CudaDevice(int(device[5:]) if device.startswith("cuda:") else None)


class LimitedDevice:
    """A device of ``limit_bytes`` on the CPU: inside ``tracking()`` (and ``with device:``)
    every storage an operation makes is counted until it dies, and one that would take the
    count past the limit raises ``torch.OutOfMemoryError``. Tensors made outside are not
    counted. There is no cache: reserved is allocated."""

    def __init__(self, limit_bytes: int, name: str = "limited device") -> None:
        self.limit = limit_bytes
        self.name = name
        self.live: dict[int, int] = {}  # storage (its Python object's id) -> bytes
        self.now = self.peak = 0
        self._mode: Any = None

    def capacity_bytes(self) -> int:
        return self.limit

    total_bytes = capacity_bytes

    def allocated_bytes(self) -> int:
        return self.now

    used_bytes = reserved_bytes = allocated_bytes

    def process_bytes(self) -> int | None:
        """No NVML sees it."""
        return None

    def peak_allocated_bytes(self) -> int:
        return self.peak

    peak_reserved_bytes = peak_allocated_bytes

    def reset_peak(self) -> None:
        self.peak = self.now

    def release_cache(self) -> None:
        """Nothing is cached."""

    def is_out_of_memory(self, error: BaseException) -> bool:
        import torch

        return isinstance(error, torch.OutOfMemoryError)

    def _dropped(self, key: int) -> None:
        self.now -= self.live.pop(key)

    def count(self, tensor: Any, from_input: bool) -> None:
        """Counts the storage behind a tensor an operation returned, once, until the storage
        dies (torch keeps a storage's Python object as long as the storage lives); not an
        input's storage made outside."""
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self.live or from_input:
            return
        size = int(storage.nbytes())
        if self.now + size > self.limit:
            import torch

            raise torch.OutOfMemoryError(
                f"{self.name}: tried to allocate {size} bytes with {self.now} of {self.limit} in use")
        self.live[key] = size
        self.now += size
        self.peak = max(self.peak, self.now)
        weakref.finalize(storage, self._dropped, key)

    def tracking(self) -> contextlib.AbstractContextManager[Any]:
        from ._counting import CountingMode

        return CountingMode(self)

    def __enter__(self) -> LimitedDevice:
        self._mode = self.tracking()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        mode, self._mode = self._mode, None
        mode.__exit__(*exc)
