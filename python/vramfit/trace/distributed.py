"""One rank of a multi-GPU run, traced alone.

torch.distributed's fake process group (``torch.testing._internal.distributed.fake_pg``:
backend ``"fake"`` with a ``FakeStore``) answers every collective without communicating,
while the caller still allocates each collective's output on the device, as NCCL's caller
does on a GPU. So rank 0 of an N-GPU run makes the allocations it makes on a GPU: its
parameter and optimizer shards, the all-gather outputs FSDP gathers each block into, the
reduce-scatter inputs and outputs of the gradients. Only the process group's creation is
replaced (``one_rank``); the framework's own code shards, gathers and reduces.

Rank 0 is traced: with data parallelism every rank holds the same shards' sizes (FSDP pads
each parameter's dim 0 to a multiple of the world size, so rank 0's shard is never the
smaller one) and runs the same batch shapes.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, Iterator

# The variables torchrun sets for every worker (torch/distributed/run.py; the frameworks
# read them to tell a launched worker from a single-process run: torchtune 0.6
# training/_distributed.py ``is_distributed``). One node of up to 8 GPUs, as on DGX/HGX.
GPUS_PER_NODE = 8


def launch_environment(world_size: int) -> dict[str, str]:
    return {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(min(world_size, GPUS_PER_NODE)),
            "GROUP_RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}


@contextlib.contextmanager
def one_rank(world_size: int) -> Iterator[None]:
    """Makes this process rank 0 of ``world_size`` while it lasts: torchrun's environment,
    and every ``init_process_group`` call, whatever backend the framework names (nccl, or
    ``cuda:nccl,cpu:gloo``), gets the fake backend with rank 0 of ``world_size``. The
    process group and the environment go when it ends (the tests trace many setups in one
    process)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d
    from torch.testing._internal.distributed.fake_pg import FakeStore

    original = distributed_c10d.init_process_group

    @functools.wraps(original)
    def init_process_group(*_args: Any, **kwargs: Any) -> None:
        options = {k: v for k, v in kwargs.items() if k in ("timeout", "pg_options")}
        original("fake", store=FakeStore(), rank=0, world_size=world_size, **options)

    saved = {k: os.environ.get(k) for k in launch_environment(world_size)}
    os.environ.update(launch_environment(world_size))
    dist.init_process_group = distributed_c10d.init_process_group = init_process_group
    _meshes_on_the_host()
    try:
        yield
    finally:
        dist.init_process_group = distributed_c10d.init_process_group = original
        if dist.is_initialized():
            dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _meshes_on_the_host() -> None:
    """A ``DeviceMesh`` is host bookkeeping: a CPU tensor of ranks whose values it reads
    (``tolist``, ``(mesh == rank).nonzero()``, torch/distributed/device_mesh.py). Under the
    fake mode a CPU tensor made there is fake too, valueless, so every DeviceMesh method
    runs with the fake mode lifted. The rank map ``init_device_mesh`` makes before
    constructing the mesh (``torch.arange(numel)`` on the CPU) is already fake by then: it
    is made again, real, with the same values."""
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
    from torch.distributed import device_mesh

    mesh_class = device_mesh.DeviceMesh
    if getattr(mesh_class, "vramfit_on_host", False):
        return

    def real(t: Any) -> Any:
        if not isinstance(t, FakeTensor):
            return t
        import torch
        return torch.arange(t.numel(), dtype=t.dtype).view(t.shape)

    def lifted(method: Any, rebuild: bool) -> Any:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with unset_fake_temporarily():
                if rebuild:
                    args = tuple(real(a) for a in args)
                    kwargs = {k: real(v) for k, v in kwargs.items()}
                return method(*args, **kwargs)
        return call

    for name, value in list(vars(mesh_class).items()):
        if isinstance(value, staticmethod):
            setattr(mesh_class, name, staticmethod(lifted(value.__func__, False)))
        elif callable(value) and not isinstance(value, type) and name not in (
                "__hash__", "__eq__", "__repr__", "__getstate__", "__setstate__"):
            setattr(mesh_class, name, lifted(value, name == "__init__"))
    mesh_class.vramfit_on_host = True
