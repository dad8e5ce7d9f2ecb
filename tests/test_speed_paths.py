"""The fast paths answer exactly what the plain ones do: one pass through the trees for a what-if, bins by factorizing."""

from __future__ import annotations

import numpy as np
import pytest

from features import scenarios
from features.table import validate_columns
from predictor import Predictor
from predictor.artefact import DEDUPLICATE_ABOVE_ROWS
from predictor.calibration import FACTORIZE_ABOVE_ROWS
from predictor.fleet_configs import distinct_configs
from predictor.fleet_example import example_fleet


@pytest.fixture(scope="module")
def learned() -> Predictor:
    predictor = Predictor()
    assert predictor.method == "learned", "the shipped model is part of the repository"
    return predictor


@pytest.mark.parametrize("rows", [300, 3 * DEDUPLICATE_ABOVE_ROWS], ids=["small", "deduplicated"])
def test_a_what_if_in_one_pass_equals_each_side_alone(learned, rows):
    _, distinct, k = distinct_configs(example_fleet(rows, seed=5))
    table = validate_columns(distinct, k)
    steps = scenarios.parse(["allreduce-nvlink"])
    together = learned.speedup_table(table, steps)
    for side, alone in ((together.baseline, learned.predict_table(table)), (together.target, learned.predict_table(scenarios.apply(table, steps)))):
        # Each side's learned prediction is the one it gets alone ...
        np.testing.assert_array_equal(side.learned.log_step_time_s, alone.learned.log_step_time_s)
        np.testing.assert_array_equal(side.learned.lower_s, alone.learned.lower_s)
        np.testing.assert_array_equal(side.learned.upper_s, alone.learned.upper_s)
        assert list(side.extrapolation) == list(alone.extrapolation)
    np.testing.assert_array_equal(together.baseline.step_time_s, learned.predict_table(table).step_time_s)
    # ... and the target shown is the baseline over the speedup (the what-if's share of the correction's change).
    ok = np.isfinite(together.speedup)
    np.testing.assert_allclose(together.target.step_time_s[ok], together.baseline.step_time_s[ok] / together.speedup[ok], rtol=1e-12)
    assert ok.sum() > k // 2  # most jobs take the scenario


def test_intervals_by_factorized_bins_equal_those_by_sorted_bins(learned):
    calibration = learned.artefact.step_calibration
    names = np.array(sorted(calibration.lower), dtype=object)
    rng = np.random.default_rng(0)
    n = FACTORIZE_ABOVE_ROWS + 500
    bins, y_hat = names[rng.integers(0, len(names), n)], rng.normal(-1.0, 1.0, n)
    low, high = calibration.interval(y_hat, bins, 0.9)
    part = slice(0, FACTORIZE_ABOVE_ROWS // 2)  # below the threshold: the numpy path
    low_small, high_small = calibration.interval(y_hat[part], bins[part], 0.9)
    np.testing.assert_array_equal(low[part], low_small)
    np.testing.assert_array_equal(high[part], high_small)
    assert (low < y_hat).all() and (y_hat < high).all()
    np.testing.assert_array_equal(
        calibration.probability_above(y_hat, bins, 0.0)[part], calibration.probability_above(y_hat[part], bins[part], 0.0)
    )


def test_a_table_factorizes_a_column_once_and_again_only_when_it_is_replaced():
    table = validate_columns({"model": ["resnet50", "bert-large", "resnet50"], "gpu": ["V100-SXM2-16GB"] * 3}, 3)
    codes, names = table.codes("model")
    assert list(names[c] for c in codes) == ["resnet50", "bert-large", "resnet50"]
    assert table.codes("model")[0] is codes  # cached
    table.columns["model"] = np.array(["bert-large"] * 3, object)
    codes, names = table.codes("model")
    assert names == ["bert-large"] and list(codes) == [0, 0, 0]
    assert list(table.map_column("model", {"bert-large": 7}, -1, int)) == [7, 7, 7]


def test_a_scenario_leaves_the_baseline_table_as_it_was():
    table = validate_columns({"model": ["resnet50"] * 2, "gpu": ["V100-SXM2-16GB"] * 2, "architecture": ["ps-worker"] * 2,
                              "workers": [4, 4], "network": ["ethernet-25g"] * 2}, 2)
    before = {leaf: values.copy() for leaf, values in table.columns.items()}
    target = scenarios.apply(table, scenarios.parse(["allreduce-nvlink", "mixed-precision"]))
    target.fail(np.array([True, False]), "a failure of the target only")
    assert list(target.columns["architecture"]) == ["allreduce-local"] * 2
    for leaf, values in before.items():
        np.testing.assert_array_equal(table.columns[leaf], values)
    assert table.errors[0] is None and not table.failed.any()
    assert target.columns["model"] is table.columns["model"]  # untouched columns are shared, not copied


def test_features_stacked_in_float32_equal_each_table_cast(learned):
    from features.build import physical_features, stacked_features
    from features.resolve import resolve

    _, distinct, k = distinct_configs(example_fleet(400, seed=3))
    base = validate_columns(distinct, k)
    target = scenarios.apply(base, scenarios.parse(["allreduce-nvlink"]))
    sides = [(r, r.breakdown()) for r in (resolve(base), resolve(target))]
    values, frames = stacked_features(sides)
    alone = [physical_features(r, b) for r, b in sides]
    np.testing.assert_array_equal(values, np.concatenate([f.values for f in alone]).astype(np.float32))
    for frame, single in zip(frames, alone):
        assert frame.names == single.names
        ok = ~np.isnan(single.values[:, 0])
        # Range checks read the float64 column, not its float32 rounding.
        np.testing.assert_array_equal(frame.column("log_batch_size_per_gpu")[ok], single.column("log_batch_size_per_gpu")[ok])


def test_codes_found_while_validating_equal_a_fresh_factorization():
    from features.table import factorize

    raw = {"model": [" ResNet50", "resnet50", None, "bert-large", "resnet50"], "gpu": ["v100-sxm2-16gb", "V100-SXM2-16GB", None, "x", "A100-SXM4-40GB"],
           "framework": ["PyTorch", "pytorch", "", "tensorflow", None]}
    table = validate_columns(raw, 5)
    for leaf in ("model", "gpu", "framework", "network", "precision"):
        codes, names = table.codes(leaf)
        assert [names[c] for c in codes] == list(table.columns[leaf])
        assert len(set(names)) == len(names)
        fresh_codes, fresh = factorize(table.columns[leaf])
        assert [fresh[c] for c in fresh_codes] == [names[c] for c in codes]
