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
        np.testing.assert_array_equal(side.step_time_s, alone.step_time_s)
        np.testing.assert_array_equal(side.lower_s, alone.lower_s)
        np.testing.assert_array_equal(side.upper_s, alone.upper_s)
        assert list(side.extrapolation) == list(alone.extrapolation)
    assert np.isfinite(together.speedup).sum() > k // 2  # most jobs take the scenario


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
