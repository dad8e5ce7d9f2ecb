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

from dataclasses import dataclass

from features.layout import Layout, LayoutBreakdown, LayoutJob, job_memory, step_breakdown
from features.transformer import RECOMPUTE_MODES, SHARDING_MODES

MICRO_BATCH_SIZES = (1, 2, 4, 8)
CONTEXT_PARALLEL = (1, 2, 4, 8)
VIRTUAL_STAGES = (2, 3, 4, 6)


@dataclass(frozen=True)
class PlannedLayout:
    layout: Layout
    breakdown: LayoutBreakdown


@dataclass(frozen=True)
class Plan:
    """Ranked fitting layouts (fastest first) and how many were considered."""

    gpus: int
    ranked: tuple[PlannedLayout, ...]
    valid_layouts: int
    fitting_layouts: int


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(job: LayoutJob, gpus: int):
    """Every valid layout of ``job``'s shape and global batch on ``gpus`` GPUs."""
    shape = job.shape
    global_batch = job.layout.global_batch_size
    max_tp = 2 * job.links.gpus_per_node
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max_tp and shape.attention_heads % t == 0 and shape.kv_heads % t == 0]
    for tp in tps:
        for pp in _divisors(shape.layers):
            for cp in CONTEXT_PARALLEL:
                if gpus % (tp * pp * cp) or shape.sequence_length % cp:
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
    for layout in candidate_layouts(job, gpus):
        valid += 1
        candidate = job.with_layout(layout)
        memory = job_memory(candidate)
        if memory.total_bytes > capacity:
            continue
        timed.append(PlannedLayout(layout, step_breakdown(candidate, memory=memory)))
    timed.sort(key=lambda p: p.breakdown.step_time_s)
    ranked = tuple(timed if top is None else timed[:top])
    return Plan(gpus, ranked, valid, len(timed))
