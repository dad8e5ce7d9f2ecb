"""CLI commands that build the learned layer: train, evaluate, refit, and the testbed's collect."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import typer

from cli.common import domain_errors, echo_json, fail
from predictor.api import default_model_dir

RunsOption = Annotated[
    list[Path] | None, typer.Option("--runs", help="Run tables (CSV or Parquet), repeatable.")
]
LambdaOption = Annotated[Path | None, typer.Option("--lambda", help="Lambda benchmark table (lambda_throughput.csv) to import.")]
MlperfOption = Annotated[Path | None, typer.Option("--mlperf", help="MLPerf Training table (mlperf_training_v3.1.csv) to import.")]
TrackingOption = Annotated[
    str | None, typer.Option("--tracking-uri", help="MLflow tracking URI (default: SQLite store under mlruns/).")
]


def _gather(runs, lambda_csv, mlperf_csv):
    from training.sources import gather_runs

    gathered = gather_runs(runs, lambda_csv, mlperf_csv)
    typer.echo(f"runs: {len(gathered.runs)} accepted from {', '.join(gathered.sources)}", err=True)
    return gathered


@domain_errors
def train_command(
    runs: RunsOption = None,
    lambda_csv: LambdaOption = None,
    mlperf_csv: MlperfOption = None,
    trials: Annotated[int, typer.Option("--trials", help="Optuna trials (0 keeps the default settings).")] = 50,
    out: Annotated[Path, typer.Option("--out", help="Model directory to write.")] = Path("models/default"),
    tracking_uri: TrackingOption = None,
    register: Annotated[bool, typer.Option("--register/--no-register", help="Register the model in the MLflow registry.")] = True,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Tune, calibrate and save the residual model on measured runs; track the run in MLflow.

    Without --runs/--lambda/--mlperf it trains on the default set: every public table found in
    ../shared/data (python -m training.sources lists them) plus the testbed runs in training/data.

    Example: predict train --trials 50
    """
    from predictor.outputs import model_output_dir
    from training.train import train

    model_output_dir(out, "--out")
    started = time.perf_counter()
    gathered = _gather(runs, lambda_csv, mlperf_csv)
    result = train(
        gathered.runs, trials=trials, seed=seed, out_dir=out, tracking_uri=tracking_uri,
        register=register, progress=True, sources=gathered.sources,
    )
    summary = {
        "model_dir": str(result.path),
        "mlflow_run_id": result.run_id,
        "rows": len(result.dataset),
        "trials": result.tuning.n_trials,
        "pruned": result.tuning.n_pruned,
        "cv_mape": result.metrics["cv_mape"],
        "cv_median_ape": result.metrics["cv_median_ape"],
        "analytical_mape": result.metrics["analytical_mape"],
        "seconds": round(time.perf_counter() - started, 1),
    }
    if as_json:
        echo_json(summary)
        return
    typer.echo(
        f"trained on {summary['rows']} runs in {summary['seconds']} s ({summary['trials']} trials, {summary['pruned']} pruned)\n"
        f"grouped CV: MAPE {100 * summary['cv_mape']:.1f}% (analytical alone {100 * summary['analytical_mape']:.1f}%), "
        f"median APE {100 * summary['cv_median_ape']:.1f}%\n"
        f"model: {summary['model_dir']}  MLflow run: {summary['mlflow_run_id']}"
    )


@domain_errors
def evaluate_command(
    runs: RunsOption = None,
    lambda_csv: LambdaOption = None,
    mlperf_csv: MlperfOption = None,
    model: Annotated[Path | None, typer.Option("--model", help="Model whose physics baseline to evaluate (default: the shipped one); hyperparameters are always the fixed defaults.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("reports/evaluation"),
    confidence_level: Annotated[float, typer.Option("--confidence-level")] = 0.9,
) -> None:
    """Held-out evaluation of analytical, pure-ML and physics+residual models; writes a markdown report with plots.

    Leave one GPU type out (Lambda), one tier and one architecture out (testbed), one benchmark
    out (MLPerf), one GPU generation, model and framework out (of every source), MLPerf
    predicted by a model trained without it, speedups of held-out pairs, and few-shot refits. The same figures go to
    summary.json (percentages), with every group that breaks the no-harm rule.

    Example: predict evaluate --out reports/evaluation
    """
    from training.dataset import DEFAULT_BASELINE, build_dataset
    from training.model import DEFAULT_PARAMS, DEFAULT_ROUNDS
    from training.report import run_evaluation, write_report

    from predictor.outputs import output_dir

    output_dir(out, "--out")
    # Fixed, documented hyperparameters: tuned ones were chosen with folds over every run,
    # so each held-out group would have helped choose them. The model gives only its baseline.
    params, rounds, baseline = DEFAULT_PARAMS, DEFAULT_ROUNDS, DEFAULT_BASELINE
    model_dir = model or default_model_dir()
    if (model_dir / "metadata.json").exists():
        from predictor.artefact import read_metadata

        # A corrupt or foreign file is an ArtefactError naming it; the model's constants need not be this
        # version's (each fold fits its own), so a refit of the shipped ones does not stop an evaluation.
        baseline = read_metadata(model_dir, physics=False)["baseline"]
    gathered = _gather(runs, lambda_csv, mlperf_csv)
    ds = build_dataset(gathered.runs, baseline)
    evaluation = run_evaluation(ds, params, rounds, confidence_level, progress=lambda text: typer.echo(f"- {text}", err=True))
    path = write_report(evaluation, out, ds, params, rounds)
    typer.echo(f"wrote {path}")


@domain_errors
def ablate_command(
    runs: RunsOption = None,
    lambda_csv: LambdaOption = None,
    mlperf_csv: MlperfOption = None,
    out: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("reports/ablation"),
    seeds: Annotated[int, typer.Option("--seeds", min=1, max=20, help="Rerun every fit with seeds 0..K-1 of XGBoost's sampling; 3 or more decide by the module's rule.")] = 1,
    variant: Annotated[
        list[str] | None, typer.Option("--variant", help="Only this variant beside the shipped features (repeatable), e.g. '- framework identity'.")
    ] = None,
) -> None:
    """Feature ablation: held-out error with the shipped features, with figures that name a GPU or a model added, and without the framework's name.

    Reruns five protocols of `predict evaluate` (GPU type, GPU generation, MLPerf benchmark, model and
    framework held out) once per feature set and seed; writes report.md and summary.json. About 30 to 45
    minutes on 2 cores for all variants and one seed; about 8 minutes per variant and seed.

    Example: predict ablate --out reports/ablation
    """
    from predictor.outputs import output_dir
    from training.ablation import VARIANTS, run_ablation, write
    from training.dataset import DEFAULT_BASELINE
    from training.model import DEFAULT_PARAMS, DEFAULT_ROUNDS

    output_dir(out, "--out")
    unknown = sorted(set(variant or ()) - set(VARIANTS))
    if unknown:
        fail(f"--variant: {', '.join(unknown)} is not a variant; allowed: {', '.join(repr(v) for v in VARIANTS)}")
    gathered = _gather(runs, lambda_csv, mlperf_csv)
    result = run_ablation(
        gathered.runs, DEFAULT_BASELINE, DEFAULT_PARAMS, DEFAULT_ROUNDS,
        progress=lambda text: typer.echo(f"- {text}", err=True), seeds=seeds, variants=tuple(variant) if variant else None,
    )
    typer.echo(f"wrote {write(result, out)}")


@domain_errors
def physics_report_command(
    runs: RunsOption = None,
    lambda_csv: LambdaOption = None,
    mlperf_csv: MlperfOption = None,
    out: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("reports/physics"),
    refit_constants: Annotated[
        bool,
        typer.Option("--refit-constants", help="First refit the roofline physics' constants on all GPU runs and store them in features/catalog/physics_constants.json."),
    ] = False,
) -> None:
    """Report the analytical model alone against measured runs: held-out roofline physics, errors by source, architecture and tier, and speedups.

    Example: predict physics-report --out reports/physics
    """
    from predictor.outputs import output_dir
    from training.physics_report import write_physics_report

    output_dir(out, "--out")
    gathered = _gather(runs, lambda_csv, mlperf_csv)
    typer.echo(f"wrote {write_physics_report(gathered.runs, out, refit_constants)}")


@domain_errors
def refit_command(
    runs: Annotated[list[Path], typer.Option("--runs", help="Your cluster's measured runs (CSV or Parquet run tables).")],
    out: Annotated[Path, typer.Option("--out", help="New model directory (the base model is left untouched).")],
    model: Annotated[Path | None, typer.Option("--model", help="Base model (default: the shipped one).")] = None,
    name: Annotated[str, typer.Option("--name", help="Name of the cluster.")] = "my-cluster",
    tracking_uri: TrackingOption = None,
) -> None:
    """Adapt the model to your cluster with a handful of its measured runs; writes a new model.

    Example: predict refit --runs my_runs.csv --out models/my-cluster && predict time --job job.json --model models/my-cluster
    """
    from training.dataset import build_dataset
    from training.refit import refit
    from training.runs import load_runs
    from training.tracking import log_refit, tracked_run

    from predictor.outputs import model_output_dir

    base = model or default_model_dir()
    model_output_dir(out, "--out")
    loaded = load_runs(runs)
    if loaded.n_rejected:
        first = loaded.rejected.iloc[0]
        typer.echo(f"warning: {loaded.n_rejected} runs rejected; first: {first['reason']}", err=True)
    if not loaded.n_accepted:
        from features.errors import SpecError

        raise SpecError("--runs", ", ".join(map(str, runs)), "no valid runs to refit on")
    from predictor.artefact import load_artefact

    ds = build_dataset(loaded.accepted, load_artefact(base).baseline)
    with tracked_run(tracking_uri, run_name=f"refit-{name}") as run_id:
        result = refit(base, ds, out, name)
        log_refit(result, name, ds.runs)
    typer.echo(
        f"refit '{name}' on {result.n_runs} runs: offset x{math.exp(result.offset):.3f}, "
        f"in-sample MAPE {100 * result.mape_before:.1f}% -> {100 * result.mape_after_in_sample:.1f}%"
        f"{', intervals recalibrated' if result.recalibrated else ''}\nmodel: {result.path}  MLflow run: {run_id}"
    )


@domain_errors
def collect_command(
    plan: Annotated[str, typer.Option("--plan", help="smoke (under a minute) or full (about 16 minutes, 315 runs).")] = "smoke",
    out: Annotated[Path, typer.Option("--out", help="Run table (CSV) to append to.")] = Path("training/data/testbed_runs.csv"),
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Measure again configurations already in --out.")] = False,
) -> None:
    """Measure real single, AllReduce and PS/Worker training on this host under emulated network tiers.

    Needs root, iproute2 (ip, tc) and the testbed extra (torch): every worker and parameter
    server runs in its own network namespace with a tc-limited link. Configurations already in
    --out are skipped, so an interrupted collection resumes.

    Example: predict collect --plan smoke --out /tmp/smoke.csv
    """
    # The testbed loads only here, keeping its modules off every other command's start-up.
    from training.testbed.cli import collect_command as collect

    collect(plan=plan, out=out, overwrite=overwrite)
