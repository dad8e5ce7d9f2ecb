"""What a fleet scoring found, in a few lines for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.fleet_measured import MeasuredCheck, measured_check


@dataclass(frozen=True)
class FleetSummary:
    """What a scoring run found, for the terminal."""

    rows: int
    failed_rows: int
    error_rows: int
    first_errors: tuple[tuple[int, str], ...]
    median_step_time_s: float
    scenario: tuple[str, ...]
    scored_speedups: int
    not_applicable: int
    median_speedup: float
    mean_speedup: float
    share_faster: float
    share_slower: float
    overlap: str
    method: str = "analytical"
    #: Predicted layout jobs (answered by the analytical layout model, :mod:`predictor.fleet_layout`).
    layout_rows: int = 0
    #: The fleet's measured steps against the predictions (:mod:`predictor.fleet_measured`).
    measured: MeasuredCheck | None = None
    #: Median throughput ratio where the scenario changes some job's samples per step (else NaN).
    median_throughput_ratio: float = float("nan")
    #: Predicted jobs whose estimated memory per GPU exceeds their GPU's (:mod:`features.memory`), and under the
    #: scenario, the target's.
    over_memory: int = 0
    target_over_memory: int = 0
    #: Of ``over_memory``, the jobs that some number of gradient-accumulation passes would fit (``passes_to_fit``).
    over_memory_accumulable: int = 0

    def lines(self) -> list[str]:
        out = [
            f"scored {self.rows:,} jobs ({_METHOD_TEXT.get(self.method, self.method)}, {_OVERLAP_TEXT[self.overlap]}): "
            f"{self.rows - self.failed_rows:,} predicted, {self.failed_rows:,} failed validation",
        ]
        if self.layout_rows:
            out.append(f"layout jobs: {self.layout_rows:,} of the predicted, by the analytical layout model alone (no interval)")
        if np.isfinite(self.median_step_time_s):
            out.append(f"median step time: {self.median_step_time_s:.4g} s")
        if self.scenario:
            what = " + ".join(self.scenario)
            if self.scored_speedups:
                per_step = "" if np.isnan(self.median_throughput_ratio) else " per step"
                out.append(
                    f"{what}: {self.scored_speedups:,} jobs, median speedup{per_step} {self.median_speedup:.2f}x "
                    f"(mean {self.mean_speedup:.2f}x), {self.share_faster:.0%} faster, {self.share_slower:.0%} slower"
                )
                if per_step:
                    out.append(f"{what}: changes the samples per step; median throughput ratio {self.median_throughput_ratio:.2f}x")
            else:
                out.append(f"{what}: no job could be scored under this scenario")
            if self.not_applicable:
                out.append(f"{what}: does not apply to {self.not_applicable:,} predicted jobs (reason in the error column)")
            if self.target_over_memory:
                out.append(f"{what}: {self.target_over_memory:,} jobs may not fit the target GPU's memory (target_memory_share_of_gpu > 1)")
        if self.over_memory:
            out.append(f"{self.over_memory:,} predicted jobs may not fit their GPU's memory (memory_share_of_gpu > 1); "
                       f"{self.over_memory_accumulable:,} of them would in gradient-accumulation passes (passes_to_fit)")
        measured = self.measured.line() if self.measured is not None else None
        if measured:
            out.append(measured)
        if self.first_errors:
            out.append(f"rows with an error: {self.error_rows:,}; the first:")
        for row, message in self.first_errors:
            out.append(f"  row {row}: {message}")
        return out


_OVERLAP_TEXT = {"none": "PAI additive", "overlapped": "overlapped", "roofline": "roofline physics"}
_METHOD_TEXT = {"analytical": "analytical model", "learned": "analytical model x learned residual"}


def summarize(
    scored: pd.DataFrame, to: Sequence[str] = (), overlap: str = "none", first: int = 5, method: str = "analytical",
    confidence_level: float = 0.9,
) -> FleetSummary:
    """Rows, failures (the first few errors with their row numbers), median step time, the speedup spread and,
    where the fleet gives measured steps, how the predictions meet them."""
    errors = scored["error"]
    has_error = errors.notna().to_numpy()
    positions = np.flatnonzero(has_error)[:first]
    first_errors = tuple((int(i), str(errors.iloc[i])) for i in positions)
    step = scored["step_time_s"].to_numpy(float)
    predicted = np.isfinite(step)
    # A predicted layout job has no memory term (predictor.fleet_layout); a data-parallel one always has one.
    layout = predicted & np.isnan(scored["memory_s"].to_numpy(float)) if "memory_s" in scored else np.zeros(len(scored), bool)
    speedup = scored["speedup"].to_numpy(float) if "speedup" in scored else np.full(len(scored), np.nan)
    scored_speedup = speedup[np.isfinite(speedup)]
    some = len(scored_speedup) > 0
    throughput = scored["throughput_ratio"].to_numpy(float) if "throughput_ratio" in scored else speedup
    changed = np.isfinite(speedup) & (np.abs(throughput - speedup) > 1e-9 * np.abs(speedup))
    return FleetSummary(
        rows=len(scored),
        failed_rows=int((~predicted).sum()),
        error_rows=int(has_error.sum()),
        first_errors=first_errors,
        median_step_time_s=float(np.median(step[predicted])) if predicted.any() else float("nan"),
        scenario=tuple(to),
        scored_speedups=len(scored_speedup),
        not_applicable=int((predicted & ~np.isfinite(speedup)).sum()) if to else 0,
        median_speedup=float(np.median(scored_speedup)) if some else float("nan"),
        mean_speedup=float(np.mean(scored_speedup)) if some else float("nan"),
        share_faster=float(np.mean(scored_speedup > 1.0)) if some else float("nan"),
        share_slower=float(np.mean(scored_speedup < 1.0)) if some else float("nan"),
        overlap=overlap,
        method=method,
        layout_rows=int(layout.sum()),
        measured=measured_check(scored, confidence_level),
        median_throughput_ratio=float(np.median(throughput[np.isfinite(speedup)])) if changed.any() else float("nan"),
        over_memory=_over(scored, "memory_share_of_gpu", predicted),
        target_over_memory=_over(scored, "target_memory_share_of_gpu", np.isfinite(speedup)),
        over_memory_accumulable=_over(scored, "memory_share_of_gpu", predicted & _finite(scored, "passes_to_fit")),
    )


def _finite(scored: pd.DataFrame, column: str) -> np.ndarray:
    """Where ``column`` holds a number (nowhere where the column is absent)."""
    return np.isfinite(scored[column].to_numpy(float)) if column in scored else np.zeros(len(scored), bool)


def _over(scored: pd.DataFrame, column: str, rows: np.ndarray) -> int:
    """How many of ``rows`` have ``column`` above 1 (0 where the column is absent)."""
    if column not in scored:
        return 0
    with np.errstate(invalid="ignore"):
        return int((rows & (scored[column].to_numpy(float) > 1.0)).sum())
