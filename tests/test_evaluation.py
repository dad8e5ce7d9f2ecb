"""The evaluation code itself: summary figures, the no-harm table, and what reaches each fit."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from training.evaluate import HeldOut, losses_within_groups, pair_summary, step_summary
from training.report import Evaluation, evaluation_summary, no_harm_violations, write_report


@dataclass
class Scores:
    """The fields of a dataset that scoring reads: measured and analytical log step times."""

    log_measured_s: np.ndarray
    log_analytical_s: np.ndarray
    baseline: str = "overlapped"

    def __len__(self) -> int:
        return len(self.log_measured_s)


def synthetic_evaluation() -> tuple[Evaluation, Scores]:
    """23 scored runs in three held-out groups plus one unscored run; every measured time is 1 s.

    A (10 runs): physics 1.10 s (10%), pure ML 1.20 s (20%), residual 1.05 s (5%); intervals
      0.21 s wide (20% of 1.05 s), 8 of them [0.95, 1.16] cover 1 s, 2 are [1.01, 1.22] and miss.
    B (10 runs): physics 0.95 s (5%), pure ML 1.00 s (0%), residual 1.10 s (10%: breaks the rule,
      10 > 5 + 2); intervals [0.9, 1.3] cover, width 0.4 / 1.1.
    C (3 runs): physics 1.00 s, pure ML 1.00 s, residual 1.50 s (50%, but n < 10: not judged);
      intervals [0.5, 2.0] cover, width 100%.
    """
    rows = (
        [("A", 1.10, 1.20, 1.05, 0.95, 1.16)] * 8
        + [("A", 1.10, 1.20, 1.05, 1.01, 1.22)] * 2
        + [("B", 0.95, 1.00, 1.10, 0.90, 1.30)] * 10
        + [("C", 1.00, 1.00, 1.50, 0.50, 2.00)] * 3
        + [(None, 1.00, np.nan, np.nan, np.nan, np.nan)]
    )
    group, analytical, pure_ml, residual, lower, upper = (np.array(c, object if i == 0 else float) for i, c in enumerate(zip(*rows)))
    scores = Scores(np.zeros(len(rows)), np.log(analytical))
    result = HeldOut("synthetic", group, np.log(residual), np.log(pure_ml), lower, upper, np.log(analytical))
    pairs = pd.DataFrame(
        {
            "group": "A",
            "kind": ["gpus", "gpus", "network"],
            "measured_speedup": [2.0, 2.0, 1.5],
            "predicted_speedup": [1.8, 2.2, 1.5],
            "analytical_speedup": [1.0, 3.0, 1.5],
            "lower": [1.5, 2.1, np.nan],  # the network pair has no calibrated interval
            "upper": [2.5, 2.8, np.nan],
        }
    )
    steps = {"synthetic, leave one group out": step_summary(scores, result, group)}
    return Evaluation(steps, pair_summary([pairs]), pd.DataFrame(), 1.0), scores


def test_summary_figures_are_the_hand_computed_percentages():
    ev, _ = synthetic_evaluation()
    summary = evaluation_summary(ev)
    protocol = summary["protocols"]["synthetic, leave one group out"]
    a, b, c = (protocol["groups"][g] for g in "ABC")
    assert a == pytest.approx({"n": 10, "physics_mape": 10.0, "pure_ml_mape": 20.0, "residual_mape": 5.0, "coverage": 80.0, "mean_relative_width": 20.0})
    assert b == pytest.approx({"n": 10, "physics_mape": 5.0, "pure_ml_mape": 0.0, "residual_mape": 10.0, "coverage": 100.0, "mean_relative_width": 100 * 0.4 / 1.1})
    assert c == pytest.approx({"n": 3, "physics_mape": 0.0, "pure_ml_mape": 0.0, "residual_mape": 50.0, "coverage": 100.0, "mean_relative_width": 100.0})
    # The unscored run counts nowhere: 23 runs, weighted by group size.
    assert protocol["all"] == pytest.approx(
        {
            "n": 23,
            "physics_mape": 100 * (10 * 0.10 + 10 * 0.05) / 23,
            "pure_ml_mape": 100 * (10 * 0.20) / 23,
            "residual_mape": 100 * (10 * 0.05 + 10 * 0.10 + 3 * 0.50) / 23,
            "coverage": 100 * 21 / 23,
            "mean_relative_width": 100 * (10 * 0.2 + 10 * 0.4 / 1.1 + 3 * 1.0) / 23,
        }
    )
    # Speedups: APE of 1.8 and 2.2 against 2.0 is 10%; of 1.0 and 3.0, 50%; one of two intervals covers.
    assert summary["speedups"]["gpus"] == pytest.approx(
        {"n": 2, "physics_mape": 50.0, "pure_ml_mape": None, "residual_mape": 10.0, "coverage": 50.0,
         "mean_relative_width": 100 * (1.0 / 1.8 + 0.7 / 2.2) / 2}
    )
    # No interval at all: coverage and width are undefined, not 0 and not NaN.
    assert summary["speedups"]["network"]["coverage"] is None
    assert summary["speedups"]["network"]["mean_relative_width"] is None
    assert summary["speedups"]["network"]["residual_mape"] == pytest.approx(0.0)


def test_speedup_coverage_per_held_out_group_counts_groups_of_enough_pairs():
    """Three held-out groups: X with 40 gpus pairs of which 30 covered (75%: below), Y with 50 of which
    45 covered (90%: within), Z with 10 pairs (too few to judge alone, but in the pooled figure). A covered
    pair's interval is 50% of the prediction wide, a missed one 25%."""
    from training.evaluate import pair_group_summary

    def frame(group, n, covered):
        inside = np.arange(n) < covered
        return pd.DataFrame({
            "group": group, "kind": "gpus", "measured_speedup": 2.0, "predicted_speedup": 2.0, "analytical_speedup": 2.0,
            "lower": np.where(inside, 1.5, 2.5), "upper": np.where(inside, 2.5, 3.0),
        })  # fmt: skip

    frames = [frame("X", 40, 30), frame("Y", 50, 45), frame("Z", 10, 0)]
    groups = pair_group_summary(frames)
    assert groups[["group", "pairs"]].values.tolist() == [["X", 40], ["Y", 50]]
    assert groups["coverage"].tolist() == pytest.approx([0.75, 0.9])
    row = pair_summary(frames).iloc[0]
    assert row["coverage"] == pytest.approx(75 / 100)
    assert (row["groups"], row["groups_below"], row["groups_within"], row["groups_above"]) == (2, 1, 1, 0)
    assert row["group_coverage_gap"] == pytest.approx((0.15 + 0.0) / 2)
    summary = evaluation_summary(Evaluation({}, pair_summary(frames), pd.DataFrame(), 1.0, pair_groups=groups))
    assert summary["speedup_groups"]["gpus"]["X"] == pytest.approx({"n": 40, "coverage": 75.0, "mean_relative_width": (30 * 50.0 + 10 * 25.0) / 40})


def test_no_harm_lists_exactly_the_groups_that_break_it():
    ev, _ = synthetic_evaluation()
    violations = evaluation_summary(ev)["no_harm_violations"]
    # B breaks it (10% > 5% + 2); C is worse still but has 3 runs; A gains.
    assert len(violations) == 1
    assert violations[0] == pytest.approx(
        {"protocol": "synthetic, leave one group out", "group": "B", "n": 10, "residual_mape": 10.0, "physics_mape": 5.0}
    )


@pytest.mark.parametrize(
    ("n", "residual_mape", "physics_mape", "broken"),
    [(10, 7.0, 5.0, False), (10, 7.01, 5.0, True), (9, 50.0, 5.0, False), (30, None, 5.0, False), (30, 4.0, 20.0, False)],
)
def test_no_harm_boundary(n, residual_mape, physics_mape, broken):
    """At most physics + 2 points is allowed; groups under 10 runs and undefined figures are not judged."""
    stats = {"n": n, "residual_mape": residual_mape, "physics_mape": physics_mape}
    found = no_harm_violations({"p": {"all": None, "groups": {"g": stats}}})
    assert bool(found) is broken


def test_report_writes_strict_json_and_a_generated_no_harm_table(tmp_path):
    ev, scores = synthetic_evaluation()
    path = write_report(ev, tmp_path, scores, {"max_depth": 3}, 10)

    def no_constants(name):
        raise AssertionError(f"summary.json holds {name}")

    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=no_constants)
    assert summary == json.loads(json.dumps(evaluation_summary(ev)))
    report = path.read_text()
    section = report[report.index("## No-harm rule"):]
    assert "Groups that break it (1):" in section
    assert "| synthetic, leave one group out | B | 10 | 10.0% | 5.0% |" in section
    assert "| C |" not in section


# --- What reaches fitting and calibration -----------------------------------------------------

FAST_PARAMS = {"max_depth": 3, "eta": 0.3}
FAST_ROUNDS = 10


@pytest.fixture(scope="module")
def testbed_dataset(testbed_runs):
    from training.dataset import build_dataset

    return build_dataset(testbed_runs.assign(row_id=np.arange(len(testbed_runs))))


@pytest.fixture
def spied(monkeypatch):
    """Record the runs (by row_id) that reach the residual fit (with its calibration) and the pure-ML fit."""
    import training.evaluate as evaluate

    seen = {"residual": [], "pure_ml": [], "calibration_rows": [], "shrink": []}
    real_fit, real_pure_ml, real_shrink = evaluate.fit_calibrated, evaluate._pure_ml, evaluate.estimate_shrink

    def fit_calibrated(sub, *args, **kwargs):
        seen["residual"].append(set(sub.runs["row_id"]))
        fitted = real_fit(sub, *args, **kwargs)
        seen["calibration_rows"].append(fitted[0].calibration_.counts["all"])
        return fitted

    def pure_ml(train, test, *args, **kwargs):
        seen["pure_ml"].append(set(train.runs["row_id"]))
        return real_pure_ml(train, test, *args, **kwargs)

    def estimate_shrink(train, *args, **kwargs):
        seen["shrink"].append(set(train.runs["row_id"]))
        return real_shrink(train, *args, **kwargs)

    monkeypatch.setattr(evaluate, "fit_calibrated", fit_calibrated)
    monkeypatch.setattr(evaluate, "_pure_ml", pure_ml)
    monkeypatch.setattr(evaluate, "estimate_shrink", estimate_shrink)
    return seen


def test_held_out_group_and_its_partner_never_reach_fitting_or_calibration(testbed_dataset, spied):
    """Leave one tier out; the one-host AllReduce runs are tied to 'emulated-1g' and must leave with it."""
    from training.evaluate import held_out

    ds = testbed_dataset
    network = ds.runs["network"].astype(object).where(ds.runs["network"].notna(), None).to_numpy(object)
    architecture = ds.runs["architecture"].astype(str).to_numpy(object)
    partner = np.where(architecture == "allreduce-local", "emulated-1g", None)
    row_id = ds.runs["row_id"].to_numpy()
    result = held_out(ds, "tier", network, network != None, FAST_PARAMS, FAST_ROUNDS, exclude=partner)  # noqa: E711

    tiers = list(pd.unique(network[network != None]))  # noqa: E711
    assert len(spied["residual"]) == len(spied["pure_ml"]) == len(spied["shrink"]) == len(tiers) == 4
    for tier, fitted, pure, calibrated, shrunk in zip(tiers, spied["residual"], spied["pure_ml"], spied["calibration_rows"], spied["shrink"]):
        held = set(row_id[network == tier])
        tied = set(row_id[partner == tier])
        expected = set(row_id) - held - tied
        # The share an unseen fact keeps is estimated on the training fold alone.
        assert fitted == expected and pure == expected and shrunk == expected, tier
        assert not fitted & held and not fitted & tied
        # The conformal table saw exactly the training runs' out-of-fold residuals.
        assert calibrated == len(expected)
        assert (result.group[network == tier] == tier).all()
    # Partners leave training but are scored by no one; one-host single runs stay in every fit.
    assert (result.group[network == None] == None).all()  # noqa: E711
    single = set(row_id[architecture == "single"])
    assert all(single <= fitted for fitted in spied["residual"])
    scored = result.scored
    assert np.isfinite(result.log_residual_model_s[scored]).all() and np.isfinite(result.log_pure_ml_s[scored]).all()
    assert np.isnan(result.log_residual_model_s[~scored]).all()


def test_pairs_are_held_out_together(testbed_dataset, spied):
    """Configurations in folds: both runs of every tier pair sit in one held-out fold, never in its fit."""
    from training.evaluate import held_out
    from training.pairs import make_pairs
    from training.report import _folds_of, _testbed_config

    ds = testbed_dataset
    config = _folds_of(_testbed_config(ds.runs, drop=("network",)))
    result = held_out(ds, "config", config, np.full(len(ds), True), FAST_PARAMS, FAST_ROUNDS, pair_kinds=("network",))
    every_pair = make_pairs(ds.runs, ds.resolved.total_gpus)
    every_pair = every_pair[every_pair["kind"] == "network"]
    row_id = ds.runs["row_id"].to_numpy()
    assert len(every_pair) > 0
    # No pair straddles two folds ...
    assert (config[every_pair["a"]] == config[every_pair["b"]]).all()
    # ... so each fold scores exactly its own pairs, and none of their runs reached that fold's fit.
    frames = {frame["group"].iloc[0]: frame for frame in result.pair_frames if len(frame)}
    for fold, fitted in zip(pd.unique(config), spied["residual"]):
        own = every_pair[config[every_pair["a"]] == fold]
        assert len(frames.get(fold, [])) == len(own), fold
        assert not fitted & set(row_id[own["a"]]) and not fitted & set(row_id[own["b"]])
    assert sum(len(f) for f in frames.values()) == len(every_pair)


def test_few_shot_prior_leaves_out_the_gpu_type_it_scores():
    """A type whose held-out residuals are all r: the refit offset is k r / (k + kappa), kappa from the other types only."""
    from training.refit import random_effects_kappa
    from training.report import FEW_SHOT_K, few_shot_refit

    r = 0.3
    wobble = np.tile([-0.05, 0.0, 0.05, 0.1, -0.1], 4)  # 20 runs per type
    residual = np.concatenate([np.full(20, r), 0.1 + wobble, -0.2 + 2 * wobble])
    groups = np.repeat(np.array(["A", "B", "C"], object), 20)
    scores = Scores(residual, np.zeros(60))
    result = HeldOut("gpu", groups.copy(), np.zeros(60), np.zeros(60), np.ones(60), np.ones(60), np.zeros(60))
    frame = few_shot_refit(scores, result, groups)
    kappa = random_effects_kappa(residual[20:], groups[20:])
    assert kappa != pytest.approx(random_effects_kappa(residual, groups))  # the test can tell the two apart
    for k in FEW_SHOT_K:
        row = frame[(frame["group"] == "A") & (frame["k"] == k)].iloc[0]
        assert row["mape_no_refit"] == pytest.approx(abs(np.exp(-r) - 1))
        assert row["mape_refit"] == pytest.approx(abs(np.exp(-(r - k * r / (k + kappa))) - 1))


# --- Interval coverage, two-sided --------------------------------------------------------------


def test_mondrian_intervals_cover_nominal_in_each_bin_neither_more_nor_less():
    """Two bins with residual spreads 0.05 and 0.4 (log scale), calibrated on 3,000 residuals each.

    Fresh exchangeable draws (20,000 per bin) must be covered 90% +- 2.5 points in each bin: the
    binomial sd of the test share is 0.2 points, the calibration draw's own sd 0.55 points, and
    percentile interpolation of the stored table adds under 0.5 point. A pooled interval would
    cover the narrow bin ~100% and the wide bin ~60%, and fail on both sides.
    """
    from predictor.calibration import POOLED
    from training.calibration import fit_table

    rng = np.random.default_rng(1)
    scales = {"narrow": 0.05, "wide": 0.4}
    residuals = np.concatenate([rng.standard_t(5, 3000) * s for s in scales.values()])
    keys = [(name, POOLED) for name in scales for _ in range(3000)]
    table = fit_table(residuals, keys)
    for name, scale in scales.items():
        truth = rng.standard_t(5, 20000) * scale
        y_hat = np.zeros(len(truth))
        low, high = table.interval(y_hat, table.bin_for([(name, POOLED)] * len(truth)), 0.9)
        coverage = np.mean((truth >= low) & (truth <= high))
        assert abs(coverage - 0.9) <= 0.025, (name, coverage)
        pooled_low, pooled_high = table.interval(y_hat, np.full(len(truth), POOLED, object), 0.9)
        pooled = np.mean((truth >= pooled_low) & (truth <= pooled_high))
        assert abs(pooled - 0.9) > 0.025, (name, pooled)  # the check would catch an unbinned table


def test_equal_weights_give_crepes_tables():
    """The weighted path with every weight equal is the unweighted conformal distribution, percentile for percentile."""
    from predictor.calibration import POOLED
    from training.calibration import fit_table

    residuals = np.random.default_rng(2).normal(0.0, 0.2, 457)
    keys = [(POOLED,)] * len(residuals)
    plain, weighted = fit_table(residuals, keys), fit_table(residuals, keys, np.full(len(residuals), 3.0))
    np.testing.assert_array_equal(plain.lower[POOLED], weighted.lower[POOLED])
    np.testing.assert_array_equal(plain.upper[POOLED], weighted.upper[POOLED])


def test_weighted_intervals_cover_the_population_the_weights_describe_two_sided():
    """Residuals of a large narrow group and a small wide one, each group weighted to count alike: a new job
    drawn from either group with equal chance is covered 90% +- 2.5 points; the unweighted table, sized
    by the large group, covers it outside that band."""
    from predictor.calibration import POOLED
    from training.calibration import fit_table

    rng = np.random.default_rng(3)
    sizes, scales = (9000, 1000), (0.05, 0.4)
    residuals = np.concatenate([rng.normal(0.0, s, n) for n, s in zip(sizes, scales)])
    weights = np.concatenate([np.full(n, 1.0 / n) for n in sizes])
    keys = [(POOLED,)] * len(residuals)
    truth = np.concatenate([rng.normal(0.0, s, 20000) for s in scales])
    bins = np.full(len(truth), POOLED, object)
    for table, inside in ((fit_table(residuals, keys, weights), True), (fit_table(residuals, keys), False)):
        low, high = table.interval(np.zeros(len(truth)), bins, 0.9)
        coverage = np.mean((truth >= low) & (truth <= high))
        assert (abs(coverage - 0.9) <= 0.025) == inside, coverage


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-3, 3), st.floats(0.01, 100)), min_size=1, max_size=60),
    st.floats(0.1, 1000),
)
def test_weighted_percentiles_are_ordered_bounded_and_free_of_the_weights_scale(rows, scale):
    from predictor.calibration import PERCENTILES
    from training.calibration import weighted_conformal_percentiles

    residuals, weights = (np.array(c, float) for c in zip(*rows))
    low, high = weighted_conformal_percentiles(residuals, weights, PERCENTILES)
    assert np.all(low <= high) and np.all(np.diff(low) >= 0) and np.all(np.diff(high) >= 0)
    assert residuals.min() <= low.min() and high.max() <= residuals.max()
    scaled = weighted_conformal_percentiles(residuals, weights * scale, PERCENTILES)
    np.testing.assert_allclose(scaled, (low, high))


@pytest.mark.parametrize("weights", [np.array([1.0, 0.0, 1.0]), np.array([1.0, np.nan, 1.0]), np.ones(2)])
def test_calibration_weights_must_be_one_positive_finite_per_residual(weights):
    from predictor.calibration import POOLED
    from training.calibration import fit_table

    with pytest.raises(ValueError, match="weights"):
        fit_table(np.zeros(3), [(POOLED,)] * 3, weights)


def test_pair_weights_count_each_pair_of_groups_as_the_square_root_of_its_pairs():
    """Four pairs within one GPU type and one across two: raw weights 1/2 and 1, scaled to mean 1; a pair's
    groups are unordered."""
    from training.train import pair_weights

    a = np.array(["H100", "H100", "H100", "H100", "V100"], object)
    b = np.array(["H100", "H100", "H100", "H100", "A100"], object)
    np.testing.assert_allclose(pair_weights(a, b), [5 / 6] * 4 + [5 / 3])
    np.testing.assert_allclose(pair_weights(np.array(["V100", "A100"], object), np.array(["A100", "V100"], object)), [1.0, 1.0])


def test_speedup_calibration_weighs_pairs_by_their_groups(testbed_dataset, monkeypatch):
    """fit_calibrated hands the speedup table the pairs' group weights, and the step table the runs' (each CV
    group as the square root of its runs, as in training)."""
    import training.train as train_module

    ds = testbed_dataset
    captured = {}
    real_fit_table = train_module.ResidualRegressor.calibrate.__globals__["fit_table"]

    def fit_table(residuals, keys, weights=None):
        captured.setdefault("weights", []).append(weights)
        return real_fit_table(residuals, keys, weights)

    monkeypatch.setitem(train_module.ResidualRegressor.calibrate.__globals__, "fit_table", fit_table)
    _, _, pairs, _ = train_module.fit_calibrated(ds, {"max_depth": 3, "eta": 0.2}, 20)
    step, speedup = captured["weights"]
    np.testing.assert_allclose(step, train_module.sample_weights(ds.group))
    assert len(np.unique(np.round(step, 12))) > 1  # the testbed's topologies hold different numbers of runs
    a, b = ds.group[pairs["a"].to_numpy()], ds.group[pairs["b"].to_numpy()]
    np.testing.assert_allclose(speedup, train_module.pair_weights(a, b))
    assert len(np.unique(np.round(speedup, 12))) > 1  # the testbed's pairs come from groups of different sizes


@pytest.fixture(scope="module")
def lambda_dataset():
    """Lambda runs of three GPU types (18 each), for the roofline physics' fold-fitted constants."""
    from training.dataset import build_dataset
    from training.importers import import_lambda
    from training.sources import LAMBDA_FILE, SHARED_DATA

    if not (SHARED_DATA / LAMBDA_FILE).exists():
        pytest.skip(f"public measured runs not found at {SHARED_DATA}")
    runs = import_lambda(SHARED_DATA / LAMBDA_FILE).runs
    picked = runs[runs["gpu"].isin(["A100-SXM4-80GB", "V100-SXM2-32GB", "RTX-4090"])]
    picked = picked.groupby("gpu", group_keys=False).head(18).reset_index(drop=True)
    assert picked["gpu"].nunique() == 3, sorted(set(runs["gpu"]))
    return build_dataset(picked.assign(row_id=np.arange(len(picked))), "roofline")


def test_held_out_gpu_takes_no_part_in_the_physics_constants(lambda_dataset, monkeypatch):
    """Leave one GPU type out: its runs never reach the constant fit, and its physics alone is the fold's."""
    import training.evaluate as evaluate
    from training.physics_fit import FoldConstants, PhysicsProblem, fit_constants

    made = []

    class Recording(FoldConstants):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(evaluate, "FoldConstants", Recording)
    ds = lambda_dataset
    gpu = ds.runs["gpu"].astype(str).to_numpy(object)
    result = evaluate.held_out(ds, "gpu", gpu, np.full(len(ds), True), FAST_PARAMS, FAST_ROUNDS)

    (fold_constants,) = made
    assert len(fold_constants.fitted_on) == 3
    problem = PhysicsProblem(ds.resolved, np.exp(ds.log_measured_s))
    for name, fitted in zip(pd.unique(gpu), fold_constants.fitted_on):
        held = np.flatnonzero(gpu == name)
        assert set(fitted) == set(np.flatnonzero(gpu != name)), name
        # The physics alone scored for the held-out type is the one fitted on the other two.
        expected = np.log(problem.step_time_s(fit_constants(problem, gpu != name)))[held]
        np.testing.assert_allclose(result.log_physics_s[held], expected, rtol=1e-9)
    # Fold constants differ from one another: each fold really refits.
    assert len({tuple(np.round(c.to_dict()[k], 6) for k in sorted(c.to_dict())) for c in fold_constants._fitted.values()}) == 3


def test_unseen_facts_fade_the_correction_and_the_interval_keeps_the_unfaded_one():
    """Hand-computed: a correction of +0.4 (log) keeps its share (1, 0.5, 0.25); the interval holds the unfaded one's."""
    from predictor.calibration import PERCENTILES, POOLED, CalibrationTable
    from predictor.learned import faded_prediction

    lower = np.full(len(PERCENTILES), -0.1)
    upper = np.full(len(PERCENTILES), 0.2)
    table = CalibrationTable({POOLED: lower}, {POOLED: upper}, {POOLED: 100})
    physics = np.log(np.array([1.0, 1.0, 1.0]))
    residual = np.array([0.4, 0.4, -0.4])
    kept = np.array([1.0, 0.5, 0.25])
    bins = np.full(3, POOLED, object)
    log_step, low, high = faded_prediction(table, physics, residual, kept, bins, 0.9)
    np.testing.assert_allclose(log_step, [0.4, 0.2, -0.1])
    # Seen: [0.4 - 0.1, 0.4 + 0.2]. Faded: from the faded prediction's low to the unfaded one's high (or the reverse).
    np.testing.assert_allclose(low, [0.3, 0.1, -0.5])
    np.testing.assert_allclose(high, [0.6, 0.6, 0.1])


# --- Transfer protocols: generation, model, framework, source -------------------------------


def test_a_held_out_framework_leaves_training_from_every_source(testbed_dataset, spied):
    """Half the runs are DLPerf's; each framework leaves every fit, DLPerf's and the others' runs alike."""
    from training.dataset import build_dataset
    from training.importers import DLPERF_SOURCE
    from training.report import _transfer_protocols

    runs = testbed_dataset.runs.copy()
    runs["framework"] = np.where(runs["model"] == runs["model"].iloc[0], "tensorflow", "pytorch")
    runs["source"] = np.where(np.arange(len(runs)) % 2 == 0, DLPERF_SOURCE, "testbed")
    ds = build_dataset(runs)
    steps, results = {}, {}

    def summarise(title, result, by, within="model"):
        steps[title] = step_summary(ds, result, by)

    frames = _transfer_protocols(ds, summarise, results, FAST_PARAMS, FAST_ROUNDS, 0.9, note=lambda text: None)

    # CPU hosts have no GPU generation, and no Lambda, DeepLearningExamples or MLPerf runs are here.
    assert list(steps) == ["DLPerf and DeepLearningExamples, leave one framework out"]
    framework, source, row_id = (ds.runs[c].to_numpy(object) for c in ("framework", "source", "row_id"))
    assert len(spied["residual"]) == len(spied["pure_ml"]) == 2
    for name, fitted, pure in zip(pd.unique(framework[source == DLPERF_SOURCE]), spied["residual"], spied["pure_ml"]):
        expected = set(row_id[framework != name])
        assert fitted == expected and pure == expected, name
    table = steps["DLPerf and DeepLearningExamples, leave one framework out"].set_index("group")
    for name in ("tensorflow", "pytorch"):
        assert table.loc[name, "n"] == ((framework == name) & (source == DLPERF_SOURCE)).sum()
    kinds = set(pd.concat(frames)["kind"]) if frames else set()
    assert kinds and kinds <= {"gpus (DLPerf, DLE)", "gpus, multi-node (DLPerf, DLE)"}


def test_n_to_2n_pairs_that_span_nodes_are_named_multi_node():
    from training.evaluate import pair_kind_names

    pairs = pd.DataFrame({"a": [0, 1, 0], "b": [1, 2, 3], "kind": ["gpus", "gpus", "network"]})
    nodes = np.array([1.0, 1.0, 2.0, 4.0])
    assert list(pair_kind_names(pairs, nodes, " (x)")) == ["gpus (x)", "gpus, multi-node (x)", "network (x)"]


def test_a_pair_holds_the_implementation_fixed():
    """n against 2n GPUs pairs runs of one implementation: DLPerf's "PyTorch" and NGC's PyTorch are not a pair."""
    from training.pairs import make_pairs

    row = {"source": "Oneflow-Inc/DLPerf", "model": "resnet50", "batch_size_per_gpu": 128, "precision": "fp32",
           "framework": "pytorch", "software_stack": "stock", "gpu": "V100-SXM2-16GB", "architecture": "allreduce-local",
           "workers": 1}  # fmt: skip
    runs = pd.DataFrame([
        {**row, "gpus_per_worker": 4, "gpus_per_node": 4, "software": "PyTorch"},
        {**row, "gpus_per_worker": 8, "gpus_per_node": 8, "software": "PyTorch"},
        {**row, "gpus_per_worker": 8, "gpus_per_node": 8, "software": "NGC PyTorch (NVIDIA DeepLearningExamples)"},
    ])  # fmt: skip
    pairs = make_pairs(runs, np.array([4.0, 8.0, 8.0]))
    assert pairs[["a", "b", "kind"]].values.tolist() == [[0, 1, "gpus"]]


def test_a_later_release_of_the_same_job_pairs_across_the_sources_software_text():
    """Lambda's suite versions name their release in ``software``: a software_year pair frees it, no other kind does."""
    from training.pairs import make_pairs

    row = {"source": "lambdal/deeplearning-benchmark", "model": "resnet50", "batch_size_per_gpu": 256, "precision": "fp16",
           "framework": "pytorch", "software_stack": "stock", "gpu": "V100-SXM2-16GB", "architecture": "single",
           "workers": 1, "gpus_per_worker": 1, "gpus_per_node": 1}  # fmt: skip
    runs = pd.DataFrame([
        {**row, "software_year": 2020, "software": "suite v0"},
        {**row, "software_year": 2022, "software": "suite v1"},
        {**row, "software_year": 2022, "software": "suite v1", "precision": "fp32"},
        {**row, "software_year": 2022, "software": "suite v1", "batch_size_per_gpu": 128},
        # The first suite held ResNet-50 whole at FP16: another job than the later suites' autocast, no pair.
        {**row, "software_year": 2020, "software": "suite v0", "mixed_precision": "half"},
    ]).assign(mixed_precision=lambda f: f["mixed_precision"].fillna("autocast"))  # fmt: skip
    pairs = make_pairs(runs, np.ones(5))
    assert sorted(pairs[["a", "b", "kind"]].values.tolist()) == [
        [0, 1, "software_year"], [1, 2, "precision"], [1, 3, "batch_size_per_gpu"], [2, 3, "precision"],
    ]  # fmt: skip


def test_gpu_generation_is_the_catalogue_architecture(lambda_dataset):
    from training.report import gpu_generations

    by_gpu = dict(zip(lambda_dataset.runs["gpu"], gpu_generations(lambda_dataset)))
    assert by_gpu == {"A100-SXM4-80GB": "Ampere", "V100-SXM2-32GB": "Volta", "RTX-4090": "Ada Lovelace"}


def test_refits_in_the_summary_are_the_mean_over_groups_per_k():
    ev, _ = synthetic_evaluation()
    ev.cross_source_refit = pd.DataFrame(
        {"group": ["A100", "H100", "all (mean over GPU types)"], "k": [3, 3, 3], "mape_no_refit": [0.3, 0.5, 0.4], "mape_refit": [0.1, 0.2, 0.15]}
    )
    refits = evaluation_summary(ev)["refits"]
    assert refits == {"MLPerf (all rounds), trained on the other sources, k runs of each GPU type": {"3": {"mape_no_refit": 40.0, "mape_refit": 15.0}}}


def test_the_catalogue_scales_prior_pulls_a_fit_toward_the_catalogue(lambda_dataset):
    """Runs made by the physics with the launch latency at 3x the catalogue: without the prior the fit
    finds a large launch scale; a heavy prior keeps both catalogue scales nearer 1, and the loss it
    minimises is the MAPE plus weight x the squared log scales."""
    from dataclasses import replace

    from training.physics_fit import CATALOGUE_SCALES, INITIAL, PhysicsProblem, fit_constants

    ds = lambda_dataset
    truth = replace(INITIAL, launch_scale=3.0, host_scale=1.0)
    problem = PhysicsProblem(ds.resolved, np.ones(len(ds)))
    problem = PhysicsProblem(ds.resolved, problem.step_time_s(truth))
    rows = np.ones(len(ds), bool)
    free = fit_constants(problem, rows, prior_weight=0.0)
    held = fit_constants(problem, rows, prior_weight=1.0)

    def distance(c):
        return sum(abs(np.log(getattr(c, name))) for name in CATALOGUE_SCALES)

    assert distance(held) < distance(free)
    assert np.mean(np.abs(problem.step_time_s(free) / problem.measured_s - 1)) < 0.05  # the free fit reproduces the runs


@dataclass
class ScoredRuns(Scores):
    """Scores with the run table that names each run's model."""

    runs: pd.DataFrame = None


def test_a_model_that_loses_inside_a_group_that_keeps_the_rule_is_listed(tmp_path):
    # Every measured time is 1 s. G1: 10 tacotron2 runs (physics 1.10 s, residual 1.35 s: 10% -> 35%)
    # and 12 bert runs (1.20 s -> 1.02 s: 20% -> 2%), so G1 as a whole keeps the rule (15.5% -> 17.0%).
    # G2: 10 tacotron2 runs, 0% -> 1% (within the 2-point margin). G3: 4 runs lose 100 points (n < 10).
    rows = [("G1", "tacotron2", 1.10, 1.35)] * 10 + [("G1", "bert", 1.20, 1.02)] * 12 + [("G2", "tacotron2", 1.00, 1.01)] * 10
    rows += [("G3", "tacotron2", 1.00, 2.00)] * 4 + [(None, "bert", 1.00, np.nan)]
    group, model, physics, residual = (np.array(c, object if i < 2 else float) for i, c in enumerate(zip(*rows)))
    scores = ScoredRuns(np.zeros(len(rows)), np.log(physics), runs=pd.DataFrame({"model": model}))
    nan = np.full(len(rows), np.nan)
    result = HeldOut("synthetic", group, np.log(residual), nan, nan, nan, np.log(physics))

    losses = losses_within_groups(scores, result, "synthetic", "model", min_runs=10, margin_points=2.0)
    assert losses[["group", "within", "n"]].values.tolist() == [["G1", "model tacotron2", 10]]
    assert losses["physics_mape"].iloc[0] == pytest.approx(0.10)
    assert losses["residual_mape"].iloc[0] == pytest.approx(0.35)
    # (10 x 35% - 10 x 10%) over the protocol's 36 scored runs.
    assert losses["points_of_protocol_lost"].iloc[0] == pytest.approx(100 * 2.5 / 36)

    steps = {"synthetic": step_summary(scores, result, group)}
    assert no_harm_violations(evaluation_summary(Evaluation(steps, pd.DataFrame(), pd.DataFrame(), 1.0))["protocols"]) == []
    ev = Evaluation(steps, pd.DataFrame(), pd.DataFrame(), 1.0, losses=losses)
    report = write_report(ev, tmp_path, scores, {}, 1).read_text()
    section = report[report.index("## Where the residual loses inside a held-out group"):]
    assert "| synthetic | G1 | model tacotron2 | 10 | 10.0% | 35.0% | 6.94 |" in section
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["losses_within_groups"] == [{
        "protocol": "synthetic", "group": "G1", "within": "model tacotron2", "n": 10,
        "physics_mape": pytest.approx(10.0), "residual_mape": pytest.approx(35.0), "points_of_protocol_lost": 6.944,
    }]  # fmt: skip


def test_runs_outside_their_folds_training_data_are_marked_as_the_runtime_would(testbed_dataset):
    """A fold that holds every PS/Worker run out leaves them outside (their architecture unseen); a run
    whose configuration is measured twice, held out alone, is inside (its twin trained); no fold, inside."""
    from training.dataset import joined_keys
    from training.train import outside_fold_domains, training_domain

    ds = testbed_dataset
    ps = np.flatnonzero((ds.runs["architecture"] == "ps-worker").to_numpy())
    config = joined_keys(ds.runs, ["model", "batch_size_per_gpu", "architecture", "workers", "parameter_servers", "network"])
    twin = int(np.flatnonzero(pd.Series(config).duplicated().to_numpy() & (ds.runs["architecture"] != "ps-worker").to_numpy())[0])
    everything = np.arange(len(ds))
    folds = [(np.setdiff1d(everything, ps), ps), (np.setdiff1d(everything, [twin]), np.array([twin]))]
    outside = outside_fold_domains(ds, folds)
    assert outside[ps].all()
    assert not outside[twin]
    assert outside.sum() == len(ps)
    # The domain of a row mask is the domain of those rows rebuilt as a dataset.
    rows = np.zeros(len(ds), bool)
    rows[ps] = True
    assert training_domain(ds, rows) == training_domain(ds.subset(rows))


def test_runs_outside_their_folds_data_calibrate_the_pooled_bin_alone(testbed_dataset, monkeypatch):
    """The bins that jobs inside the training data read hold only the residuals of runs that were inside
    their fold's data; the pooled bin, read by jobs outside, holds every run's."""
    import training.train as train_module
    from predictor.calibration import POOLED, run_bin_keys

    ds = testbed_dataset
    captured = {}
    real_calibrate = train_module.ResidualRegressor.calibrate

    def calibrate(self, residuals, keys, **kwargs):
        captured["keys"] = keys
        return real_calibrate(self, residuals, keys, **kwargs)

    monkeypatch.setattr(train_module.ResidualRegressor, "calibrate", calibrate)
    model, _, _, folds = train_module.fit_calibrated(ds, {"max_depth": 3, "eta": 0.2}, 20)
    outside = train_module.outside_fold_domains(ds, folds)
    assert 0 < outside.sum() < len(ds)
    full = run_bin_keys(ds.runs)
    assert captured["keys"] == [(POOLED,) if out else chain for chain, out in zip(full, outside)]
    counts = model.calibration_.counts
    assert counts[POOLED] == len(ds)
    for name, n in counts.items():
        if name != POOLED:
            assert n == sum(name in chain for chain, out in zip(full, outside) if not out)


def test_best_offset_is_the_least_mape_offset():
    """Hand-computed: log residuals 0, 0 and log 2 weigh 1, 1 and 1/2; the weighted median is 0, where the
    MAPE is (0 + 0 + |1/2 - 1|) / 3 = 1/6; at log 2 it is (1 + 1 + 0) / 3. No offset on a fine grid does better."""
    from training.refit import best_offset

    r = np.array([0.0, 0.0, np.log(2.0)])
    assert best_offset(r) == 0.0

    def mape(offset, residuals):
        return np.mean(np.abs(np.exp(offset - residuals) - 1))

    assert mape(0.0, r) == pytest.approx(1 / 6) and mape(np.log(2.0), r) == pytest.approx(2 / 3)
    rng = np.random.default_rng(3)
    for _ in range(20):
        residuals = rng.normal(0.1, 0.4, rng.integers(1, 40))
        grid = np.linspace(-2, 2, 4001)
        assert mape(best_offset(residuals), residuals) <= min(mape(o, residuals) for o in grid) + 1e-12


def test_a_refit_never_beats_the_best_offset_in_hindsight():
    """Per held-out type and k, the refit's MAPE on the rest is at least the best offset's; a type whose
    held-out runs share one log error exactly has a best-offset MAPE of 0."""
    from types import SimpleNamespace

    from training.report import few_shot_refit

    rng = np.random.default_rng(0)
    groups = np.repeat(np.array(["A", "B", "C"], object), 20)
    error = np.where(groups == "A", 0.3, rng.normal(0.0, 0.2, len(groups)) + np.where(groups == "B", -0.2, 0.1))
    ds = SimpleNamespace(log_measured_s=error.copy())
    result = SimpleNamespace(scored=np.ones(len(groups), bool), log_residual_model_s=np.zeros(len(groups)))
    frame = few_shot_refit(ds, result, groups, ks=(1, 3))
    per_group = frame[~frame["group"].astype(str).str.startswith("all")]
    assert len(per_group) == 6
    assert (per_group["mape_refit"] >= per_group["mape_best_offset"] - 1e-12).all()
    assert per_group[per_group["group"] == "A"]["mape_best_offset"].max() == pytest.approx(0.0, abs=1e-12)
