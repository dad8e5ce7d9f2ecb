"""predict refit end to end: a cluster's runs in, a new model out, the MLflow run logged with its input example."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from cli.main import app
from predictor import Predictor

RUNS = pd.DataFrame(
    {
        "name": ["a", "b", "c"],
        "model": ["resnet50", "bert-large", "resnet50"],
        "batch_size_per_gpu": [256, 32, 128],
        "precision": ["fp16", "bf16", "fp16"],
        "framework": ["pytorch"] * 3,
        "architecture": ["single", "single", "allreduce-local"],
        "workers": [1, 1, 8],
        "gpus_per_worker": [1, 1, 1],
        "gpu": ["A800"] * 3,
        "gpus_per_node": [8] * 3,
        "measured_step_time_s": [0.25, 0.30, 0.14],
        "source": ["my-cluster"] * 3,
        "source_id": ["1", "2", "3"],
    }
)


def test_refit_writes_a_model_whose_predictions_move_by_its_offset_and_logs_an_input_example(tmp_path):
    import mlflow

    runs, out, uri = tmp_path / "runs.csv", tmp_path / "my-cluster", f"sqlite:///{tmp_path / 'mlflow.db'}"
    RUNS.to_csv(runs, index=False)
    result = CliRunner().invoke(app, ["refit", "--runs", str(runs), "--out", str(out), "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    assert "Downloading artifacts" not in result.output
    line = next(text for text in result.output.splitlines() if text.startswith("refit 'my-cluster' on 3 runs"))
    offset = float(line.split("offset x")[1].split(":")[0].split(",")[0])
    job = {"workload": {"model": "resnet50", "batch_size_per_gpu": 256, "precision": "fp16"}, "cluster": {"gpu": "A800"}}
    before, after = Predictor().time(job), Predictor(model=str(out)).time(job)
    assert after.step_time_s / before.step_time_s == pytest.approx(offset, rel=2e-3)  # the offset as printed (4 digits)
    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["step-time-residual"], output_format="list")
    assert math.isclose(math.exp(float(run.data.params["offset"])), offset, rel_tol=2e-3)
    logged = mlflow.artifacts.list_artifacts(run_id=run.info.run_id, artifact_path="model")
    assert any(a.path.endswith("input_example.json") for a in logged)
