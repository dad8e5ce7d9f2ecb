"""Grouped cross-validation of the residual model and of its baselines.

No row of a group is ever in the validation fold of a model trained on
another row of that group: groups are GPU types (Lambda, DeepLearningExamples,
DLPerf, the TensorFlow benchmarks), benchmarks (MLPerf, every round) or
topologies (testbed), so a score says how the model does on
hardware or a workload it has not seen.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from sklearn.model_selection import GroupKFold

from training.dataset import Dataset
from training.model import ResidualRegressor


def group_folds(groups: np.ndarray, n_splits: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Train/validation index pairs with whole groups in each validation fold (none for one group)."""
    n_groups = len(np.unique(groups))
    if n_groups < 2:
        return []
    splitter = GroupKFold(n_splits=min(n_splits, n_groups))
    return list(splitter.split(np.zeros(len(groups)), groups=groups))


def leave_one_group_out(groups: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """One fold per group: train on all other groups, validate on it."""
    out = []
    for group in np.unique(groups):
        held = groups == group
        out.append((np.flatnonzero(~held), np.flatnonzero(held)))
    return out


def sample_weights(groups: np.ndarray) -> np.ndarray:
    """Weights that make each group count as the square root of its size.

    One GPU type (the H100 SXM) holds 40 % of the public runs; without
    weights the model would be tuned for it alone.
    """
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    weights = 1.0 / np.sqrt(counts[inverse])
    return weights * len(weights) / weights.sum()


def out_of_fold(
    ds: Dataset,
    folds: list[tuple[np.ndarray, np.ndarray]],
    params: dict,
    num_boost_round: int,
    on_fold: Callable[[int, np.ndarray], None] | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Out-of-fold predicted log residuals (NaN for rows in no validation fold); ``seed`` seeds XGBoost's row and column sampling."""
    out = np.full(len(ds), np.nan)
    X, y = ds.features.values, ds.residual
    weights = sample_weights(ds.group)
    for k, (train, valid) in enumerate(folds):
        model = ResidualRegressor(params=params, num_boost_round=num_boost_round, seed=seed)
        model.fit(X[train], y[train], sample_weight=weights[train], feature_names=ds.features.names)
        out[valid] = model.predict(X[valid])
        if on_fold is not None:
            on_fold(k, out)
    return out


def ape(log_predicted_s: np.ndarray, log_measured_s: np.ndarray) -> np.ndarray:
    """Absolute percentage error of step time per row, as a fraction."""
    return np.abs(np.exp(log_predicted_s - log_measured_s) - 1.0)
