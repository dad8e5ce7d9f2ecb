"""The layout model's evaluation on the MLPerf GPT-3 runs (needs ../shared/data)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.main import app
from training.llm_evaluation import SHARED_DATA, evaluate, fit_efficiency, load_runs

pytestmark = pytest.mark.skipif(not (SHARED_DATA / "mlperf_llm_configs.csv").exists(), reason="../shared/data is absent")


def test_joins_the_13_measured_h100_runs_and_says_why_others_are_left_out():
    runs, skipped = load_runs()
    assert len(runs) == 13
    assert {r.job.gpu.name for r in runs} == {"H100-SXM5-80GB"}
    assert all(r.job.layout.gpus == r.gpus for r in runs)
    reasons = dict(skipped)
    assert any("Gaudi2" in why and "not in the hardware catalogue" in why for why in reasons.values())
    # The 512-GPU NVIDIA v3.1 run: GBS 2048 as logged, TP4 PP8 v12 DP16, step 2048 / 184.887 samples/s.
    eos = next(r for r in runs if r.system == "eos_n64_ngc23.09_nemo")
    assert eos.measured_step_time_s == pytest.approx(2048 / 184.887, rel=1e-4)
    assert (eos.job.layout.tensor_parallel, eos.job.layout.pipeline_parallel, eos.job.layout.virtual_stages) == (4, 8, 12)


def test_leave_one_submitter_out_never_fits_on_the_held_out_submitter():
    result = evaluate(use_llm_analysis=False)
    for submitter, efficiency in result.loso_efficiency.items():
        others = [r for r in result.runs if r.submitter != submitter]
        assert efficiency == fit_efficiency(others)
    f = result.frame
    assert np.all(f["loso_efficiency"] == [result.loso_efficiency[s] for s in f["submitter"]])
    mape = result.metrics["step_time_mape"]
    assert mape["layout model, leave-one-submitter-out"] <= 0.15  # the goal
    assert mape["layout model, fitted on all runs (in-sample)"] <= mape["layout model, leave-one-submitter-out"]
    assert result.metrics["speedup_error"]["loso_speedup"]["mean"] <= 0.10
    assert "left out on request" in result.llm_analysis_note


def test_report_command_works_without_llm_analysis(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llm_analysis", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "llm_analysis.analysis", None)
    result = CliRunner().invoke(app, ["evaluate-llm", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "report.md").read_text()
    assert "llm-analysis is not installed" in report and "Step-time MAPE, leave-one-submitter-out" in report
    assert (tmp_path / "metrics.json").exists() and (tmp_path / "runs.csv").exists()
