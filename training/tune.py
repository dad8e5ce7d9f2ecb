"""Optuna search over the residual model's XGBoost settings.

TPE proposes settings; each trial is scored by grouped cross-validation
(groups: a GPU type for Lambda runs, a benchmark for MLPerf runs, a topology
for testbed runs; see :func:`training.dataset.cv_groups`), so a setting must
generalise to hardware and workloads it has not seen. The score is the mean
absolute percentage error of step time; a trial whose running score is worse
than the median of earlier trials at the same fold is pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import optuna

from training.cv import ape, group_folds, sample_weights
from training.dataset import Dataset
from training.model import DEFAULT_PARAMS, DEFAULT_ROUNDS, ResidualRegressor

N_SPLITS = 5


@dataclass(frozen=True)
class TuningResult:
    params: dict
    num_boost_round: int
    best_mape: float
    n_trials: int
    n_pruned: int
    trials: list[dict]


def suggest(trial: optuna.Trial) -> tuple[dict, int]:
    params = {
        "max_depth": trial.suggest_int("max_depth", 2, 7),
        "eta": trial.suggest_float("eta", 0.01, 0.3, log=True),
        "min_child_weight": trial.suggest_float("min_child_weight", 0.5, 30.0, log=True),
        "subsample": trial.suggest_float("subsample", 0.5, 1.0),
        "colsample_bytree": trial.suggest_float("colsample_bytree", 0.4, 1.0),
        "lambda": trial.suggest_float("lambda", 1e-3, 10.0, log=True),
        "alpha": trial.suggest_float("alpha", 1e-4, 1.0, log=True),
    }
    rounds = trial.suggest_int("num_boost_round", 100, 600, step=50)
    return params, rounds


def tune(ds: Dataset, n_trials: int, seed: int = 0, progress: bool = True) -> TuningResult:
    """Search ``n_trials`` settings; with none, the defaults stand."""
    if n_trials <= 0:
        return TuningResult(dict(DEFAULT_PARAMS), DEFAULT_ROUNDS, float("nan"), 0, 0, [])
    splits = group_folds(ds.group, N_SPLITS)
    X, y = ds.features.values, ds.residual
    weights = sample_weights(ds.group)

    def objective(trial: optuna.Trial) -> float:
        params, rounds = suggest(trial)
        errors = []
        for k, (train, valid) in enumerate(splits):
            model = ResidualRegressor(params=params, num_boost_round=rounds)
            model.fit(X[train], y[train], sample_weight=weights[train], feature_names=ds.features.names)
            errors.append(np.mean(ape(ds.log_analytical_s[valid] + model.predict(X[valid]), ds.log_measured_s[valid])))
            trial.report(float(np.mean(errors)), k)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(np.mean(errors))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=0),
    )
    study.enqueue_trial({**DEFAULT_PARAMS, "num_boost_round": DEFAULT_ROUNDS})
    study.optimize(objective, n_trials=n_trials, show_progress_bar=progress)
    best = study.best_trial
    params = {k: v for k, v in best.params.items() if k != "num_boost_round"}
    pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    trials = [
        {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params}
        for t in study.trials
    ]
    return TuningResult(params, int(best.params["num_boost_round"]), float(best.value), len(study.trials), pruned, trials)
