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


def test_no_held_out_value_of_ten_runs_may_lose_more_than_two_points_to_the_physics():
    """100 runs where the correction is right, 10 where it is wrong: the 10 hold the share at the physics.

    At share s the ten runs are off by exp(0.5 s) - 1: 2.5% at s = 0.05, past the 2 points allowed
    over their physics error (0), so only s = 0 keeps the rule; without groups s = 1 wins
    (mean error 10 x 0.649 / 110 = 0.059 against 0.358 at s = 0).
    """
    measured = np.r_[np.full(100, 0.5), np.zeros(10)]
    correction = np.full(110, 0.5)
    weights = np.ones(110)
    assert best_share(measured, correction, weights)[0] == 1.0
    assert best_share(measured, correction, weights, np.r_[np.zeros(100), np.ones(10)])[0] == 0.0
    # Nine runs are too few to be judged: they do not constrain.
    assert best_share(measured[:109], correction[:109], weights[:109], np.r_[np.zeros(100), np.ones(9)])[0] == 1.0
    # Harm within the margin is allowed: a correction of 0.03 costs the ten runs 3% at s = 1, 1.5% at s = 0.5.
    small = np.r_[np.full(100, 0.03), np.zeros(10)]
    assert best_share(small, np.full(110, 0.03), weights, np.r_[np.zeros(100), np.ones(10)])[0] == 0.65


def test_a_gain_that_depends_on_which_values_were_held_out_is_noise():
    """Four held-out values of 9 runs (too few for the no-harm rule): the correction is right on two, wrong on two.

    Share 1 has the least mean error (0.0809 against 0.0906 at share 0) but the 0.0097 gain is well inside
    one standard error of the values' spread (0.099: the two halves disagree by 0.16-0.18 each), so the
    share stays at the physics. Had every value gained alike, the full share stays.
    """
    right, wrong = np.full(9, 0.2), np.full(9, 0.15)
    measured = np.r_[right, right, np.zeros(18)]
    correction = np.r_[right, right, wrong, wrong]
    values = np.repeat([0, 1, 2, 3], 9)
    share, mape = best_share(measured, correction, np.ones(36), values)
    assert SHARE_GRID[int(np.argmin(mape))] == 1.0
    assert mape[0] - mape.min() == pytest.approx((2 * 0.1813 - 2 * 0.1618) / 4, abs=1e-3)
    assert share == 0.0
    assert best_share(np.r_[right, right, right, right], np.r_[right, right, right, right], np.ones(36), values)[0] == 1.0


def test_the_standard_error_is_the_spread_of_the_values_changes():
    """Hand-computed: changes 1.632, 1.632, -1.456, -1.456 on weights 9 each -> sqrt(4/3 x sum of squares) / 36."""
    from training.shrink import _group_standard_error

    change = np.array([[9 * 0.1813, 9 * 0.1813, -9 * 0.1618, -9 * 0.1618]])
    mean = change.sum() / 36
    expected = np.sqrt(4 / 3 * ((change[0] - mean * 9) ** 2).sum()) / 36
    assert _group_standard_error(change, np.full(4, 9.0))[0] == pytest.approx(expected)
    assert expected == pytest.approx(0.0992, abs=1e-3)
    assert _group_standard_error(change[:, :1], np.full(1, 9.0))[0] == 0.0  # one value: no spread to measure


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


def test_each_what_if_kind_keeps_the_share_its_out_of_fold_pairs_support():
    """Pairs of one kind whose correction change is exactly right keep all of it; a kind whose change
    is noise around a right physics keeps none; a kind of a few comparable pairs keeps all of it (no
    evidence), and pairs across groups count for nothing."""
    from predictor.calibration import POOLED, pair_share
    from training.shrink import MIN_PAIRS_PER_KIND, pair_shares

    rng = np.random.default_rng(0)
    n = 200
    right = rng.normal(0, 0.2, n)  # measured minus physics log speedup, and the correction's change: equal
    noise = rng.normal(0, 0.2, n)  # the physics is right; the correction's change is noise
    few = MIN_PAIRS_PER_KIND - 1
    kinds = np.array(["precision"] * n + ["intra_node_link"] * n + ["network"] * few + ["gpu"] * n, object)
    measured = np.concatenate([right, np.zeros(n), np.full(few, 0.1), np.zeros(n)])
    correction = np.concatenate([right, noise, np.full(few, -0.1), noise])
    comparable = kinds != "gpu"  # GPU swaps pair runs of two groups
    shares = pair_shares(kinds, measured, correction, comparable)
    assert shares["precision"] == 1.0 and shares["intra_node_link"] == 0.0
    assert shares["network"] == shares["gpu"] == 1.0
    pooled, _ = best_share(measured[comparable], correction[comparable], np.ones(comparable.sum()))
    assert shares[POOLED] == pooled
    assert list(pair_share(shares, np.array(["precision", "gpu", "mixed"], object))) == [1.0, 1.0, shares[POOLED]]
    assert list(pair_share(None, np.array(["gpus"], object))) == [1.0]


def test_a_held_out_model_takes_the_other_layouts_of_its_network_with_it():
    """BERT-large padded, unpadded, binned and at 128 tokens are one value of the model fact; ResNet-50 another."""
    from features.resolve import resolve
    from features.table import table_from_rows

    models = ["bert-large", "bert-large-seq128", "bert-large-binned", "bert-large-unpadded", "resnet50"]
    rows = [{"model": m, "gpu": "V100", "architecture": "single"} for m in models]
    names = fact_names(fact_codes(resolve(table_from_rows(rows))), "model")
    assert list(names) == ["bert-large"] * 4 + ["resnet50"]


def test_accumulated_steps_are_one_value_per_network_and_single_passes_none():
    """The accumulation x model fact checks accumulated steps only, its model side held out by network as the model is."""
    from features.resolve import resolve
    from features.table import table_from_rows

    rows = [
        {"model": "bert-large", "batch_size_per_gpu": 4096, "gradient_accumulation_steps": 128},
        {"model": "bert-large-seq128", "batch_size_per_gpu": 8192, "gradient_accumulation_steps": 64},
        {"model": "resnet50", "batch_size_per_gpu": 256, "gradient_accumulation_steps": 4},
        {"model": "resnet50", "batch_size_per_gpu": 256, "gradient_accumulation_steps": 1},
        {"model": "resnet50", "batch_size_per_gpu": 256},
    ]
    rows = [{**r, "gpu": "V100", "architecture": "single"} for r in rows]
    names = fact_names(fact_codes(resolve(table_from_rows(rows))), "accumulation x model")
    assert list(names) == ["accumulated x bert-large", "accumulated x bert-large", "accumulated x resnet50", None, None]
