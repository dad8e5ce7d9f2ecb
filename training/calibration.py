"""Fitting the conformal calibration tables on out-of-fold residuals.

Calibration runs crepes' conformal predictive system on out-of-fold
residuals, one Mondrian bin per category (architecture, network tier, or the
kind of what-if for speedups; the bin chains are the runtime's,
:mod:`predictor.calibration`). What is stored is each bin's conformal
predictive distribution at y_hat = 0, as percentile tables.

A bin with fewer than :data:`MIN_BIN_SIZE` residuals falls back to its parent.

Residuals may carry weights (crepes takes none): a bin's table is then the
weighted split-conformal distribution (Tibshirani et al. 2019,
arXiv:1904.06019) with the effective sample size (sum w)^2 / sum w^2 in the
finite-sample correction, read by numpy's weighted quantile.
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


def fit_table(residuals: np.ndarray, keys: Sequence[Sequence[str]], weights: np.ndarray | None = None) -> CalibrationTable:
    """Calibrate on out-of-fold log residuals; ``keys`` gives each row's bin chain, finest first.

    Every level of every chain with at least :data:`MIN_BIN_SIZE` residuals
    gets its own table, and the pooled bin always does. ``weights`` (positive,
    one per residual) weigh the residuals inside each bin; counts stay counts.
    """
    residuals = np.asarray(residuals, float)
    if weights is not None:
        weights = np.asarray(weights, float)
        if weights.shape != residuals.shape or not np.all(np.isfinite(weights) & (weights > 0)):
            raise ValueError("weights: one positive finite weight per residual")
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
        if weights is None:
            lower[name], upper[name] = _conformal_percentiles(residuals[rows], low_grid)
        else:
            lower[name], upper[name] = weighted_conformal_percentiles(residuals[rows], weights[rows], low_grid)
        counts[name] = len(rows)
    return CalibrationTable(lower, upper, counts)


def _conformal_percentiles(residuals: np.ndarray, percentiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """crepes' conformal predictive distribution at y_hat = 0: conservative lower and upper percentiles."""
    from crepes import ConformalPredictiveSystem

    cps = ConformalPredictiveSystem().fit(residuals)
    with warnings.catch_warnings():
        # Extreme percentiles of small bins are unresolvable; crepes warns, the tables hold the extreme value.
        warnings.simplefilter("ignore")
        low = cps.predict(np.zeros(1), lower_percentiles=percentiles, smoothing=False)[0]
        high = cps.predict(np.zeros(1), higher_percentiles=percentiles, smoothing=False)[0]
    # Percentiles beyond what n residuals can resolve come back infinite: hold the last finite value.
    return _hold_finite(np.asarray(low, float)), _hold_finite(np.asarray(high, float))


def weighted_conformal_percentiles(residuals: np.ndarray, weights: np.ndarray, percentiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Conservative lower and upper percentiles of weighted residuals.

    With n_eff = (sum w)^2 / sum w^2, the upper table at level p is the
    weighted quantile at p (n_eff + 1) / n_eff, and the lower one its mirror
    (the upper table of the negated residuals at 1 - p); a level n_eff cannot
    resolve takes the extreme residual. Equal weights give crepes'
    unweighted tables, but for a level that falls on a step of the
    distribution, where rounding may pick the neighbouring residual in either.
    """
    w = weights / weights.sum()
    grow = 1.0 + float(np.sum(w**2))  # (n_eff + 1) / n_eff
    level = np.asarray(percentiles, float) / 100.0

    def upper(values: np.ndarray, at: np.ndarray) -> np.ndarray:
        # A level on a step of the weighted CDF, up to rounding, takes that step (crepes does at equal weights).
        return np.asarray(np.quantile(values, np.clip(at * grow - 1e-9, 0.0, 1.0), weights=w, method="inverted_cdf"), float)

    return -upper(-residuals, 1.0 - level), upper(residuals, level)


def _hold_finite(values: np.ndarray) -> np.ndarray:
    finite = np.isfinite(values)
    if not finite.any():
        return np.zeros_like(values)
    idx = np.flatnonzero(finite)
    return np.interp(np.arange(len(values)), idx, values[idx])
