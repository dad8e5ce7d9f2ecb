"""A fleet's measured step times against its predictions: how the model does on the user's own jobs.

A fleet may carry ``measured_step_time_s`` (the job spec's ``measured.step_time_s``).
Where a row has one and a prediction, the scoring can say what the held-out
evaluation cannot: how far the model is from runs this repository never saw.
Per row, ``measured / predicted``; over the fleet, its median, the MAPE, and
where the measured step falls against the prediction's interval: inside,
above (slower than the interval allows: a job running below what its hardware
should give it, or a job the model has wrong), or below. A calibrated model
leaves about ``1 - level`` of the jobs outside, split between the two sides; a
skew says which way the model leans on this fleet. Layout jobs and
``--model none`` predictions have no interval and count in the ratio only.

A measured step shorter than the row's ``arithmetic_floor_s`` (every FLOP at
the GPU's dense peak, no memory traffic, launches or communication) was not
measured on the job as the row states it: another precision, batch or GPU
count. Such rows are counted apart and left out of the comparison, whose
figures they would otherwise bend toward a model that is too slow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

@dataclass(frozen=True)
class MeasuredCheck:
    """The fleet's measured steps against its predictions (``jobs`` 0: the fleet gives none)."""

    #: Predicted rows with a measured step.
    jobs: int
    median_measured_over_predicted: float
    mape: float
    #: Of those, the rows whose prediction has an interval, and where the measured step falls.
    with_interval: int
    inside: int
    slower: int
    faster: int
    confidence_level: float
    #: Rows whose measured step is shorter than their arithmetic floor: counted here, left out above.
    below_floor: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str | None:
        """One terminal line (None when no row gives a measured step)."""
        if not self.jobs and not self.below_floor:
            return None
        if not self.jobs:
            return f"measured: {self.floor_clause()}"
        text = (
            f"measured: {self.jobs:,} jobs give a measured step; median measured / predicted "
            f"{self.median_measured_over_predicted:.2f}x, MAPE {self.mape:.1%}"
        )
        if self.with_interval:
            n = self.with_interval
            text += (
                f"; of the {n:,} with a {self.confidence_level:.0%} interval, {self.inside / n:.0%} inside, "
                f"{self.slower / n:.0%} slower than it, {self.faster / n:.0%} faster"
            )
        if self.below_floor:
            text += f"; {self.floor_clause()}"
        return text

    def floor_clause(self) -> str:
        jobs = "job's measured step is" if self.below_floor == 1 else "jobs' measured steps are"
        return (
            f"{self.below_floor:,} {jobs} shorter than the arithmetic allows (left out: "
            "measured at another precision, batch or GPU count?)"
        )


def measured_check(scored: pd.DataFrame, confidence_level: float) -> MeasuredCheck:
    """Compare ``measured_step_time_s`` with the predictions of a scored fleet (see the module docstring)."""
    n = len(scored)

    def column(name: str) -> np.ndarray:
        if name not in scored.columns:
            return np.full(n, np.nan)
        return pd.to_numeric(scored[name], errors="coerce").to_numpy(float)

    measured, predicted = column("measured_step_time_s"), column("step_time_s")
    lower, upper = column("lower_s"), column("upper_s")
    both = np.isfinite(measured) & (measured > 0) & np.isfinite(predicted) & (predicted > 0)
    with np.errstate(invalid="ignore"):
        impossible = both & (measured < column("arithmetic_floor_s"))
    both &= ~impossible
    ratio = measured[both] / predicted[both]
    banded = both & np.isfinite(lower) & np.isfinite(upper)
    return MeasuredCheck(
        jobs=int(both.sum()),
        median_measured_over_predicted=float(np.median(ratio)) if len(ratio) else float("nan"),
        mape=float(np.mean(np.abs(1.0 / ratio - 1.0))) if len(ratio) else float("nan"),
        with_interval=int(banded.sum()),
        inside=int((banded & (measured >= lower) & (measured <= upper)).sum()),
        slower=int((banded & (measured > upper)).sum()),
        faster=int((banded & (measured < lower)).sum()),
        confidence_level=float(confidence_level),
        below_floor=int(impossible.sum()),
    )
