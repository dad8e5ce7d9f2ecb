"""MLflow tracking of trainings: the store lives under ``mlruns/`` unless told otherwise.

The default store is SQLite (``sqlite:///mlruns/mlflow.db``) with artifacts in
``mlruns/artifacts``; any tracking URI can be given instead. MLflow is
imported here only, never on the prediction path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from features.fields import FIELDS, FLAT_FIELDS

if TYPE_CHECKING:
    import pandas as pd

    from training.train import TrainResult

EXPERIMENT = "step-time-residual"
REGISTERED_MODEL = "step-time-predictor"
PYFUNC_CODE = Path(__file__).with_name("pyfunc_model.py")
PACKAGES = [Path(__file__).resolve().parents[1] / name for name in ("features", "training", "predictor")]


def job_signature():
    """The pyfunc model's input signature: every job field by its flat name, only the required ones required.

    Text fields are strings. Number fields take any value: MLflow casts a
    JSON integer to neither a double column (it calls that unsafe) nor, where
    a row leaves the field out and pandas holds NaN, to a long one; the job's
    own validation judges each number, row by row, with its message.
    """
    from mlflow.models import ModelSignature
    from mlflow.types.schema import AnyType, ColSpec, Schema

    return ModelSignature(
        inputs=Schema([ColSpec("string" if f.kind == "str" else AnyType(), f.leaf, required=f.required) for f in FIELDS])
    )


def default_tracking_uri(root: Path = Path("mlruns")) -> str:
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


@contextmanager
def tracked_run(tracking_uri: str | None, run_name: str, root: Path = Path("mlruns")) -> Iterator[str]:
    """An active MLflow run in the given store (default: SQLite under ``root``); yields its id."""
    import logging
    import os
    import warnings

    import mlflow

    # Logging a model loads it back to check its signature; that download's progress bar, MLflow's INFO
    # lines and its hint on integer columns in the logged dataset's inferred schema (the model's
    # signature is given, numbers as any type: job_signature) are noise in a command's output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer column", category=UserWarning)
    uri = tracking_uri or default_tracking_uri(root)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        artifacts = (root / "artifacts").resolve() if tracking_uri is None else None
        mlflow.create_experiment(EXPERIMENT, artifact_location=artifacts.as_uri() if artifacts else None)
    mlflow.set_experiment(EXPERIMENT)
    with mlflow.start_run(run_name=run_name) as run:
        yield run.info.run_id


def log_training(result: "TrainResult", model_dir: Path, register: bool) -> None:
    """Log parameters, metrics, importances, a calibration plot, the data and the pyfunc model."""
    import mlflow

    meta = result.metadata
    mlflow.log_params({f"xgb_{k}": v for k, v in meta["params"].items()})
    mlflow.log_params(
        {
            "num_boost_round": meta["num_boost_round"],
            "baseline": meta["baseline"],
            "trials": meta["tuning"]["trials"],
            "rows": meta["data"]["rows"],
            "data_fingerprint": meta["data"]["fingerprint"],
        }
    )
    mlflow.set_tags({"data_fingerprint": meta["data"]["fingerprint"], "sources": ",".join(meta["data"]["sources"])})
    mlflow.log_metrics({k: float(v) for k, v in result.metrics.items() if np.isfinite(v)})
    for fold in result.fold_metrics:
        mlflow.log_metrics({f"fold_{k}": float(v) for k, v in fold.items() if k != "fold" and np.isfinite(v)}, step=fold["fold"])
    mlflow.log_metrics({f"group_mape/{_metric_name(k)}": v for k, v in result.group_metrics.items() if np.isfinite(v)})
    importance = result.model.booster_.get_score(importance_type="gain")
    mlflow.log_dict(dict(sorted(importance.items(), key=lambda kv: -kv[1])), "feature_importance_gain.json")
    mlflow.log_dict({"trials": result.tuning.trials}, "tuning_trials.json")
    mlflow.log_figure(calibration_figure(result), "calibration.png")
    dataset = mlflow.data.from_pandas(result.dataset.runs, name="measured-runs", digest=meta["data"]["fingerprint"][:32])
    mlflow.log_input(dataset, context="training")
    mlflow.pyfunc.log_model(
        name="model",
        python_model=str(PYFUNC_CODE),
        artifacts={"model_dir": str(model_dir)},
        code_paths=[str(p) for p in PACKAGES],
        signature=job_signature(),
        input_example=input_example(result.dataset.runs),
        registered_model_name=REGISTERED_MODEL if register else None,
    )


def input_example(runs: "pd.DataFrame") -> "pd.DataFrame":
    """A few runs' job columns, as the logged model's input example."""
    jobs = runs[[c for c in runs.columns if c in FLAT_FIELDS and c != "measured_step_time_s"]]
    return jobs.head(3).dropna(axis=1)


def _metric_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_./ " else "_" for c in text)


def calibration_figure(result: "TrainResult"):
    """Observed coverage of out-of-fold intervals against the nominal level, per architecture."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from predictor.calibration import run_bin_keys

    ds = result.dataset
    table = result.model.calibration_
    bins = table.bin_for(run_bin_keys(ds.runs))
    levels = np.linspace(0.5, 0.98, 13)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for arch in sorted(set(ds.runs["architecture"])):
        rows = (ds.runs["architecture"] == arch).to_numpy()
        covered = []
        for level in levels:
            low, high = table.interval(result.oof_log_step_s[rows], bins[rows], level)
            truth = ds.log_measured_s[rows]
            covered.append(np.mean((truth >= low) & (truth <= high)))
        ax.plot(levels, covered, marker="o", label=f"{arch} (n={rows.sum()})")
    ax.plot([0.5, 1], [0.5, 1], color="black", ls=":", label="ideal")
    ax.set_xlabel("nominal confidence level")
    ax.set_ylabel("observed coverage")
    ax.set_title("Step-time intervals on their out-of-fold calibration runs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig



def log_refit(result, name: str, runs) -> None:
    """Log a refit: its base model, runs, offset and the new model as a pyfunc (``runs``: the cluster's runs)."""
    import mlflow

    mlflow.log_params({"cluster": name, "runs": result.n_runs, "offset": result.offset, "recalibrated": result.recalibrated})
    mlflow.log_metrics({"in_sample_mape_before": result.mape_before, "in_sample_mape_after": result.mape_after_in_sample})
    mlflow.pyfunc.log_model(
        name="model",
        python_model=str(PYFUNC_CODE),
        artifacts={"model_dir": str(result.path)},
        code_paths=[str(p) for p in PACKAGES],
        signature=job_signature(),
        input_example=input_example(runs),
    )
