"""The layout planner: every valid way to split a transformer over N GPUs, ranked by predicted step time.

Enumerated: tensor parallel (powers of two dividing the heads and KV heads,
up to two nodes), pipeline stages (divisors of the layers), context parallel
(1, 2, 4, 8 dividing the sequence), data parallel (what fills the GPUs),
micro-batch (1, 2, 4, 8 dividing the per-replica batch), the 1F1B schedule
and the interleaved one with 2, 3, 4 or 6 virtual stages, activation
recomputation and sharding. The global batch, the shape, the GPU and the
links stay the job's. Sequence parallelism is on wherever TP > 1 (it only
removes memory). Layouts whose memory per GPU exceeds the GPU's are dropped
before they are timed and are never ranked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from features.layout import Layout, LayoutBreakdown, LayoutJob, job_memory, step_breakdown
from features.transformer import RECOMPUTE_MODES, SHARDING_MODES, MemoryPerGpu

MICRO_BATCH_SIZES = (1, 2, 4, 8)
CONTEXT_PARALLEL = (1, 2, 4, 8)
VIRTUAL_STAGES = (2, 3, 4, 6)


@dataclass(frozen=True)
class PlannedLayout:
    layout: Layout
    breakdown: LayoutBreakdown


@dataclass(frozen=True)
class Plan:
    """Ranked fitting layouts (fastest first), how many were considered, and the leanest valid layout."""

    gpus: int
    ranked: tuple[PlannedLayout, ...]
    valid_layouts: int
    fitting_layouts: int
    #: The valid layout with the least memory per GPU and that memory (None when no layout is valid):
    #: what the job would need where none fits.
    leanest: tuple[Layout, MemoryPerGpu] | None = None


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (pairs up to its square root: a global batch can be large)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _tensor_parallel_sizes(job: LayoutJob) -> list[int]:
    """Powers of two dividing the heads and the KV heads, up to two nodes' GPUs."""
    shape = job.shape
    max_tp = 2 * job.links.gpus_per_node
    return [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max_tp and shape.attention_heads % t == 0 and shape.kv_heads % t == 0]


def _model_parallel_sizes(job: LayoutJob):
    """Each (TP, PP, CP) the shape allows."""
    for tp in _tensor_parallel_sizes(job):
        for pp in _divisors(job.shape.layers):
            for cp in CONTEXT_PARALLEL:
                if job.shape.sequence_length % cp == 0:
                    yield tp, pp, cp


def gpu_counts(job: LayoutJob) -> list[int]:
    """Every GPU count with at least one valid layout of ``job``'s shape and global batch, ascending.

    A count is TP x PP x CP x DP of sizes :func:`candidate_layouts` allows,
    with DP dividing the global batch (a micro-batch of 1 then divides the
    replica's share).
    """
    data_parallel = _divisors(job.layout.global_batch_size)
    return sorted({tp * pp * cp * dp for tp, pp, cp in _model_parallel_sizes(job) for dp in data_parallel})


def nearest_gpu_counts(job: LayoutJob, gpus: int) -> tuple[int | None, int | None]:
    """The largest count below ``gpus`` and the smallest above it that have a valid layout (None where none)."""
    counts = gpu_counts(job)
    below = [c for c in counts if c < gpus]
    above = [c for c in counts if c > gpus]
    return (below[-1] if below else None), (above[0] if above else None)


def gpu_count_rule(job: LayoutJob, gpus: int) -> str:
    """Why no layout uses ``gpus`` GPUs, and the nearest counts that have one: the ``allowed`` part of an error."""
    shape = job.shape
    below, above = nearest_gpu_counts(job, gpus)
    if below is not None and above is not None:
        nearest = f"the nearest such counts: {below} and {above}"
    else:
        nearest = f"the largest such count: {below}" if above is None else f"the smallest such count: {above}"
    return (
        f"allowed: a count made of tensor x pipeline x context x data parallel sizes, TP a power of two dividing the "
        f"{shape.attention_heads} heads and {shape.kv_heads} KV heads (up to {max(_tensor_parallel_sizes(job))}), PP dividing "
        f"the {shape.layers} layers, CP 1, 2, 4 or 8 dividing the sequence and DP the global batch of "
        f"{job.layout.global_batch_size}; {nearest}"
    )


def candidate_layouts(job: LayoutJob, gpus: int):
    """Every valid layout of ``job``'s shape and global batch on ``gpus`` GPUs."""
    shape = job.shape
    global_batch = job.layout.global_batch_size
    for tp, pp, cp in _model_parallel_sizes(job):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        if global_batch % dp:
            continue
        schedules = [("1f1b", 1)] + [("interleaved", v) for v in VIRTUAL_STAGES if pp > 1 and shape.layers % (pp * v) == 0]
        for micro in MICRO_BATCH_SIZES:
            if global_batch % (dp * micro):
                continue
            for schedule, v in schedules:
                for recompute in RECOMPUTE_MODES:
                    for sharding in SHARDING_MODES:
                        if sharding != "none" and dp * cp == 1:
                            continue
                        yield Layout(tp, pp, cp, dp, micro, global_batch, schedule, v, tp > 1, recompute, sharding)


def plan(job: LayoutJob, gpus: int | None = None, top: int | None = None) -> Plan:
    """Rank every fitting layout of ``job`` on ``gpus`` GPUs (default: the job's) by predicted step time."""
    gpus = job.layout.gpus if gpus is None else gpus
    capacity = float(job.gpu.memory_bytes)
    valid = 0
    timed: list[PlannedLayout] = []
    leanest: tuple[Layout, MemoryPerGpu] | None = None
    for layout in candidate_layouts(job, gpus):
        valid += 1
        candidate = job.with_layout(layout)
        memory = job_memory(candidate)
        if leanest is None or memory.total_bytes < leanest[1].total_bytes:
            leanest = (layout, memory)
        if memory.total_bytes > capacity:
            continue
        timed.append(PlannedLayout(layout, step_breakdown(candidate, memory=memory)))
    timed.sort(key=lambda p: p.breakdown.step_time_s)
    ranked = tuple(timed if top is None else timed[:top])
    return Plan(gpus, ranked, valid, len(timed), leanest)
