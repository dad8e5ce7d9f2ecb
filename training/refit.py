"""Adapting the shipped model to a user's cluster with a handful of measured runs.

Clusters differ from public benchmarks by framework versions, kernels and
clocks: mostly a multiplicative offset that is the same for every job on the
cluster. ``refit`` estimates that offset as the mean log residual of the
user's runs under the base model, shrunk towards zero by a random-effects
prior (James-Stein): offset = sum(r) / (n + kappa), where kappa = sigma^2 /
tau^2 is the ratio of the within-cluster residual variance to the variance of
cluster offsets, both measured on the base model's out-of-fold residuals
grouped by GPU type. One run moves the model a little, ten runs most of the
way. With at least ``MIN_RECALIBRATION_RUNS`` runs the interval widths are recalibrated
on the user's own leave-one-out residuals; with fewer, the base model's stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from features.errors import SpecError
from predictor.artefact import load_artefact, save_artefact
from predictor.outputs import model_output_dir
from training.calibration import fit_table
from predictor.calibration import run_bin_keys
from training.dataset import Dataset

#: Runs of the user's cluster from which its own interval widths replace the base model's.
MIN_RECALIBRATION_RUNS = 40


def random_effects_kappa(residuals: np.ndarray, groups: np.ndarray) -> float:
    """sigma^2 / tau^2 from residuals grouped by cluster (method of moments)."""
    labels = np.unique(groups)
    means = np.array([residuals[groups == g].mean() for g in labels])
    sizes = np.array([(groups == g).sum() for g in labels])
    within = np.array([residuals[groups == g].var(ddof=1) if n > 1 else np.nan for g, n in zip(labels, sizes)])
    sigma2 = float(np.nanmean(within))
    tau2 = max(float(np.var(means, ddof=1) - np.nanmean(within / sizes)), 1e-6)
    return sigma2 / tau2


def shrunken_offset(residuals: np.ndarray, kappa: float) -> float:
    """The cluster's log offset, shrunk towards zero."""
    return float(np.sum(residuals) / (len(residuals) + kappa))


def best_offset(residuals: np.ndarray) -> float:
    """The log offset ``o`` with the least MAPE of runs with these log residuals (measured over predicted).

    The error of a run after the offset is ``|exp(o - r) - 1| = exp(-r) |exp(o) - exp(r)|``: a
    weighted absolute deviation of ``exp(o)`` from ``exp(r)``, least at their median weighted by
    ``exp(-r)``. No offset does better on these runs; a refit can at most reach it.
    """
    r = np.sort(np.asarray(residuals, float))
    weights = np.exp(-r)
    return float(r[np.searchsorted(np.cumsum(weights), weights.sum() / 2.0)])


@dataclass(frozen=True)
class RefitResult:
    path: Path
    offset: float
    n_runs: int
    recalibrated: bool
    mape_before: float
    mape_after_in_sample: float


def refit(base_dir: Path, ds: Dataset, out_dir: Path, name: str) -> RefitResult:
    """A new artefact in ``out_dir``: the base model plus this cluster's offset (and intervals).

    ``out_dir`` must be new, empty or a model directory this tool wrote, and not the base model itself.
    """
    out_dir = model_output_dir(out_dir, "--out")
    if out_dir.resolve() == Path(base_dir).resolve():
        raise SpecError("--out", str(out_dir), "is the base model; give a new directory (the base model is left untouched)")
    base = load_artefact(base_dir)
    if Path(out_dir).resolve() == Path(base_dir).resolve():
        raise ValueError("refit writes a new model directory; choose an --out other than the base model")
    residuals = ds.log_measured_s - (ds.log_analytical_s + base.predict_residual(ds.features.values))
    kappa = float(base.metadata["refit_prior"]["kappa"])
    offset = shrunken_offset(residuals, kappa)
    step, recalibrated = base.step_calibration, False
    n = len(residuals)
    if n >= MIN_RECALIBRATION_RUNS:
        # Leave-one-out: each run's residual after an offset estimated without it.
        loo_offsets = (residuals.sum() - residuals) / (n - 1 + kappa)
        keys = run_bin_keys(ds.runs)
        step, recalibrated = fit_table(residuals - loo_offsets, keys), True
    metadata = {
        **base.metadata,
        "residual_offset": base.metadata.get("residual_offset", 0.0) + offset,
        "refit": {
            "name": name,
            "base_model": str(base.path),
            "base_fingerprint": base.metadata["data"]["fingerprint"],
            "runs": n,
            "kappa": kappa,
            "offset": offset,
            "recalibrated": recalibrated,
        },
    }
    card = (base.path / "model_card.md").read_text() if (base.path / "model_card.md").exists() else ""
    card += (
        f"\n## Refit '{name}'\nAdapted with {n} measured runs: log offset {offset:+.3f} "
        f"(x{np.exp(offset):.3f}, shrinkage kappa {kappa:.2f}); intervals "
        f"{'recalibrated on the runs' if recalibrated else 'as the base model'}.\n"
    )
    save_artefact(out_dir, base.xgboost_booster(), step, base.speedup_calibration, metadata, card)
    before = np.mean(np.abs(np.exp(-residuals) - 1))
    after = np.mean(np.abs(np.exp(-(residuals - offset)) - 1))
    return RefitResult(out_dir, offset, n, recalibrated, float(before), float(after))

