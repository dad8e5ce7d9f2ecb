"""How far measured runs of the same job lie from one another: the floor under any predictor's error.

Two runs whose job fields are all alike (every field of the job spec but its
name) are one and the same job to a predictor, which must give them one step
time. Where such a job was measured more than once, each run's error against
the geometric mean of the job's other runs is what a predictor that knew the
others exactly would make on it (APE = |predicted / measured - 1|, as
everywhere in the reports). Within a source this is run-to-run and host-to-host
spread (Lambda measures about 40 H100 SXM hosts); across sources and software
releases it adds what no job field carries: the harness, the container, the
framework's version.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from training.cv import ape
from training.runs import JOB_COLUMNS

#: The job fields that make two runs the same job (the name is a label, the step time the measurement).
SAME_JOB_COLUMNS = tuple(c for c in JOB_COLUMNS if c not in ("name", "measured_step_time_s"))


def job_keys(runs: pd.DataFrame) -> np.ndarray:
    """One integer per run, equal where every job field is equal (missing values equal each other)."""
    columns = [c for c in SAME_JOB_COLUMNS if c in runs.columns]
    keys = runs[columns].astype(object).where(runs[columns].notna(), None).astype(str)
    return keys.groupby(columns, sort=False, dropna=False).ngroup().to_numpy()


def leave_one_out_ape(log_measured_s: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Per run, the APE of the geometric mean of the other runs of its job; NaN for a job measured once."""
    log_measured_s = np.asarray(log_measured_s, float)
    counts = np.bincount(keys)
    sums = np.bincount(keys, log_measured_s)
    n = counts[keys]
    with np.errstate(invalid="ignore", divide="ignore"):
        others = (sums[keys] - log_measured_s) / (n - 1)
    return np.where(n > 1, ape(others, log_measured_s), np.nan)


def _row(scope: str, errors: np.ndarray, keys: np.ndarray) -> dict:
    repeated = np.isfinite(errors)
    e = errors[repeated]
    spread = (float(e.mean()), float(np.median(e)), float(np.percentile(e, 90))) if len(e) else (np.nan,) * 3
    return {
        "scope": scope,
        "runs": int(repeated.sum()),
        "jobs": int(len(np.unique(keys[repeated]))),
        "mean_ape": spread[0],
        "median_ape": spread[1],
        "p90_ape": spread[2],
    }


def repeatability_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per source (jobs repeated within it), then all sources together and the jobs measured by two sources or more."""
    keys = job_keys(runs)
    log_measured = np.log(runs["measured_step_time_s"].to_numpy(float))
    source = runs["source"].astype(str).to_numpy()
    rows = []
    for name in pd.unique(source):
        mine = source == name
        rows.append(_row(name, leave_one_out_ape(log_measured[mine], job_keys(runs[mine])), keys[mine]))
    pooled = leave_one_out_ape(log_measured, keys)
    rows.append(_row("all sources together", pooled, keys))
    spans = pd.Series(source).groupby(keys).nunique().to_numpy()[keys] > 1
    rows.append(_row("jobs measured by two sources or more", np.where(spans, pooled, np.nan), keys))
    return pd.DataFrame(rows)
