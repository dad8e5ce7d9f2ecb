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

One run cannot tell a change of a few tenths of a point from XGBoost's row
and column sampling, so the decision is made over seeds (``--seeds K``, every
fit of every fold seeded alike, the shipped features refitted with each
seed) by a rule fixed before any seeded run (:func:`verdicts`): per protocol,
d_s = variant MAPE - shipped MAPE with the same seed s, over all the
protocol's scored rows; with their mean d and standard error SE (K >= 3),
the variant *lowers* the error there if d < -2 SE and *raises* it if
d > +SE. It changes the shipped features only if it lowers the error in at
least one protocol and raises it in none; otherwise the shipped features
stay. Gains need twice the evidence that harm does::

    predict ablate --seeds 5 --variant "- framework identity" --out reports/ablation-framework
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


SHIPPED = "shipped features"

#: The shipped feature set, then each candidate group added to it, then each removable group taken out.
VARIANTS: dict[str, FeatureSet] = {
    SHIPPED: FeatureSet(),
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


def run_ablation(
    runs: pd.DataFrame,
    baseline: str,
    params: dict,
    rounds: int,
    progress: Callable[[str], None] | None = None,
    seeds: int = 1,
    variants: tuple[str, ...] | None = None,
) -> dict:
    """Every protocol under the shipped features and each of ``variants`` (all :data:`VARIANTS` by default), per seed.

    Returns ``{"protocols": {NAME: {"n": N, "groups": {GROUP: N}, "physics": {GROUP: MAPE},
    "residual": {VARIANT: {GROUP: MAPE}}, "residual_by_seed": {VARIANT: [{GROUP: MAPE}, ...]}}},
    "variants": {VARIANT: {"added": [features], "removed": [features]}}, "seeds": K,
    "verdicts": {VARIANT: ...}, "seconds": S}``, MAPE in percent with the group "all" for the protocol
    as a whole; ``residual`` is the mean over seeds; ``verdicts`` is :func:`verdicts`'s.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    unknown = sorted(set(variants or ()) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown variants: {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    chosen = {name: VARIANTS[name] for name in VARIANTS if variants is None or name == SHIPPED or name in variants}
    started = time.perf_counter()
    out: dict = {
        "protocols": {},
        "variants": {name: {"added": list(f.added), "removed": list(f.removed)} for name, f in chosen.items()},
        "seeds": seeds,
    }
    for variant, feature_set in chosen.items():
        ds = build_dataset(runs, baseline, candidates=feature_set.added, without=feature_set.removed)
        for p in protocols(ds):
            entry = out["protocols"].setdefault(p.name, {"residual": {}, "residual_by_seed": {}})
            by_seed = entry["residual_by_seed"].setdefault(variant, [])
            for seed in range(seeds):
                if progress is not None:
                    progress(f"{variant}: {p.name}" + (f" (seed {seed})" if seeds > 1 else ""))
                result = held_out(ds, p.scheme, p.groups, p.scored, params, rounds, exclude=p.exclude, pure_ml=False, seed=seed)
                by_seed.append(mape_by_group(ds, result.log_residual_model_s, p))
            entry["residual"][variant] = {group: float(np.mean([m[group] for m in by_seed])) for group in by_seed[0]}
            # The physics does not read the residual's features: the same in every variant.
            entry["physics"] = mape_by_group(ds, result.log_physics_s, p)
            sizes = pd.Series(p.groups[p.scored]).value_counts(sort=False)
            entry["groups"] = {str(k): int(v) for k, v in sizes.items()}
            entry["n"] = int(p.scored.sum())
    out["verdicts"] = verdicts(out)
    out["seconds"] = time.perf_counter() - started
    return out


#: The fewest seeds :func:`verdicts` decides on.
MIN_SEEDS = 3


def verdicts(result: dict) -> dict[str, dict]:
    """The rule of the module docstring, per variant: ``{"protocols": {NAME: {"mean": d, "se": SE,
    "effect": "lowers" | "raises" | "neither"}}, "decision": TEXT}`` (d and SE in MAPE points)."""
    out: dict[str, dict] = {}
    for variant, change in result["variants"].items():
        if variant == SHIPPED:
            continue
        entries = {}
        for name, entry in result["protocols"].items():
            runs = entry["residual_by_seed"]
            d = np.array([v["all"] - s["all"] for v, s in zip(runs[variant], runs[SHIPPED], strict=True)])
            se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) >= MIN_SEEDS else float("nan")
            mean = float(d.mean())
            effect = "neither" if np.isnan(se) else "lowers" if mean < -2 * se else "raises" if mean > se else "neither"
            entries[name] = {"mean": mean, "se": se, "effect": effect}
        effects = [e["effect"] for e in entries.values()]
        verb = "leave the shipped features" if change["removed"] else "join the shipped features"
        if result["seeds"] < MIN_SEEDS:
            decision = f"undecided: {result['seeds']} seed(s), the rule needs {MIN_SEEDS}"
        elif "lowers" in effects and "raises" not in effects:
            decision = f"{verb}: lowers the held-out error in {effects.count('lowers')} protocol(s), raises it in none"
        else:
            decision = f"do not {verb}: lowers the error in {effects.count('lowers')} protocol(s), raises it in {effects.count('raises')}"
        out[variant] = {"protocols": entries, "decision": decision}
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
        "and domain rules as `predict evaluate`; "
        + ("one run." if result["seeds"] == 1 else f"mean over {result['seeds']} seeds of XGBoost's sampling."),
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
    if result["verdicts"]:
        lines += [
            "", "## Decision", "",
            "Per protocol, d = variant MAPE - shipped MAPE with the same seed, its mean over seeds and the standard "
            "error (SE) of that mean, in points. A variant lowers the error where d < -2 SE and raises it where d > +SE; "
            "it changes the shipped features only if it lowers the error somewhere and raises it nowhere "
            "(`training/ablation.py`, fixed before any seeded run).",
        ]
        for variant, verdict in result["verdicts"].items():
            lines += ["", f"### {variant}: {verdict['decision']}", "", "| protocol | d | SE | effect |", "|---|---|---|---|"]
            for name, e in verdict["protocols"].items():
                lines.append(f"| {name} | {e['mean']:+.2f} | {e['se']:.2f} | {e['effect']} |")
    lines += ["", f"Run time: {result['seconds'] / 60:.0f} minutes.", ""]
    return "\n".join(lines)


def write(result: dict, out_dir: Path) -> Path:
    """``report.md`` and ``summary.json`` (the :func:`run_ablation` dict) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    path = out_dir / "report.md"
    path.write_text(markdown(result))
    return path
