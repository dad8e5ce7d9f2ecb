"""A fleet's measured steps against its predictions: counts, the summary line, the report and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cli.main import app
from predictor.fleet import score_fleet, summarize
from predictor.fleet_example import example_fleet
from predictor.fleet_measured import measured_check
from predictor.fleet_report import write_report

runner = CliRunner()


def test_counts_against_hand_placed_measurements():
    """Five predicted rows with intervals, one without, one failed and one without a measurement."""
    scored = pd.DataFrame({
        "step_time_s": [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, np.nan, 1.0],
        "lower_s": [0.8, 0.8, 0.8, 0.8, 0.8, np.nan, np.nan, 0.8],
        "upper_s": [1.25, 1.25, 1.25, 1.25, 1.25, np.nan, np.nan, 1.25],
        "measured_step_time_s": [1.0, 1.25, 1.5, 0.5, 0.9, 3.0, 1.0, np.nan],
    })  # fmt: skip
    check = measured_check(scored, 0.9)
    assert (check.jobs, check.with_interval) == (6, 5)
    assert (check.inside, check.slower, check.faster) == (3, 1, 1)  # 1.25 is inside: the interval is closed
    # measured / predicted: 1, 1.25, 1.5, 0.5, 0.9, 1.5 -> median 1.125.
    assert check.median_measured_over_predicted == pytest.approx(1.125)
    # |predicted / measured - 1|: 0, 0.2, 1/3, 1, 1/9, 1/3.
    assert check.mape == pytest.approx((0 + 0.2 + 1 / 3 + 1 + 1 / 9 + 1 / 3) / 6)
    assert check.line() == (
        "measured: 6 jobs give a measured step; median measured / predicted 1.12x, MAPE 33.0%; "
        "of the 5 with a 90% interval, 60% inside, 20% slower than it, 20% faster"
    )


def test_measured_steps_under_the_arithmetic_floor_are_counted_apart():
    """A measurement shorter than the job's arithmetic at peak is left out of every figure and said to be."""
    scored = pd.DataFrame({
        "step_time_s": [1.0, 1.0, 1.0],
        "lower_s": [0.8, 0.8, 0.8],
        "upper_s": [1.25, 1.25, 1.25],
        "arithmetic_floor_s": [0.4, 0.4, np.nan],  # the third: a CPU device, no floor
        "measured_step_time_s": [1.0, 0.3, 0.3],
    })  # fmt: skip
    check = measured_check(scored, 0.9)
    assert (check.jobs, check.below_floor) == (2, 1)
    assert (check.inside, check.faster) == (1, 1)
    assert check.median_measured_over_predicted == pytest.approx(0.65)
    assert check.line().endswith(
        "; 1 job's measured step is shorter than the arithmetic allows (left out: measured at another precision, batch or GPU count?)"
    )
    alone = measured_check(scored.iloc[[1]], 0.9)
    assert alone.jobs == 0 and alone.line() == (
        "measured: 1 job's measured step is shorter than the arithmetic allows (left out: measured at another precision, "
        "batch or GPU count?)"
    )


def test_a_fleet_without_measurements_says_nothing_of_them():
    scored = pd.DataFrame({"step_time_s": [1.0], "lower_s": [0.8], "upper_s": [1.2]})
    check = measured_check(scored, 0.9)
    assert check.jobs == 0 and check.line() is None and np.isnan(check.mape)


@pytest.fixture(scope="module")
def measured_fleet() -> pd.DataFrame:
    """Example jobs whose measured step is their own prediction times 1, 2 or 0.5."""
    fleet = example_fleet(60, seed=3)
    scored = score_fleet(fleet, progress=False)
    factor = np.array([1.0, 2.0, 0.5])[np.arange(len(fleet)) % 3]
    return fleet.assign(measured_step_time_s=scored["step_time_s"].to_numpy() * factor)


def test_the_learned_fleet_scoring_places_each_measurement(measured_fleet):
    scored = score_fleet(measured_fleet, progress=False)
    check = summarize(scored, confidence_level=0.9).measured
    factor = np.array([1.0, 2.0, 0.5])[np.arange(len(scored)) % 3]
    banded = np.isfinite(scored["lower_s"].to_numpy(float))
    # Half a prediction can lie under the job's arithmetic floor: such rows are counted apart, not compared.
    impossible = scored["measured_step_time_s"] < scored["arithmetic_floor_s"]
    assert check.below_floor == int(impossible.sum())
    assert check.jobs + check.below_floor == int(np.isfinite(scored["step_time_s"]).sum())
    banded &= ~impossible.to_numpy()
    # A measurement equal to its prediction lies inside its interval; twice or half of it, outside where the interval is narrower.
    inside = (factor == 1.0) | ((factor == 2.0) & (scored["upper_s"] >= 2 * scored["step_time_s"])) | (
        (factor == 0.5) & (scored["lower_s"] <= 0.5 * scored["step_time_s"]))
    assert check.inside == int((inside & banded).sum())
    assert check.slower + check.faster + check.inside == check.with_interval == int(banded.sum())


def test_cli_prints_the_line_and_the_report_holds_the_section(tmp_path, measured_fleet):
    path = tmp_path / "fleet.csv"
    # One row measured a million times faster than its prediction: under any job's arithmetic floor.
    fleet = measured_fleet.copy()
    fleet.loc[0, "measured_step_time_s"] = fleet.loc[0, "measured_step_time_s"] * 1e-6
    fleet.to_csv(path, index=False)
    result = runner.invoke(app, ["fleet", "--jobs", str(path), "--report", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("measured: "))
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    below = summary["measured"]["below_floor"]
    assert below >= 1
    compared = len(fleet) - below
    assert line.startswith(f"measured: {compared} jobs give a measured step; median measured / predicted 1.00x")
    assert line.endswith("shorter than the arithmetic allows (left out: measured at another precision, batch or GPU count?)")
    assert summary["measured"]["jobs"] == compared and summary["measured"]["confidence_level"] == 0.9
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Measured against predicted" in report and "`measured_step_time_s < arithmetic_floor_s`" in report
    # Without --report the summary keeps only the columns it needs, and still sees the measurements.
    plain = runner.invoke(app, ["fleet", "--jobs", str(path)])
    assert line in plain.stdout.splitlines()


def test_report_of_a_fleet_without_measurements_has_no_section(tmp_path):
    scored = score_fleet(example_fleet(20, seed=1), progress=False, model="none")
    report = write_report(scored, tmp_path / "report", model="none")
    assert report.measured.jobs == 0
    assert "Measured against predicted" not in (tmp_path / "report" / "report.md").read_text()
