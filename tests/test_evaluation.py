"""The evaluation code itself: summary figures, the no-harm table, and what reaches each fit."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from training.evaluate import HeldOut, pair_summary, step_summary
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
    result = HeldOut("synthetic", group, np.log(residual), np.log(pure_ml), lower, upper)
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
