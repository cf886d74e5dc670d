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

The fake group records no stream, and neither does NCCL's at the pinned torch 2.13: a
synchronous collective runs on the caller's stream, and an asynchronous one's tensors stay
referenced on the host until ``work.wait()`` has made the caller's stream follow it
(c10d ProcessGroupNCCL.hpp ``TensorShelf``; pytorch#150398, from 2.8). Up to 2.7 NCCL's
own stream recorded every input (``recordStream``): the estimator keeps that for the older
releases (profile field ``nccl_records_streams``), which a trace cannot show.
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

    original_group = distributed_c10d.new_group

    @functools.wraps(original_group)
    def new_group(*args: Any, **kwargs: Any) -> Any:
        # A subgroup of the fake world is fake too: a gloo group (Lightning Fabric's
        # rank_zero_first barrier, fabric/utilities/distributed.py _InfiniteBarrier) needs
        # a real store.
        kwargs["backend"] = "fake"
        return original_group(*args, **kwargs)

    saved = {k: os.environ.get(k) for k in launch_environment(world_size)}
    os.environ.update(launch_environment(world_size))
    dist.init_process_group = distributed_c10d.init_process_group = init_process_group
    dist.new_group = distributed_c10d.new_group = new_group
    _meshes_on_the_host()
    _fake_tensors_move_to_the_device()
    _ddp_on_the_fake_group()
    try:
        yield
    finally:
        dist.init_process_group = distributed_c10d.init_process_group = original
        dist.new_group = distributed_c10d.new_group = original_group
        if dist.is_initialized():
            dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def node_gpus(world_size: int) -> Iterator[None]:
    """The node's GPUs, as torch.cuda counts them in each process torchrun starts (it
    leaves CUDA_VISIBLE_DEVICES alone), while it lasts: Lightning checks that the
    ``devices`` it is given exist (fabric/utilities/device_parser.py ``_sanitize_gpu_ids``),
    and the fake device is one."""
    import torch
    original = torch.cuda.device_count
    torch.cuda.device_count = lambda: min(world_size, GPUS_PER_NODE)
    try:
        yield
    finally:
        torch.cuda.device_count = original


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


def _fake_tensors_move_to_the_device() -> None:
    """FSDP moves a module's host parameters to the GPU before sharding them (FSDP2:
    torch/distributed/fsdp/_fully_shard/_fsdp_init.py, FSDP1: _init_utils.py, both
    ``_move_states_to_device``: ``tensor.data = tensor.to(device)``). A fake tensor's
    device is its own attribute, which assigning ``.data`` leaves as it was, so FSDP would
    find the parameter still on the host; a fake tensor is moved the way PyTorch moves
    tensor subclasses, by swapping in the copy on the device (the same allocation)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.distributed.fsdp import _init_utils
    from torch.distributed.fsdp._fully_shard import _fsdp_init

    def swapping(original: Any) -> Any:
        @functools.wraps(original)
        def move(params: list, buffers: list, device: Any) -> None:
            for tensor in [*params, *buffers]:
                if (device is None or not isinstance(tensor, FakeTensor)
                        or tensor.device in (device, torch.device("meta"))):
                    continue
                with torch.no_grad():
                    moved = tensor.to(device)
                if isinstance(tensor, torch.nn.Parameter):
                    moved = torch.nn.Parameter(moved, requires_grad=tensor.requires_grad)
                torch.utils.swap_tensors(tensor, moved)
            original(params, buffers, device)

        move.vramfit_swaps = True
        return move

    for module in (_fsdp_init, _init_utils):
        if not getattr(module._move_states_to_device, "vramfit_swaps", False):
            module._move_states_to_device = swapping(module._move_states_to_device)


def _ddp_on_the_fake_group() -> None:
    """What DistributedDataParallel's C++ asks of a real process group, given in Python.
    First it checks that every rank holds parameters of the same shapes
    (torch/nn/parallel/distributed.py ``__init__``: ``_verify_param_shape_across_processes``)
    in code that reads each tensor's memory, which a fake tensor has not; with one rank
    traced there is nothing to compare, and what the check allocates is a few integers per
    parameter. Then its reducer all-reduces each gradient bucket through a future that must
    hold the bucket, while the fake group's work has none (the reducer asserts "expected
    the hook result is either a Tensor or a TensorList found None"). The all-reduce is
    given as a comm hook that does what DDP's own does, in place on the bucket: divide by
    the world size, all-reduce, the bucket is the result (the built-in ALLREDUCE hook,
    torch/csrc/distributed/c10d/default_comm_hooks.cpp ``AllReduceCommHook``). Neither
    allocates."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import distributed as ddp

    if getattr(ddp.DistributedDataParallel, "vramfit_hooked", False):
        return
    ddp._verify_param_shape_across_processes = lambda *_args, **_kwargs: None
    original = ddp.DistributedDataParallel.__init__

    # Unannotated: DDP refuses a hook whose annotations are not its own types, and this
    # module's annotations are strings.
    def all_reduce(_state, bucket):  # type: ignore[no-untyped-def]
        tensor = bucket.buffer().div_(dist.get_world_size())
        dist.all_reduce(tensor)
        done: Any = torch.futures.Future()
        done.set_result(tensor)
        return done

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.register_comm_hook(None, all_reduce)
        self.logger = _Untimed(self.logger)
        self.reducer = _Unrebuilt(self.reducer)

    ddp.DistributedDataParallel.__init__ = init
    ddp.DistributedDataParallel.vramfit_hooked = True


class _Untimed:
    """DDP's logger, less its runtime statistics: every few iterations it reads the
    reducer's timer (torch/nn/parallel/distributed.py ``_pre_forward``:
    ``logger.set_runtime_stats_and_log``), CUDA events on a GPU, which a CPU build of
    PyTorch cannot make (its reducer has no timer). Timing holds no device memory."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger

    def set_runtime_stats_and_log(self) -> None:
        """Times nothing."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


class _Unrebuilt:
    """DDP's reducer, keeping the buckets it made first. Before the second forward it
    regroups the gradients into new buckets in the order the first backward made them
    ready (``Reducer::rebuild_buckets``), once rank 0 has broadcast that order: a message
    whose values C++ reads, which a fake tensor has not. The new buckets hold the same
    gradients, so the same bytes; only their grouping differs."""

    def __init__(self, reducer: Any) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


@contextlib.contextmanager
def addresses() -> Iterator[None]:
    """Gives fake tensors distinct ``data_ptr()`` values while it lasts. A fake tensor's
    address is 0, so code that tells parameters apart by address takes them all for one:
    accelerate's FSDP2 preparation maps the optimizer's parameters to the sharded ones by
    ``data_ptr()`` (accelerate/accelerator.py ``_prepare_fsdp2``), and with one address the
    optimizer would hold a single parameter and keep no states for the others. The address
    given is the storage's identity (its Python object lives as long as it does: the
    tracker keys storages by it too) with the tensor's offset in it."""
    from torch._subclasses.fake_tensor import FakeTensor

    def data_ptr(t: Any) -> int:
        return (id(t.untyped_storage()) << 40) + t.storage_offset() * t.element_size()

    FakeTensor.data_ptr = data_ptr
    try:
        yield
    finally:
        del FakeTensor.data_ptr
