"""The answers as types: the ``--json`` objects of ../shared/contract/cli.md (and the
pages of docs/ that describe each command's ``--json``) as TypedDicts, and what the
in-process helpers return. An answer may hold more fields than these name (the contract lets
``--json`` gain fields); the ones named are always there."""
from __future__ import annotations

from typing import Any, TypedDict


class Range(TypedDict):
    low: int
    high: int


class ModelSummary(TypedDict):
    name: str
    params: int
    trainable_params: int


class Peak(TypedDict):
    allocated_bytes: int  # torch.cuda.max_memory_allocated()
    reserved_bytes: int  # torch.cuda.max_memory_reserved()
    device_bytes: int  # what nvidia-smi shows for the process
    phase: str  # forward, loss, backward, optimizer, ...
    allocated_range: Range
    reserved_range: Range
    device_range: Range


class Breakdown(TypedDict):
    weights: int
    gradients: int
    optimizer: int
    activations: int
    temporaries: int
    allocator_slack: int
    runtime: int


class Estimate(TypedDict):
    """``vramfit estimate --json`` (docs/estimate.md)."""
    model: ModelSummary
    peak: Peak
    breakdown: Breakdown  # at the peak; sums to peak.device_bytes
    capacity_bytes: int | None
    fits: bool | None
    setup: dict[str, Any]  # every value the estimate used
    assumed: dict[str, Any]  # the values that came from defaults


class Setting(TypedDict):
    batch: int
    accumulation: int
    seq: int
    grad_ckpt: str
    optimizer: str
    method: str
    shard: str
    offload: str
    peak_device_bytes: int
    tokens_per_second: float


class Tiers(TypedDict):
    safe: Setting
    balanced: Setting
    aggressive: Setting


class Plan(TypedDict):
    """``vramfit plan --json`` (docs/plan.md); a "no" still has these, with the smallest peak."""
    recommended: Setting
    tiers: Tiers
    changes: list[str]  # sentences, most important first
    given: Setting
    capacity_bytes: int


class Stage(TypedDict):
    name: str
    file: str | None
    batch: int
    accumulation: int
    effective_batch: int
    knobs: dict[str, int]
    peak_device_bytes: int
    budget_bytes: int


class WorkloadPlan(TypedDict):
    """``vramfit plan --workload FILE --json`` (docs/workloads.md)."""
    workload: str
    capacity_bytes: int
    stages: list[Stage]
    recommended: Stage
    changes: list[str]
    estimated_from: str


class TracedPoint(TypedDict):
    knobs: dict[str, int]
    allocated_bytes: int
    reserved_bytes: int
    phase: str


class WorkloadTrace(TypedDict):
    """``vramfit trace --workload FILE --json``: every traced point and the fit."""
    points: list[TracedPoint]
    fit: dict[str, Any]


class Trial(TypedDict):
    """One try of find_max_batch, named as ``vramfit probe --json`` names a launch."""
    batch: int
    outcome: str  # ok, oom
    peak_allocated_bytes: int  # torch.cuda.max_memory_allocated() of the try
    predicted_peak_bytes: int | None
    move: str  # why this batch: start, predicted, approach, confirm, bisect, step
    seconds: float
    left_behind_bytes: int  # allocated after the try's cleanup, above what was before it


class Recommended(TypedDict):
    batch: int
    accumulation: int
    effective_batch: int
    predicted_peak_bytes: int | None


class Settled(TypedDict):
    batch: int
    predicted_bytes: int
    limit_bytes: int


class BatchSearch(TypedDict):
    """What find_max_batch found: the boundary, the batch under the margin, every try."""
    max_batch: int  # 0 when not even the smallest fits
    recommended: Recommended | None
    margin: float
    ceiling_bytes: int  # what the process may hold on the device
    estimate_batch: int | None  # where the estimate put the boundary
    launches: int
    trials: list[Trial]
    settled_by_peaks: Settled | None


class Sample(TypedDict):
    """One step's memory as monitor() and the callbacks log it (bytes)."""
    step: int
    allocated_bytes: int  # torch.cuda.memory_allocated() at the step's end
    reserved_bytes: int
    peak_allocated_bytes: int  # max_memory_allocated() over the step
    peak_reserved_bytes: int
    device_used_bytes: int  # the whole GPU's used memory (every process), as nvidia-smi
    device_total_bytes: int
    estimate_allocated_bytes: int | None  # the estimate's peaks beside them
    estimate_device_bytes: int | None
