"""The spread between runs of one job: hand-computed leave-one-out errors and the per-source table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from training.repeatability import job_keys, leave_one_out_ape, repeatability_table


def _runs() -> pd.DataFrame:
    # Job A measured three times (1, 2, 4 s) by two sources; job B (another GPU) twice alike; job C once.
    return pd.DataFrame({
        "name": ["a1", "a2", "a3", "b1", "b2", "c1"],
        "model": ["resnet50"] * 6,
        "batch_size_per_gpu": [64] * 6,
        "gpu": ["V100-SXM2-16GB"] * 3 + ["A100-SXM4-40GB"] * 2 + ["H100-SXM5-80GB"],
        "parameter_servers": [np.nan] * 6,
        "measured_step_time_s": [1.0, 2.0, 4.0, 0.5, 0.5, 0.3],
        "source": ["lambda", "lambda", "dle", "lambda", "lambda", "dle"],
    })  # fmt: skip


def test_runs_are_one_job_whatever_their_name_and_missing_fields_match():
    keys = job_keys(_runs())
    assert keys[0] == keys[1] == keys[2]
    assert keys[3] == keys[4] != keys[0]
    assert len(set(keys)) == 3


def test_each_run_is_scored_against_the_geometric_mean_of_the_others():
    runs = _runs()
    errors = leave_one_out_ape(np.log(runs["measured_step_time_s"].to_numpy()), job_keys(runs))
    # 1 s against sqrt(2 x 4) = 2.83 s; 2 s against sqrt(1 x 4) = 2 s; 4 s against sqrt(2) = 1.41 s.
    assert errors[:3] == pytest.approx([np.sqrt(8) - 1, 0.0, 1 - np.sqrt(2) / 4])
    assert errors[3:5] == pytest.approx([0.0, 0.0])
    assert np.isnan(errors[5])  # measured once: nothing to compare with


def test_the_table_scores_each_source_alone_then_together():
    table = repeatability_table(_runs()).set_index("scope")
    # lambda alone: job A's two runs (1 and 2 s: 100% and 50%) and job B's two (0%).
    assert table.loc["lambda", ["runs", "jobs"]].tolist() == [4, 2]
    assert table.loc["lambda", "mean_ape"] == pytest.approx((1.0 + 0.5 + 0 + 0) / 4)
    # dle alone has no job measured twice.
    assert table.loc["dle", "runs"] == 0 and np.isnan(table.loc["dle", "mean_ape"])
    together = (np.sqrt(8) - 1 + 0 + 1 - np.sqrt(2) / 4 + 0 + 0) / 5
    assert table.loc["all sources together", "mean_ape"] == pytest.approx(together)
    # Only job A was measured by both sources.
    assert table.loc["jobs measured by two sources or more", ["runs", "jobs"]].tolist() == [3, 1]
    assert table.loc["jobs measured by two sources or more", "median_ape"] == pytest.approx(1 - np.sqrt(2) / 4)
