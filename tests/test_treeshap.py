"""Exact TreeSHAP tree by tree, once per path pattern, equals XGBoost's own ``pred_contribs``."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from predictor.treeshap import distinct_patterns, grouped_shap, tree_splits

GROUPS = np.array([[1, 0], [1, 0], [0, 1], [0, 1], [0, 1]], dtype=float)  # 5 features in 2 groups
NAMES = [f"f{i}" for i in range(5)]


def _model(**params) -> tuple[xgb.Booster, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 5)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values take each split's default side
    y = np.nansum(x[:, :2], axis=1) * 2 + np.where(np.isnan(x[:, 3]), 1.0, x[:, 3] ** 2) + rng.normal(scale=0.1, size=600)
    booster = xgb.train({"max_depth": 5, "eta": 0.3, **params}, xgb.DMatrix(x, y, feature_names=NAMES), num_boost_round=40)
    return booster, x


def _reference(booster: xgb.Booster, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    contributions = booster.predict(xgb.DMatrix(values, feature_names=NAMES), pred_contribs=True)
    return contributions[:, :-1] @ GROUPS, contributions[:, -1]


def _rows(x: np.ndarray, booster: xgb.Booster, n: int) -> np.ndarray:
    """Rows drawn from the training values, some set exactly on a split threshold, some missing."""
    rng = np.random.default_rng(1)
    rows = x[rng.integers(0, len(x), n)].copy()
    splits = tree_splits(booster) or []
    on_threshold = rng.random(n) < (0.3 if splits else 0.0)
    for i in np.flatnonzero(on_threshold):
        tree = splits[rng.integers(len(splits))]
        k = rng.integers(len(tree.feature))
        rows[i, tree.feature[k]] = tree.threshold[k]  # equal to the threshold: XGBoost sends it right
    return rows


def test_tree_by_tree_equals_one_pred_contribs_call():
    booster, x = _model()
    rows = _rows(x, booster, 5_000)
    grouped, base = grouped_shap(booster, rows, GROUPS, NAMES)
    reference, reference_base = _reference(booster, rows)
    np.testing.assert_allclose(grouped, reference, atol=2e-5)
    np.testing.assert_allclose(base, reference_base, atol=1e-6)


def test_each_pattern_once_and_every_row_mapped_to_its_own():
    booster, x = _model()
    rows = _rows(x, booster, 5_000)
    distinct_rows = len(np.unique(rows.view(np.uint32), axis=0))
    for tree in tree_splits(booster):
        left = tree.patterns(rows)
        first, inverse = distinct_patterns(left)
        assert (left[first][inverse] == left).all()
        assert len(np.unique(left, axis=0)) == len(first) < distinct_rows


def test_more_than_64_splits_in_a_tree():
    booster, x = _model(max_depth=8)
    splits = tree_splits(booster)
    assert max(len(t.feature) for t in splits) > 64  # patterns of several words
    rows = _rows(x, booster, 3_000)
    np.testing.assert_allclose(grouped_shap(booster, rows, GROUPS, NAMES)[0], _reference(booster, rows)[0], atol=2e-5)


def test_several_trees_a_round_fall_back_to_one_call():
    booster, x = _model(num_parallel_tree=2, subsample=0.8)
    assert tree_splits(booster) is None
    rows = _rows(x, booster, 3_000)
    np.testing.assert_allclose(grouped_shap(booster, rows, GROUPS, NAMES)[0], _reference(booster, rows)[0], atol=2e-5)


@pytest.mark.parametrize("n", [1, 10])
def test_small_inputs(n):
    booster, x = _model()
    rows = x[:n]
    np.testing.assert_allclose(grouped_shap(booster, rows, GROUPS, NAMES)[0], _reference(booster, rows)[0], atol=1e-6)
