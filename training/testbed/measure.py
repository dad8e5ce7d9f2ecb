"""From the per-step times the processes report to one run-table measurement."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Measurement:
    """One configuration's median step and the split rank 0 observed, in seconds.

    ``spread_rel`` is the interquartile range of the timed steps over their
    median; ``repeats`` the number of timed steps behind the median.
    """

    step_time_s: float
    spread_rel: float
    repeats: int
    compute_s: float
    comm_s: float


def spread_rel(values: list[float]) -> float:
    """Interquartile range over median (linear interpolation); NaN for no values."""
    if not values:
        return math.nan
    q1, median, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return float((q3 - q1) / median) if median > 0 else math.nan


def summarize(architecture: str, rank0: dict) -> Measurement:
    """Median step, spread and compute/communication split from rank 0's report.

    For all-reduce, backward and the gradient exchange overlap; compute is
    the median of the forward/backward probes run without exchange, and
    communication is the exposed remainder ``step - compute`` (at least 0).
    Elsewhere both are medians of what each step observed directly.
    """
    steps = [float(s) for s in rank0["step_s"]]
    if not steps:
        raise ValueError("no timed steps in the report")
    step = float(np.median(steps))
    if architecture.startswith("allreduce"):
        compute = float(np.median(rank0["compute_probe_s"]))
        comm = max(0.0, step - compute)
    else:
        compute = float(np.median(rank0["compute_s"]))
        comm = float(np.median(rank0["comm_s"]))
    return Measurement(step, spread_rel(steps), len(steps), compute, comm)
