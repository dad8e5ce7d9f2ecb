"""Do figures that name a GPU or a model transfer? A leave-one-group-out feature ablation.

The shipped residual reads mechanisms (seconds of each roofline term, the
rates, the volumes) and leaves out figures that say which GPU or which
model a job runs (:data:`features.build.CANDIDATE_GROUPS`): the GPU's
internals (SM count, clock, L2, tensor-core generation, FP32 lanes, the
FP32-accumulate rate, TDP) and the identities (FLOPs per sample, parameter
count, peak FLOP/s, release year). Trees can use either to recognise a GPU
or a model they were trained on; what matters is whether that helps on one
they were not. The shipped features still name the framework
(:data:`features.build.REMOVABLE_GROUPS`); the same question asks whether
they should. This module reruns five held-out protocols of
:func:`training.report.run_evaluation`, with the same groups, exclusions,
fixed hyperparameters, refitted physics constants, shrinkage and domain
rules, once with the shipped features, once per candidate group added and
once per removable group taken out, and reports the residual's MAPE side by
side from the same run::

    predict ablate --out reports/ablation

(25 to 45 minutes on two cores; no pure-ML baseline is fitted). A group
earns a place in the shipped features only where it lowers the held-out
error without raising it elsewhere; a removable group leaves them on the
same terms.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from features.build import CANDIDATE_GROUPS, REMOVABLE_GROUPS
from training.cv import ape
from training.dataset import Dataset, build_dataset, network_of, text_keys
from training.evaluate import LAMBDA, held_out, source_of
from training.importers import DLPERF_SOURCE, is_mlperf
from training.report import DLE_SOURCES, gpu_generations


@dataclass(frozen=True)
class FeatureSet:
    """The shipped features with ``added`` columns (candidates) and without ``removed`` ones."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


#: The shipped feature set, then each candidate group added to it, then each removable group taken out.
VARIANTS: dict[str, FeatureSet] = {
    "shipped features": FeatureSet(),
    **{f"+ {name}": FeatureSet(added=cols) for name, cols in CANDIDATE_GROUPS.items()},
    **{f"- {name}": FeatureSet(removed=cols) for name, cols in REMOVABLE_GROUPS.items()},
}


@dataclass(frozen=True)
class Protocol:
    """One held-out scheme: who is scored, what is held out together, what leaves training with it."""

    name: str
    scheme: str
    groups: np.ndarray
    scored: np.ndarray
    exclude: np.ndarray | None = None


def protocols(ds: Dataset) -> list[Protocol]:
    """The five protocols the ablation reruns, defined as :func:`training.report.run_evaluation` defines them."""
    source = source_of(ds)
    runs = ds.runs
    gpu = text_keys(runs["gpu"]).to_numpy(object)
    model = network_of(text_keys(runs["model"]).to_numpy(object))
    mlperf = is_mlperf(source)
    generation = gpu_generations(ds)
    out = [
        Protocol("Lambda, leave one GPU type out", "lambda-gpu", gpu, source == LAMBDA, exclude=gpu),
        Protocol("All sources, leave one GPU generation out", "generation", generation, generation != None),  # noqa: E711
        Protocol("MLPerf (all rounds), leave one benchmark out", "mlperf-benchmark", model, mlperf, np.where(mlperf, model, None)),
        Protocol(
            "Lambda and DeepLearningExamples, leave one model out", "model", model, (source == LAMBDA) | np.isin(source, DLE_SOURCES)
        ),
        Protocol(
            "DLPerf and DeepLearningExamples, leave one framework out", "framework", text_keys(runs["framework"]).to_numpy(object),
            (source == DLPERF_SOURCE) | np.isin(source, DLE_SOURCES),
        ),
    ]
    return [p for p in out if p.scored.any()]


def mape_by_group(ds: Dataset, log_predicted_s: np.ndarray, p: Protocol) -> dict[str, float]:
    """MAPE (%) of ``log_predicted_s`` over the protocol's scored rows, overall ("all") and per group."""
    rows = p.scored
    errors = pd.Series(ape(log_predicted_s[rows], ds.log_measured_s[rows]) * 100, index=p.groups[rows])
    return {"all": float(errors.mean()), **{str(k): float(v) for k, v in errors.groupby(level=0, sort=False).mean().items()}}


def run_ablation(runs: pd.DataFrame, baseline: str, params: dict, rounds: int, progress: Callable[[str], None] | None = None) -> dict:
    """Every protocol under every :data:`VARIANTS` feature set.

    Returns ``{"protocols": {NAME: {"n": N, "groups": {GROUP: N}, "physics": {GROUP: MAPE},
    "residual": {VARIANT: {GROUP: MAPE}}}}, "variants": {VARIANT: {"added": [features], "removed":
    [features]}}, "seconds": S}``,
    MAPE in percent with the group "all" for the protocol as a whole.
    """
    started = time.perf_counter()
    out: dict = {
        "protocols": {},
        "variants": {name: {"added": list(f.added), "removed": list(f.removed)} for name, f in VARIANTS.items()},
    }
    for variant, feature_set in VARIANTS.items():
        ds = build_dataset(runs, baseline, candidates=feature_set.added, without=feature_set.removed)
        for p in protocols(ds):
            if progress is not None:
                progress(f"{variant}: {p.name}")
            result = held_out(ds, p.scheme, p.groups, p.scored, params, rounds, exclude=p.exclude, pure_ml=False)
            entry = out["protocols"].setdefault(p.name, {"residual": {}})
            entry["residual"][variant] = mape_by_group(ds, result.log_residual_model_s, p)
            # The physics does not read the residual's features: the same in every variant.
            entry["physics"] = mape_by_group(ds, result.log_physics_s, p)
            sizes = pd.Series(p.groups[p.scored]).value_counts(sort=False)
            entry["groups"] = {str(k): int(v) for k, v in sizes.items()}
            entry["n"] = int(p.scored.sum())
    out["seconds"] = time.perf_counter() - started
    return out


def markdown(result: dict) -> str:
    """The ablation as markdown: per protocol, the residual's MAPE under each variant, overall and per group."""
    variants = list(result["variants"])
    lines = [
        "# Feature ablation: do figures that name a GPU, a model or a framework transfer?",
        "",
        "Residual MAPE (%) of the physics + residual model on held-out groups, with the shipped features, with each "
        "candidate group added (`features/build.py` CANDIDATE_GROUPS) and with each removable group taken out "
        "(REMOVABLE_GROUPS); the physics alone for reference. Same protocols, fixed hyperparameters, refitted constants "
        "and domain rules as `predict evaluate`; one run.",
        "",
    ]
    for name, change in result["variants"].items():
        cols = change["added"] or change["removed"]
        if cols:
            lines.append(f"- `{name}`: {', '.join(f'`{c}`' for c in cols)}")
    for name, entry in result["protocols"].items():
        lines += ["", f"## {name}", "", "| group | n | physics | " + " | ".join(variants) + " |", "|---" * (3 + len(variants)) + "|"]
        groups = ["all", *entry["groups"]]
        for group in groups:
            n = entry["n"] if group == "all" else entry["groups"][group]
            cells = [f"{entry['residual'][v][group]:.1f}" for v in variants]
            label = f"**{group}**" if group == "all" else group
            lines.append(f"| {label} | {n} | {entry['physics'][group]:.1f} | " + " | ".join(cells) + " |")
    lines += ["", f"Run time: {result['seconds'] / 60:.0f} minutes.", ""]
    return "\n".join(lines)


def write(result: dict, out_dir: Path) -> Path:
    """``report.md`` and ``summary.json`` (the :func:`run_ablation` dict) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    path = out_dir / "report.md"
    path.write_text(markdown(result))
    return path
