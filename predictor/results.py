"""Typed answers of the predictor; ``to_dict()`` is the JSON the CLI prints."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from features.analytical import COMPONENTS


def _number(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


@dataclass(frozen=True)
class Breakdown:
    """The analytical split of one step, in seconds."""

    io_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    comm_intra_node_s: float
    comm_network_s: float
    additive_s: float
    overlapped_s: float
    bottleneck: str
    bottleneck_link: str | None
    #: The roofline physics by mechanism (``--overlap roofline``), seconds; None where not computed.
    physics: dict[str, float] | None = None

    @property
    def seconds(self) -> dict[str, float]:
        return dict(zip(COMPONENTS, (self.io_s, self.compute_s, self.memory_s, self.comm_s)))

    @property
    def shares(self) -> dict[str, float]:
        """Each component's share of the additive (PAI) step time."""
        total = self.additive_s
        return {name: (value / total if total > 0 else 0.0) for name, value in self.seconds.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "io_s": self.io_s,
            "compute_s": self.compute_s,
            "memory_s": self.memory_s,
            "comm_s": self.comm_s,
            "comm_intra_node_s": self.comm_intra_node_s,
            "comm_network_s": self.comm_network_s,
            "additive_s": self.additive_s,
            "overlapped_s": self.overlapped_s,
            "shares": self.shares,
            **({"physics": self.physics} if self.physics is not None else {}),
        }


@dataclass(frozen=True)
class Prediction:
    """Predicted step time of one job."""

    name: str
    step_time_s: float
    throughput_samples_per_s: float
    global_batch_size: float
    breakdown: Breakdown
    method: str
    overlap: str
    lower_s: float | None = None
    upper_s: float | None = None
    confidence_level: float | None = None
    measured_step_time_s: float | None = None
    warnings: tuple[str, ...] = field(default=())
    #: Per-GPU memory of the step, estimated (:func:`features.memory.DataParallelMemory.to_dict`); None where not estimated.
    memory: dict[str, Any] | None = None

    @property
    def fits(self) -> bool | None:
        """Whether the step's estimated memory fits the GPU (None where not estimated)."""
        return None if self.memory is None else bool(self.memory["fits"])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "step_time_s": self.step_time_s,
            "throughput_samples_per_s": self.throughput_samples_per_s,
            "global_batch_size": self.global_batch_size,
            "breakdown": self.breakdown.to_dict(),
            "bottleneck": self.breakdown.bottleneck,
            "bottleneck_link": self.breakdown.bottleneck_link,
            "method": self.method,
            "overlap": self.overlap,
        }
        if self.lower_s is not None:
            out.update(lower_s=self.lower_s, upper_s=self.upper_s, confidence_level=self.confidence_level)
        if self.measured_step_time_s is not None:
            out["measured_step_time_s"] = self.measured_step_time_s
        if self.memory is not None:
            out["memory"] = self.memory
        out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True)
class SpeedupPrediction:
    """Baseline against a what-if target; speedup = baseline time / target time (per step).

    A what-if that changes the samples a step processes (the GPU count of a
    data-parallel job, the per-GPU batch) changes what a step is: there the
    question is throughput, ``throughput_ratio`` = speedup x
    ``samples_per_step_ratio``, the target's samples per second over the
    baseline's, with the speedup's interval scaled by the same exact factor.
    """

    baseline: Prediction
    target: Prediction
    scenario: tuple[str, ...]
    speedup: float
    target_job: dict[str, Any]
    speedup_lower: float | None = None
    speedup_upper: float | None = None
    p_speedup_gt_1: float | None = None
    confidence_level: float | None = None
    #: The target's samples per step over the baseline's (1 unless the GPU count or batch changes).
    samples_per_step_ratio: float = 1.0
    #: P(the target processes more samples per second).
    p_more_throughput: float | None = None

    @property
    def changes_samples_per_step(self) -> bool:
        return f"{self.samples_per_step_ratio:.6g}" != "1"

    @property
    def throughput_ratio(self) -> float:
        return self.speedup * self.samples_per_step_ratio

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.baseline.name,
            "scenario": list(self.scenario),
            "baseline_step_time_s": self.baseline.step_time_s,
            "target_step_time_s": self.target.step_time_s,
            "speedup": self.speedup,
            "samples_per_step_ratio": self.samples_per_step_ratio,
            "throughput_ratio": self.throughput_ratio,
        }
        if self.speedup_lower is not None:
            out.update(
                speedup_lower=self.speedup_lower,
                speedup_upper=self.speedup_upper,
                p_speedup_gt_1=self.p_speedup_gt_1,
                throughput_ratio_lower=self.speedup_lower * self.samples_per_step_ratio,
                throughput_ratio_upper=self.speedup_upper * self.samples_per_step_ratio,
                p_throughput_gt_1=self.p_more_throughput,
                confidence_level=self.confidence_level,
            )
        out["baseline"] = self.baseline.to_dict()
        out["target"] = self.target.to_dict()
        out["target_job"] = {k: v for k, v in self.target_job.items() if v is not None}
        return out
