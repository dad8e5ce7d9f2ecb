"""The share of the learned correction an unseen fact keeps: chosen on held-out values of the fact."""

from __future__ import annotations

import numpy as np
import pytest

from predictor.domain import FACTS, fact_codes
from training.shrink import SHARE_GRID, best_share, estimate_shrink, fact_names


def test_a_correction_that_is_half_right_keeps_half():
    correction = np.array([0.4, -0.2, 0.6, 0.1])
    share, mape = best_share(0.5 * correction, correction, np.ones(4))
    assert share == 0.5
    assert mape[SHARE_GRID.tolist().index(0.5)] == pytest.approx(0.0, abs=1e-12)
    # At share 0 the error is the physics' own: |exp(-0.5 c) - 1|, averaged.
    assert mape[0] == pytest.approx(np.mean(np.abs(np.expm1(-0.5 * correction))))


def test_a_correction_that_only_adds_noise_keeps_nothing_and_ties_go_to_the_physics():
    rng = np.random.default_rng(0)
    share, _ = best_share(np.zeros(200), rng.normal(0, 0.3, 200), np.ones(200))
    assert share == 0.0
    assert best_share(np.zeros(3), np.zeros(3), np.ones(3))[0] == 0.0  # every share equal: the smallest
    assert best_share(np.array([0.3, 0.3]), np.array([0.3, 0.3]), np.ones(2))[0] == 1.0


def test_weights_decide_between_values():
    """Two held-out values: one wants the full correction, the other none; the heavier one wins."""
    measured = np.array([0.4, 0.0])
    correction = np.array([0.4, 0.4])
    assert best_share(measured, correction, np.array([3.0, 1.0]))[0] == 1.0
    assert best_share(measured, correction, np.array([1.0, 3.0]))[0] == 0.0


@pytest.fixture(scope="module")
def testbed_dataset(testbed_runs):
    from training.dataset import build_dataset

    return build_dataset(testbed_runs)


def test_each_fold_predicts_values_its_fit_never_saw(testbed_dataset, monkeypatch):
    """Per fact, every held-out row is predicted by a fit that holds none of the row's fact value."""
    import training.shrink as shrink

    ds = testbed_dataset
    facts = fact_codes(ds.resolved)
    calls = []
    real = shrink.ResidualRegressor

    class Spy(real):
        def fit(self, X, y, sample_weight=None, feature_names=None):
            calls.append({"fit": X.copy()})
            return super().fit(X, y, sample_weight=sample_weight, feature_names=feature_names)

        def predict(self, X):
            calls[-1]["predict"] = X.copy()
            return super().predict(X)

    monkeypatch.setattr(shrink, "ResidualRegressor", Spy)
    estimates = estimate_shrink(ds, {"max_depth": 3, "eta": 0.3}, 10)
    # The testbed has one framework and one model family: nothing to hold out there.
    assert set(estimates) == {label for label in FACTS if len(set(fact_names(facts, label))) >= 2}
    assert "framework" not in estimates and "model family" not in estimates
    rows = {tuple(r) for r in ds.features.values}
    assert len(rows) == len(ds), "rows must be distinct to be traced"
    index = {tuple(r): i for i, r in enumerate(ds.features.values)}
    call = iter(calls)
    for label, estimate in estimates.items():
        codes = fact_names(facts, label)
        predicted = []
        for _ in range(min(3, estimate.values)):
            c = next(call)
            fit_rows = [index[tuple(r)] for r in c["fit"]]
            test_rows = [index[tuple(r)] for r in c["predict"]]
            assert not set(codes[fit_rows]) & set(codes[test_rows]), label
            assert len(fit_rows) + len(test_rows) == len(ds)
            predicted += test_rows
        assert sorted(predicted) == list(range(len(ds))) and estimate.rows == len(ds)
        assert estimate.share in SHARE_GRID and 0.0 <= estimate.share <= 1.0
