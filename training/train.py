"""Training: tune, cross-fit, calibrate, fit, save, track.

1. Build the dataset (features of the analytical breakdown; target: the log
   residual of measured over analytical step time).
2. Tune XGBoost with Optuna on grouped cross-validation (:mod:`training.tune`).
3. Cross-fit with the chosen settings, grouped by hardware: every run gets an
   out-of-fold prediction from a model that never saw its group (GPU type,
   MLPerf benchmark or testbed topology). Their residuals calibrate the step-time intervals,
   Mondrian by architecture and network tier (runs outside their fold's training data
   in the pooled bin only), each run weighted as training weighs it (its group counting as
   the square root of its runs); the residuals of pairs of runs
   calibrate the log speedup, Mondrian by kind of what-if (CV+ style), each pair
   weighted as training weighs runs: its groups count as the square root of their pairs.
4. Fit the final model on every run and save the artefact.
5. Log the run to MLflow (parameters, per-fold and per-group metrics, feature
   importances, a calibration plot, the data's fingerprint, the model as a
   pyfunc) and register the model.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from features.build import range_columns
from features.mechanisms import physics_constants
from predictor.artefact import save_artefact
from predictor.calibration import POOLED, pair_bin_keys, pair_share, run_bin_keys
from predictor.domain import seen_domain, unseen_facts
from predictor.learned import domain_notes
from training.cv import ape, group_folds, out_of_fold, sample_weights
from training.dataset import DEFAULT_BASELINE, Dataset, build_dataset, fingerprint, text_keys
from training.model import ResidualRegressor
from training.pairs import make_pairs, pair_log_ratios
from training.refit import random_effects_kappa
from training.shrink import estimate_shrink, pair_shares, shrink_shares
from training.model_card import model_card
from training.tracking import log_training, tracked_run
from training.tune import N_SPLITS, TuningResult, tune


@dataclass
class TrainResult:
    model: ResidualRegressor
    dataset: Dataset
    tuning: TuningResult
    oof_log_step_s: np.ndarray
    pairs: pd.DataFrame
    metrics: dict[str, float]
    fold_metrics: list[dict[str, float]]
    group_metrics: dict[str, float]
    metadata: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    run_id: str | None = None


def summarize(ape_values: np.ndarray) -> dict[str, float]:
    """MAPE, median APE and the shares within 10 % and 20 % (fractions)."""
    values = ape_values[np.isfinite(ape_values)]
    if not len(values):
        return {"mape": float("nan"), "median_ape": float("nan"), "within_10pct": float("nan"), "within_20pct": float("nan"), "n": 0}
    return {
        "mape": float(values.mean()),
        "median_ape": float(np.median(values)),
        "within_10pct": float((values <= 0.10).mean()),
        "within_20pct": float((values <= 0.20).mean()),
        "n": int(len(values)),
    }


def fit_calibrated(
    ds: Dataset, params: dict, num_boost_round: int, seed: int = 0
) -> tuple[ResidualRegressor, np.ndarray, pd.DataFrame, list[tuple[np.ndarray, np.ndarray]]]:
    """Cross-fit for calibration, then fit on everything; returns the model, OOF log step times, pairs and folds.

    A run outside its fold's training data (:func:`outside_fold_domains`) calibrates the pooled bin
    alone, the bin a job outside the model's training data reads: the bins of jobs inside hold the
    residuals of runs that were inside.
    The out-of-fold pairs also give each what-if kind the share of the correction's change it keeps
    (:func:`training.shrink.pair_shares`, ``model.pair_shares_``); the speedup calibration is of the
    log speedups so predicted, weighted by :func:`pair_weights`.
    """
    folds = group_folds(ds.group, N_SPLITS)
    oof_residual = out_of_fold(ds, folds, params, num_boost_round, seed=seed)
    oof_log_step = ds.log_analytical_s + oof_residual
    step_keys = [(POOLED,) if outside else chain for chain, outside in zip(run_bin_keys(ds.runs), outside_fold_domains(ds, folds))]
    pairs = make_pairs(ds.runs, ds.resolved.total_gpus, seed=seed)
    kinds = pairs["kind"].to_numpy()
    physics_ratio = pair_log_ratios(pairs, ds.log_analytical_s)
    measured_ratio = pair_log_ratios(pairs, ds.log_measured_s)
    correction_ratio = pair_log_ratios(pairs, oof_residual)
    group_a, group_b = ds.group[pairs["a"].to_numpy()], ds.group[pairs["b"].to_numpy()]
    shares = pair_shares(kinds, measured_ratio - physics_ratio, correction_ratio, comparable=group_a == group_b)
    pair_residuals = measured_ratio - (physics_ratio + pair_share(shares, kinds) * correction_ratio)
    model = ResidualRegressor(params=params, num_boost_round=num_boost_round, seed=seed)
    model.fit(ds.features.values, ds.residual, sample_weight=sample_weights(ds.group), feature_names=ds.features.names)
    model.calibrate(
        ds.log_measured_s - oof_log_step,
        step_keys,
        pair_residuals=pair_residuals,
        pair_keys=pair_bin_keys(kinds),
        pair_weights=pair_weights(group_a, group_b),
        weights=sample_weights(ds.group),
    )
    model.pair_shares_ = shares
    return model, oof_log_step, pairs, folds


def pair_weights(group_a: np.ndarray, group_b: np.ndarray) -> np.ndarray:
    """Calibration weights of pairs of runs: each unordered pair of CV groups counts as the square root of
    its number of pairs, as :func:`training.cv.sample_weights` weighs runs in training.

    Unweighted, the GPU type with the most runs gives most pairs (the H100 SXM
    about two thirds of the fp32 -> fp16 pairs on Lambda), and every what-if's
    interval would be sized by how well the model knows that one GPU: held out
    by GPU type, its fp32 -> fp16 intervals covered 99.7% and every other
    type's 58% on average.
    """
    a, b = np.asarray(group_a, object).astype(str), np.asarray(group_b, object).astype(str)
    return sample_weights(np.where(a <= b, a + "\x00" + b, b + "\x00" + a))


def training_domain(ds: Dataset, rows: np.ndarray | None = None) -> dict[str, Any]:
    """What the model has seen: GPU types, architectures, models, feature ranges, and the
    frameworks, model families and combinations of :func:`predictor.domain.seen_domain`;
    of the runs of ``rows`` (a boolean mask) where given, else of all."""
    runs = ds.runs if rows is None else ds.runs[rows]
    take = slice(None) if rows is None else rows
    return {
        **seen_domain(ds.resolved, rows),
        "gpus": sorted(set(text_keys(runs["gpu"]))),
        "architectures": sorted(set(text_keys(runs["architecture"]))),
        "models": sorted(set(text_keys(runs["model"]))),
        "networks": sorted(set(text_keys(runs["network"])) - {""}),
        "ranges": {
            name: [float(np.nanmin(values[take])), float(np.nanmax(values[take]))]
            for name, values in range_columns(ds.resolved, ds.features).items()
        },
    }


def outside_fold_domains(ds: Dataset, folds: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Per run: whether it lay outside its cross-fitting fold's training data, as the shipped model
    would say of a job outside its own: a note of :func:`predictor.learned.domain_notes` that sends
    the interval to the pooled bin, or an unseen fact of :func:`predictor.domain.unseen_facts`.
    A run no fold scores is inside.
    """
    outside = np.zeros(len(ds), bool)
    for train, validation in folds:
        rows = np.zeros(len(ds), bool)
        rows[train] = True
        domain = training_domain(ds, rows)
        _, moved = domain_notes(domain, ds.resolved, ds.features)
        _, unseen = unseen_facts(domain, ds.resolved)
        outside[validation] = (moved | (unseen != None))[validation]  # noqa: E711
    return outside


def train(
    runs: pd.DataFrame,
    *,
    trials: int = 50,
    seed: int = 0,
    out_dir: Path = Path("models/default"),
    tracking_uri: str | None = None,
    register: bool = True,
    progress: bool = True,
    sources: list[str] | None = None,
    baseline: str = DEFAULT_BASELINE,
) -> TrainResult:
    """Train, calibrate and save the residual model on measured ``runs``; track it in MLflow."""
    started = dt.datetime.now(dt.timezone.utc)
    ds = build_dataset(runs, baseline)
    tuning = tune(ds, trials, seed=seed, progress=progress)
    model, oof_log_step, pairs, folds = fit_calibrated(ds, tuning.params, tuning.num_boost_round, seed)

    errors = ape(oof_log_step, ds.log_measured_s)
    analytical_errors = ape(ds.log_analytical_s, ds.log_measured_s)
    metrics = {f"cv_{k}": v for k, v in summarize(errors).items()}
    metrics.update({f"analytical_{k}": v for k, v in summarize(analytical_errors).items()})
    fold_metrics = [summarize(errors[valid]) | {"fold": k} for k, (_, valid) in enumerate(folds)]
    shrink = estimate_shrink(ds, tuning.params, tuning.num_boost_round, seed=seed)
    group_metrics = {
        str(group): summarize(errors[ds.group == group])["mape"] for group in np.unique(ds.group)
    }
    metadata = {
        "created_at": started.isoformat(timespec="seconds"),
        "baseline": baseline,
        # The residual corrects this physics: an artefact is refused where the constants have moved since.
        "physics_constants": dataclasses.asdict(ds.constants or physics_constants()),
        "feature_names": list(ds.features.names),
        "params": tuning.params,
        "num_boost_round": tuning.num_boost_round,
        "tuning": {"trials": tuning.n_trials, "pruned": tuning.n_pruned, "best_cv_mape": tuning.best_mape},
        "data": {
            "fingerprint": fingerprint(ds.runs),
            "rows": len(ds),
            "sources": sources or sorted(set(text_keys(ds.runs["source"]))),
            "rows_by_source": text_keys(ds.runs["source"]).value_counts().to_dict(),
            "pairs_by_kind": pairs["kind"].value_counts().to_dict(),
        },
        "domain": training_domain(ds) | {"shrink": shrink_shares(shrink)},
        "shrink_estimates": {label: estimate.to_dict() for label, estimate in shrink.items()},
        "refit_prior": {"kappa": random_effects_kappa(ds.log_measured_s - oof_log_step, ds.group)},
        "metrics": metrics,
        "calibration_bins": model.calibration_.counts,
        "speedup_calibration_bins": model.speedup_calibration_.counts if model.speedup_calibration_ else {},
        "pair_shares": model.pair_shares_,
    }
    result = TrainResult(model, ds, tuning, oof_log_step, pairs, metrics, fold_metrics, group_metrics, metadata)
    with tracked_run(tracking_uri, run_name=f"train-{started:%Y%m%dT%H%M%S}") as run_id:
        result.run_id = metadata["mlflow_run_id"] = run_id
        result.path = save_artefact(
            out_dir, model.booster_, model.calibration_, model.speedup_calibration_, metadata, model_card(result)
        )
        log_training(result, result.path, register=register)
    return result
