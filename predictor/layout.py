"""Answers for layout jobs (transformers with tensor/pipeline/context/sharded data parallelism).

The analytical layout model (:mod:`features.layout`) alone answers: the
learned residual was trained on data-parallel jobs and is not applied, and
there is no calibrated interval (see :data:`features.layout.NO_INTERVAL_REASON`).
What-ifs rewrite the job's fields as for any job (:mod:`features.scenarios`)
and keep its GPU count: changing TP, PP or CP re-derives the data-parallel
size, ``nodes=`` changes the GPUs, ``data_parallel=`` sets them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from features import scenarios
from features.errors import SpecError
from features.jobspec import Job, flatten
from features.layout import (
    LAYOUT_LEAVES,
    NO_INTERVAL_REASON,
    SHAPE_LEAVES,
    LayoutBreakdown,
    LayoutJob,
    does_not_fit_message,
    step_breakdown,
)
from features.layout_spec import layout_job_from_row
from features.table import table_from_rows


class DoesNotFitError(SpecError):
    """A layout whose memory per GPU exceeds the GPU's; the message says by how much."""

    def __init__(self, message: str):
        self.field = "memory"
        self.value = None
        self.allowed = ""
        ValueError.__init__(self, message)


@dataclass(frozen=True)
class LayoutPrediction:
    """Predicted step of one layout job."""

    name: str
    job: LayoutJob
    breakdown: LayoutBreakdown
    measured_step_time_s: float | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def step_time_s(self) -> float:
        return self.breakdown.step_time_s

    @property
    def fits(self) -> bool:
        return self.breakdown.fits

    def check_fits(self) -> None:
        """Raise :class:`DoesNotFitError` when the layout does not fit the GPU's memory."""
        if not self.fits:
            raise DoesNotFitError(does_not_fit_message(self.breakdown, self.job.gpu.name))

    def to_dict(self) -> dict[str, Any]:
        b = self.breakdown
        out: dict[str, Any] = {
            "name": self.name,
            "kind": "layout",
            "step_time_s": b.step_time_s,
            "lower_s": None,
            "upper_s": None,
            "interval_note": NO_INTERVAL_REASON,
            "tokens_per_s": b.tokens_per_s,
            "throughput_samples_per_s": self.job.layout.global_batch_size / b.step_time_s,
            "global_batch_size": self.job.layout.global_batch_size,
            "mfu": b.mfu,
            "hfu": b.hfu,
            "breakdown": {**b.components_s, "recompute_s": b.recompute_s, "dp_comm_total_s": b.dp_comm_s},
            "bottleneck": b.bottleneck,
            "memory_per_gpu_bytes": b.memory.total_bytes,
            "memory": b.memory.to_dict(),
            "memory_capacity_bytes": b.memory_capacity_bytes,
            "fits": b.fits,
            "layout": self.job.layout.to_dict(),
            "gpus": self.job.layout.gpus,
            "gpu": self.job.gpu.name,
            "precision": self.job.precision,
            "param_count": self.job.shape.param_count(),
            "pipeline_bubble_fraction": self.job.layout.bubble_fraction,
            "method": "analytical",
        }
        if not b.fits:
            out["error"] = does_not_fit_message(b, self.job.gpu.name)
        if self.measured_step_time_s is not None:
            out["measured_step_time_s"] = self.measured_step_time_s
        out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True)
class LayoutSpeedup:
    """Baseline layout job against a what-if; speedup = baseline time / target time."""

    baseline: LayoutPrediction
    target: LayoutPrediction
    scenario: tuple[str, ...]

    @property
    def speedup(self) -> float:
        return self.baseline.step_time_s / self.target.step_time_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.baseline.name,
            "kind": "layout",
            "scenario": list(self.scenario),
            "baseline_step_time_s": self.baseline.step_time_s,
            "target_step_time_s": self.target.step_time_s,
            "speedup": self.speedup,
            "baseline": self.baseline.to_dict(),
            "target": self.target.to_dict(),
        }


def predict_layout(job: Job) -> LayoutPrediction:
    """The step of a layout job (fit or not: :meth:`LayoutPrediction.check_fits` says)."""
    resolved = layout_job_from_row(job.row)
    return LayoutPrediction(job.name, resolved, step_breakdown(resolved), job.measured_step_time_s, resolved.warnings)


def _filled_row(job: Job, resolved: LayoutJob) -> dict[str, Any]:
    """The job's flat row with what its GPU count and batch rest on made explicit, so a what-if keeps them."""
    row = flatten(job)
    lay = resolved.layout
    gpus_per_node = resolved.links.gpus_per_node
    row["global_batch_size"] = lay.global_batch_size
    row["precision"] = resolved.precision
    if lay.gpus % gpus_per_node == 0:
        row["nodes"] = lay.gpus // gpus_per_node
        row["data_parallel"] = None
    return row


#: The fields a layout job is built from (:func:`features.layout_spec.layout_job_from_row`).
LAYOUT_JOB_LEAVES = frozenset(
    (*SHAPE_LEAVES, *LAYOUT_LEAVES, "model", "precision", "gpu", "gpus_per_node", "nodes", "intra_node_link", "network", "nics_per_node")
)


def apply_scenario(job: Job, resolved: LayoutJob, to: Sequence[str]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The target row of a what-if on a layout job, and the scenario's steps as given.

    A step that changes only fields a layout job does not use (its
    architecture, workers, per-GPU batch) is refused, naming them: it would
    read as a 1.00x answer to a question the layout model was never asked.
    """
    from features.errors import RowError

    steps = scenarios.parse(to)
    table = table_from_rows([_filled_row(job, resolved)])
    for step in steps:
        before = {leaf: _plain(values[0]) for leaf, values in table.columns.items()}
        table = scenarios.apply(table, [step])
        if table.errors[0] is not None:
            raise RowError(table.errors[0])
        changed = {leaf for leaf, values in table.columns.items() if not _same(before[leaf], _plain(values[0]))}
        if changed and not changed & LAYOUT_JOB_LEAVES:
            usable = ", ".join(leaf for leaf in scenarios.OVERRIDABLE if leaf in LAYOUT_JOB_LEAVES)
            raise SpecError("--to", step.text, f"a layout job does not use {', '.join(sorted(changed))}; its what-ifs set {usable}")
    row = {leaf: _plain(values[0]) for leaf, values in table.columns.items()}
    keys = {s.text.partition("=")[0].strip() for s in steps}
    if "data_parallel" in keys and "nodes" not in keys:
        row["nodes"] = None
    row["name"] = job.name
    return row, tuple(s.text for s in steps)


def _same(a: Any, b: Any) -> bool:
    missing_a, missing_b = a is None or (isinstance(a, float) and math.isnan(a)), b is None or (isinstance(b, float) and math.isnan(b))
    return (missing_a and missing_b) or (not missing_a and not missing_b and a == b)


def speedup_layout(job: Job, to: Sequence[str]) -> LayoutSpeedup:
    baseline = predict_layout(job)
    row, steps = apply_scenario(job, baseline.job, to)
    target_job = layout_job_from_row(row)
    target = LayoutPrediction(job.name, target_job, step_breakdown(target_job), None, target_job.warnings)
    return LayoutSpeedup(baseline, target, steps)


@dataclass(frozen=True)
class LayoutExplanation:
    """Which component of a layout job's step dominates: the bottleneck families of a layout job."""

    prediction: LayoutPrediction
    target: LayoutPrediction | None = None
    scenario: tuple[str, ...] = ()

    @property
    def shares(self) -> dict[str, float]:
        components = self.prediction.breakdown.components_s
        total = sum(components.values())
        return {k: v / total for k, v in components.items()}

    def summary(self) -> str:
        b = self.prediction.breakdown
        shares = self.shares
        ranked = sorted(shares, key=shares.get, reverse=True)
        text = f"{ranked[0]} dominates ({shares[ranked[0]]:.0%} of the step)"
        others = [f"{name} {shares[name]:.0%}" for name in ranked[1:4] if shares[name] > 0.005]
        if others:
            text += "; then " + ", ".join(others)
        text += f"; MFU {b.mfu:.0%}, {b.memory.total_bytes / 2**30:.1f} GB per GPU"
        if self.target is not None:
            base_c, target_c = b.components_s, self.target.breakdown.components_s
            moved = max(base_c, key=lambda c: abs(base_c[c] - target_c[c]))
            speedup = self.prediction.step_time_s / self.target.step_time_s
            text += (f". Under {' + '.join(self.scenario)}: {speedup:.2f}x, mostly through {moved} "
                     f"({base_c[moved]:.3g} s -> {target_c[moved]:.3g} s)")
        return text

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.prediction.name,
            "kind": "layout",
            "summary": self.summary(),
            "bottleneck": self.prediction.breakdown.bottleneck,
            "seconds": self.prediction.breakdown.components_s,
            "shares": self.shares,
        }
        if self.target is not None:
            out.update(scenario=list(self.scenario), target_seconds=self.target.breakdown.components_s,
                       speedup=self.prediction.step_time_s / self.target.step_time_s)
        return out


def explain_layout(job: Job, to: Sequence[str] | None = None) -> LayoutExplanation:
    if not to:
        return LayoutExplanation(predict_layout(job))
    result = speedup_layout(job, to)
    return LayoutExplanation(result.baseline, result.target, result.scenario)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        value = value.item()
        if isinstance(value, float) and math.isnan(value):
            return None
    return value
