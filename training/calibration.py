"""Fitting the conformal calibration tables on out-of-fold residuals.

Calibration runs crepes' conformal predictive system on out-of-fold
residuals, one Mondrian bin per category (architecture, network tier, or the
kind of what-if for speedups; the bin chains are the runtime's,
:mod:`predictor.calibration`). What is stored is each bin's conformal
predictive distribution at y_hat = 0, as percentile tables.

A bin with fewer than :data:`MIN_BIN_SIZE` residuals falls back to its parent.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from predictor.calibration import PERCENTILES, POOLED, CalibrationTable

#: A Mondrian bin needs this many residuals, else its parent answers: its 5% tails then
#: rest on five residuals or more, and a bin of a few configurations whose out-of-fold
#: residuals happen to lean one way cannot narrow or shift its jobs' intervals.
MIN_BIN_SIZE = 100


def fit_table(residuals: np.ndarray, keys: Sequence[Sequence[str]]) -> CalibrationTable:
    """Calibrate on out-of-fold log residuals; ``keys`` gives each row's bin chain, finest first.

    Every level of every chain with at least :data:`MIN_BIN_SIZE` residuals
    gets its own table, and the pooled bin always does.
    """
    from crepes import ConformalPredictiveSystem

    residuals = np.asarray(residuals, float)
    members: dict[str, list[int]] = {POOLED: list(range(len(residuals)))}
    for i, chain in enumerate(keys):
        for key in chain:
            if key != POOLED:
                members.setdefault(key, []).append(i)
    lower: dict[str, np.ndarray] = {}
    upper: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    low_grid = PERCENTILES
    for name, rows in members.items():
        if len(rows) < MIN_BIN_SIZE and name != POOLED:
            continue
        cps = ConformalPredictiveSystem().fit(residuals[rows])
        with warnings.catch_warnings():
            # Extreme percentiles of small bins are unresolvable; crepes warns, the tables hold the extreme value.
            warnings.simplefilter("ignore")
            low = cps.predict(np.zeros(1), lower_percentiles=low_grid, smoothing=False)[0]
            high = cps.predict(np.zeros(1), higher_percentiles=low_grid, smoothing=False)[0]
        # Percentiles beyond what n residuals can resolve come back infinite: hold the last finite value.
        lower[name] = _hold_finite(np.asarray(low, float))
        upper[name] = _hold_finite(np.asarray(high, float))
        counts[name] = len(rows)
    return CalibrationTable(lower, upper, counts)


def _hold_finite(values: np.ndarray) -> np.ndarray:
    finite = np.isfinite(values)
    if not finite.any():
        return np.zeros_like(values)
    idx = np.flatnonzero(finite)
    return np.interp(np.arange(len(values)), idx, values[idx])
