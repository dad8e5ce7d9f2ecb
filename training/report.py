"""The evaluation report: every held-out scheme, as markdown tables, PNG plots and ``summary.json``.

``summary.json`` holds the same figures as the tables, in percent, for tools:
``{"protocols": {NAME: {"all": STATS, "groups": {GROUP: STATS}}}, "speedups":
{KIND: STATS}, "speedup_groups": {KIND: {GROUP: {"n", "coverage", "mean_relative_width"}}},
"no_harm_violations": [...], "refits": {NAME: {K: {"mape_no_refit", "mape_refit",
"mape_best_offset"}}}}``, where STATS has ``n``,
``physics_mape``, ``pure_ml_mape``, ``residual_mape``, ``coverage`` and
``mean_relative_width`` (``null`` where a figure is not defined). The no-harm
rule: in every group of every protocol with at least :data:`NO_HARM_MIN_RUNS`
runs, the residual's MAPE is at most the physics-alone MAPE plus
:data:`NO_HARM_MARGIN_POINTS`; the report lists every group that breaks it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from features.catalog_arrays import catalog_arrays
from training.dataset import Dataset, joined_keys, network_of, text_keys
from training.importers import DLE_HISTORY_SOURCE, DLE_SOURCE, DLPERF_SOURCE
from training.importers import is_mlperf as mlperf_rows
from training.evaluate import (
    LAMBDA, TESTBED, HeldOut, held_out, losses_within_groups, pair_group_summary, pair_summary, source_of, step_summary,
)
from training.refit import best_offset, random_effects_kappa, shrunken_offset
from training.shrink import NO_HARM_MARGIN_POINTS, NO_HARM_MIN_RUNS

FEW_SHOT_K = (1, 3, 10)
FEW_SHOT_REPEATS = 20
#: The cross-source refit: this many MLPerf runs of a GPU type refit the model trained without MLPerf.
CROSS_SOURCE_K = (3,)
#: Run sources of the DeepLearningExamples tables (current and older README versions).
DLE_SOURCES = (DLE_SOURCE, DLE_HISTORY_SOURCE)


#: STATS fields of summary.json and the columns of the step and pair tables they come from.
STEP_STATS = {
    "physics_mape": "analytical_mape",
    "pure_ml_mape": "pure_ml_mape",
    "residual_mape": "residual_mape",
    "coverage": "coverage",
    "mean_relative_width": "mean_relative_width",
}
PAIR_STATS = {
    "physics_mape": "analytical_mape",
    "pure_ml_mape": None,  # pure ML predicts step times, not pairs: no speedup figure of its own
    "residual_mape": "residual_mape",
    "coverage": "coverage",
    "mean_relative_width": "mean_relative_width",
}


@dataclass
class Evaluation:
    steps: dict[str, pd.DataFrame]
    pairs: pd.DataFrame
    few_shot: pd.DataFrame
    seconds: float
    #: MLPerf after the refit of a model trained without it, per GPU type (``few_shot_refit`` columns).
    cross_source_refit: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Per protocol, the (held-out group, model) cells where the residual loses (:func:`training.evaluate.losses_by_model`).
    losses: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Speedup coverage per kind and held-out group of 30 pairs or more (:func:`training.evaluate.pair_group_summary`).
    pair_groups: pd.DataFrame = field(default_factory=pd.DataFrame)


def _testbed_config(runs: pd.DataFrame, drop: tuple[str, ...]) -> np.ndarray:
    columns = [c for c in ("model", "batch_size_per_gpu", "architecture", "workers", "parameter_servers", "network") if c not in drop]
    return joined_keys(runs, columns)


def run_evaluation(ds: Dataset, params: dict, rounds: int, confidence_level: float = 0.9, progress=None) -> Evaluation:
    """All schemes of :mod:`training.evaluate` on one dataset with fixed hyperparameters."""
    started = time.perf_counter()
    source = source_of(ds)
    runs = ds.runs
    gpu = text_keys(runs["gpu"]).to_numpy(object)
    steps: dict[str, pd.DataFrame] = {}
    pair_frames: list[pd.DataFrame] = []
    results: dict[str, HeldOut] = {}

    def note(text: str) -> None:
        if progress is not None:
            progress(text)

    held: dict[str, tuple[HeldOut, str]] = {}

    def summarise(title: str, result: HeldOut, by: np.ndarray, within: str = "model") -> None:
        """The protocol's summary per group of ``by``; its losses are looked for per ``within`` inside each held-out group."""
        steps[title] = step_summary(ds, result, by)
        held[title] = (result, within)

    # Every MLPerf round is one source family: a benchmark leaves with all its rounds.
    is_lambda, is_mlperf, is_testbed = source == LAMBDA, mlperf_rows(source), source == TESTBED
    if is_lambda.any():
        note("leave one GPU type out (Lambda)")
        # A GPU type's MLPerf runs leave training with its Lambda runs.
        result = held_out(ds, "lambda-gpu", gpu, is_lambda, params, rounds, confidence_level,
                          exclude=gpu, pair_kinds=("gpus", "intra_node_link", "precision", "software_year"))
        results["lambda-gpu"] = result
        summarise("Lambda, leave one GPU type out", result, gpu)
        steps["Lambda, leave one GPU type out, by architecture"] = step_summary(ds, result, runs["architecture"].to_numpy(object))
        pair_frames += result.pair_frames
    if is_testbed.any():
        network = text_keys(runs["network"]).to_numpy(object)
        note("leave one tier out (testbed)")
        # One-host runs (single, allreduce-local) cross no network: they belong to no tier.
        tiers = np.where(is_testbed & (network != ""), network, None)
        result = held_out(ds, "testbed-tier", tiers, tiers != None, params, rounds, confidence_level)  # noqa: E711
        summarise("Testbed, leave one network tier out", result, network)
        note("leave one architecture out (testbed)")
        arch = np.where(is_testbed, runs["architecture"].astype(str).to_numpy(object), None)
        result = held_out(ds, "testbed-architecture", arch, is_testbed, params, rounds, confidence_level)
        summarise("Testbed, leave one architecture out", result, arch)
        note("tier changes, by configuration (testbed)")
        config = np.where(is_testbed, _folds_of(_testbed_config(runs, drop=("network",))), None)
        result = held_out(ds, "testbed-config", config, is_testbed, params, rounds, confidence_level, pair_kinds=("network",))
        pair_frames += result.pair_frames
        summarise("Testbed, leave configurations out (5 folds), by architecture", result, arch)
        note("PS/Worker to AllReduce, by workload and tier (testbed)")
        config = np.where(is_testbed, _folds_of(_testbed_config(runs, drop=("architecture", "parameter_servers"))), None)
        result = held_out(ds, "testbed-arch-pairs", config, is_testbed, params, rounds, confidence_level, pair_kinds=("architecture",))
        pair_frames += result.pair_frames
    if is_mlperf.any():
        note("leave one benchmark out (MLPerf)")
        model = network_of(runs["model"].astype(str).to_numpy(object))
        result = held_out(ds, "mlperf-benchmark", model, is_mlperf, params, rounds, confidence_level, exclude=np.where(is_mlperf, model, None))
        summarise("MLPerf (all rounds), leave one benchmark out", result, np.where(is_mlperf, model, None), within="gpu")
    pair_frames += _transfer_protocols(ds, summarise, results, params, rounds, confidence_level, note)
    few_shot = few_shot_refit(ds, results.get("lambda-gpu"), gpu)
    cross_source = results.get("cross-source")
    mlperf_gpu = np.where(is_mlperf, gpu, None)
    refit = few_shot_refit(ds, cross_source, mlperf_gpu, ks=CROSS_SOURCE_K) if cross_source is not None else pd.DataFrame()
    losses = [
        losses_within_groups(ds, result, title, within, NO_HARM_MIN_RUNS, NO_HARM_MARGIN_POINTS)
        for title, (result, within) in held.items()
    ]
    losses = pd.concat(losses, ignore_index=True).sort_values("points_of_protocol_lost", ascending=False) if losses else pd.DataFrame()
    return Evaluation(
        steps, pair_summary(pair_frames), few_shot, time.perf_counter() - started, refit, losses.reset_index(drop=True),
        pair_group_summary(pair_frames),
    )


def gpu_generations(ds: Dataset) -> np.ndarray:
    """Each run's GPU generation (the catalogue's architecture: Volta, Ampere ...); None for CPU hosts."""
    devices = catalog_arrays().hardware.devices
    names = np.array([d.architecture if d.kind == "gpu" else None for d in devices] + [None], object)
    return np.where(ds.resolved.ok, names[ds.resolved.device_index], None)


def _transfer_protocols(ds: Dataset, summarise, results: dict, params: dict, rounds: int, confidence_level: float, note) -> list[pd.DataFrame]:
    """What a new GPU generation, model, framework or source does to each predictor.

    Each group leaves every source's training rows, not only the scored ones:
    a held-out framework is one the model has never seen. ``summarise(title,
    result, by[, within])`` records each protocol's figures (as in
    :func:`run_evaluation`).
    """
    source, runs = source_of(ds), ds.runs
    pair_frames: list[pd.DataFrame] = []
    generation = gpu_generations(ds)
    if len(set(generation[generation != None])) > 1:  # noqa: E711
        note("leave one GPU generation out (every source)")
        result = held_out(ds, "generation", generation, generation != None, params, rounds, confidence_level, pair_kinds=("gpu",))  # noqa: E711
        summarise("All sources, leave one GPU generation out", result, generation)
        pair_frames += result.pair_frames
    model = network_of(text_keys(runs["model"]).to_numpy(object))
    scored = (source == LAMBDA) | np.isin(source, DLE_SOURCES)
    if scored.any():
        note("leave one model out (Lambda and DeepLearningExamples)")
        result = held_out(ds, "model", model, scored, params, rounds, confidence_level)
        summarise("Lambda and DeepLearningExamples, leave one model out", result, np.where(scored, model, None), within="gpu")
    framework = text_keys(runs["framework"]).to_numpy(object)
    scored = (source == DLPERF_SOURCE) | np.isin(source, DLE_SOURCES)
    if len(set(framework[scored])) > 1:
        note("leave one framework out (DLPerf and DeepLearningExamples)")
        result = held_out(ds, "framework", framework, scored, params, rounds, confidence_level, pair_kinds=("gpus",), pair_suffix=" (DLPerf, DLE)")
        summarise("DLPerf and DeepLearningExamples, leave one framework out", result, np.where(scored, framework, None))
        pair_frames += result.pair_frames
    is_mlperf = mlperf_rows(source)
    if is_mlperf.any() and (~is_mlperf).any():
        note("cross-source: trained without MLPerf, predicting MLPerf")
        group = np.where(is_mlperf, "MLPerf (all rounds)", "other sources")
        result = held_out(ds, "cross-source", group, is_mlperf, params, rounds, confidence_level, pair_kinds=("gpus",), pair_suffix=" (MLPerf)")
        results["cross-source"] = result
        summarise("MLPerf (all rounds), trained on the other sources only, by benchmark", result, np.where(is_mlperf, model, None))
        pair_frames += result.pair_frames
    return pair_frames


def _folds_of(config: np.ndarray, n_folds: int = 5) -> np.ndarray:
    """Configurations dealt round-robin into ``n_folds`` groups (whole configurations per fold)."""
    labels = sorted(set(config))
    fold = {label: f"fold-{i % n_folds}" for i, label in enumerate(labels)}
    return np.array([fold[c] for c in config], object)


def few_shot_refit(ds: Dataset, result: HeldOut | None, groups: np.ndarray, seed: int = 0, ks: tuple[int, ...] = FEW_SHOT_K) -> pd.DataFrame:
    """MAPE on the rest of a held-out GPU type after a refit on k of its runs, against no refit.

    The shrinkage prior (kappa) of each GPU type is estimated on the held-out
    residuals of the other types only, as a user's cluster is never part of
    the prior the shipped model carries. ``mape_best_offset`` is a bound, not
    a method: the rest's error after the one log offset that suits the rest
    best (:func:`training.refit.best_offset`), which no refit of an offset
    beats however many runs it is given.
    """
    if result is None:
        return pd.DataFrame()
    rng = np.random.default_rng(seed)
    scored = result.scored
    residual = ds.log_measured_s - result.log_residual_model_s
    records = []
    for group in pd.unique(groups[scored]):
        rows = np.flatnonzero(scored & (groups == group))
        if len(rows) < max(ks) + 5:
            continue
        others = scored & (groups != group)
        if len(pd.unique(groups[others])) < 2:  # a prior needs the spread of at least two other types
            continue
        kappa = random_effects_kappa(residual[others], groups[others])
        for k in ks:
            before, after, best = [], [], []
            for _ in range(FEW_SHOT_REPEATS):
                chosen = rng.choice(rows, k, replace=False)
                rest = np.setdiff1d(rows, chosen)
                offset = shrunken_offset(residual[chosen], kappa)
                before.append(np.mean(np.abs(np.exp(-residual[rest]) - 1)))
                after.append(np.mean(np.abs(np.exp(-(residual[rest] - offset)) - 1)))
                best.append(np.mean(np.abs(np.exp(-(residual[rest] - best_offset(residual[rest]))) - 1)))
            records.append({"group": group, "k": k, "mape_no_refit": np.mean(before), "mape_refit": np.mean(after), "mape_best_offset": np.mean(best)})
    frame = pd.DataFrame(records)
    if len(frame):
        columns = ["mape_no_refit", "mape_refit", "mape_best_offset"]
        overall = frame.groupby("k")[columns].mean().reset_index().assign(group="all (mean over GPU types)")
        frame = pd.concat([frame, overall], ignore_index=True)
    return frame


def _percent(value) -> float | None:
    """A fraction as a percent number, ``None`` where it is missing or not finite."""
    if value is None:
        return None
    value = float(value)
    return 100.0 * value if math.isfinite(value) else None


def _stats(record: dict, n_column: str, columns: dict[str, str | None]) -> dict:
    out = {"n": int(record[n_column])}
    for name, column in columns.items():
        out[name] = _percent(record.get(column)) if column is not None else None
    return out


def evaluation_summary(ev: Evaluation) -> dict:
    """The figures of the report as plain JSON values (percentages; ``None`` where undefined)."""
    protocols = {}
    for name, frame in ev.steps.items():
        entry: dict = {"all": None, "groups": {}}
        for record in frame.to_dict("records"):
            stats = _stats(record, "n", STEP_STATS)
            if record["group"] == "all":
                entry["all"] = stats
            else:
                entry["groups"][str(record["group"])] = stats
        protocols[name] = entry
    speedups = {}
    if ev.pairs is not None and len(ev.pairs):
        speedups = {str(r["kind"]): _stats(r, "pairs", PAIR_STATS) for r in ev.pairs.to_dict("records")}
    speedup_groups: dict = {}
    for r in ev.pair_groups.to_dict("records") if len(ev.pair_groups) else []:
        speedup_groups.setdefault(str(r["kind"]), {})[str(r["group"])] = _stats(
            r, "pairs", {"coverage": "coverage", "mean_relative_width": "mean_relative_width"}
        )
    refits = {name: _refit_stats(frame) for name, frame in (
        ("Lambda, k runs of a held-out GPU type", ev.few_shot),
        ("MLPerf (all rounds), trained on the other sources, k runs of each GPU type", ev.cross_source_refit),
    ) if len(frame)}
    losses = [
        {
            "protocol": str(r["protocol"]), "group": str(r["group"]), "within": str(r["within"]), "n": int(r["n"]),
            "physics_mape": _percent(r["physics_mape"]), "residual_mape": _percent(r["residual_mape"]),
            "points_of_protocol_lost": round(float(r["points_of_protocol_lost"]), 3),
        }
        for r in (ev.losses.to_dict("records") if len(ev.losses) else [])
    ]  # fmt: skip
    return {
        "protocols": protocols, "speedups": speedups, "speedup_groups": speedup_groups,
        "no_harm_violations": no_harm_violations(protocols),
        "losses_within_groups": losses, "refits": refits,
    }  # fmt: skip


def _refit_stats(frame: pd.DataFrame) -> dict:
    """Per k: MAPE on a group's other runs without and with the refit, and after the best offset in
    hindsight where the frame has it (means over groups), in percent."""
    overall = frame[frame["group"].astype(str).str.startswith("all")]
    names = [c for c in ("mape_no_refit", "mape_refit", "mape_best_offset") if c in overall.columns]
    return {str(int(r["k"])): {name: _percent(r[name]) for name in names} for r in overall.to_dict("records")}


def no_harm_violations(protocols: dict) -> list[dict]:
    """Every group (n >= NO_HARM_MIN_RUNS) whose residual MAPE exceeds physics MAPE + NO_HARM_MARGIN_POINTS."""
    found = []
    for protocol, entry in protocols.items():
        for group, stats in entry["groups"].items():
            residual, physics = stats["residual_mape"], stats["physics_mape"]
            if stats["n"] < NO_HARM_MIN_RUNS or residual is None or physics is None:
                continue
            if residual > physics + NO_HARM_MARGIN_POINTS:
                found.append({"protocol": protocol, "group": group, "n": stats["n"], "residual_mape": residual, "physics_mape": physics})
    return found


def no_harm_markdown(violations: list[dict]) -> str:
    """The no-harm section of report.md, generated from :func:`no_harm_violations`."""
    head = (
        "## No-harm rule\n\n"
        f"In every held-out group with at least {NO_HARM_MIN_RUNS} runs, the residual's MAPE should be at most "
        f"the physics-alone MAPE + {NO_HARM_MARGIN_POINTS:g} points. "
    )
    if not violations:
        return head + "No group breaks it.\n"
    frame = pd.DataFrame(violations)
    frame["residual_mape"] = frame["residual_mape"].map(lambda v: f"{v:.1f}%")
    frame["physics_mape"] = frame["physics_mape"].map(lambda v: f"{v:.1f}%")
    return head + f"Groups that break it ({len(violations)}):\n\n" + markdown_table(frame)


#: The report lists this many of the cells that lose the most.
LOSSES_SHOWN = 15


def losses_markdown(losses: pd.DataFrame) -> str:
    """The report's section on losses inside held-out groups (:func:`training.evaluate.losses_within_groups`)."""
    head = (
        "## Where the residual loses inside a held-out group\n\n"
        "A held-out group can keep the no-harm rule while a part of it breaks it. Each cell below is a model "
        f"(a GPU type where the group is a model) inside a held-out group, of at least {NO_HARM_MIN_RUNS} runs, "
        f"where the residual's MAPE exceeds the physics-alone MAPE by more than {NO_HARM_MARGIN_POINTS:g} points; "
        "`points_of_protocol_lost` is what the cell adds to the whole protocol's MAPE against the physics alone. "
    )
    if not len(losses):
        return head + "No cell does.\n"
    shown = losses.head(LOSSES_SHOWN)
    more = f" ({len(losses)} in all; the {len(shown)} that cost the most)" if len(losses) > len(shown) else f" ({len(losses)})"
    return head + f"Cells{more}:\n\n" + markdown_table(shown)


def write_summary(ev: Evaluation, out_dir: Path) -> Path:
    """``summary.json`` in ``out_dir`` (strict JSON: no NaN or infinity)."""
    path = Path(out_dir) / "summary.json"
    path.write_text(json.dumps(evaluation_summary(ev), indent=2, allow_nan=False) + "\n")
    return path


def markdown_table(frame: pd.DataFrame) -> str:
    if frame is None or not len(frame):
        return "_no rows_\n"
    shown = frame.copy()
    for column in shown.columns:
        if shown[column].dtype.kind == "f":
            is_share = any(t in column for t in ("mape", "ape", "within", "coverage", "width", "direction"))
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else (f"{100 * v:.1f}%" if is_share else f"{v:.3g}"))
    header = "| " + " | ".join(map(str, shown.columns)) + " |"
    rule = "|" + "|".join("---" for _ in shown.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    return "\n".join([header, rule, *body]) + "\n"


def write_report(ev: Evaluation, out_dir: Path, ds: Dataset, params: dict, rounds: int) -> Path:
    """report.md, PNGs and summary.json in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = [
        "# Held-out evaluation of the step-time predictor\n",
        f"{len(ds)} measured runs; XGBoost settings {params}, {rounds} rounds. "
        f"Evaluation took {ev.seconds:.0f} s. Three predictors: **analytical** (the PAI breakdown, "
        f"{ds.baseline}), **pure_ml** (the same XGBoost on raw job fields and catalogue figures, no "
        "physics), **residual** (analytical x learned residual). Coverage is that of the residual "
        "model's 90% conformal intervals; width is their mean width relative to the prediction.\n",
    ]
    for title, frame in ev.steps.items():
        sections.append(f"## {title}\n\n{markdown_table(frame)}")
        slug = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")
        body = frame[frame["group"] != "all"]
        if len(body) > 1:
            fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(body) + 2), 4))
            x = np.arange(len(body))
            for i, name in enumerate(("analytical", "pure_ml", "residual")):
                ax.bar(x + (i - 1) * 0.27, 100 * body[f"{name}_mape"], width=0.27, label=name)
            ax.set_xticks(x, body["group"].astype(str), rotation=60, ha="right", fontsize=7)
            ax.set_ylabel("MAPE (%)")
            ax.set_yscale("log")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(out_dir / f"{slug}.png", dpi=110)
            plt.close(fig)
            sections.append(f"![{title}]({slug}.png)\n")
    sections.append("## Speedups of held-out pairs of runs\n\n" + markdown_table(ev.pairs))
    sections.append(
        "Each pair's two runs were held out together; `direction_right` is the share of pairs whose "
        "predicted speedup is on the right side of 1x. `groups` counts the held-out groups (GPU types, "
        "generations, frameworks, configurations) with 30 pairs of the kind or more; `groups_below`, "
        "`groups_within` and `groups_above` how many of them the 90% intervals cover below 88%, within "
        "88-92% and above 92%; `group_coverage_gap` their mean distance from 90%. The pooled coverage "
        "weighs groups by their pairs (the H100 SXM holds about two thirds of Lambda's fp32 -> fp16 pairs); "
        "the per-group figures weigh each held-out group alike. Per group in `summary.json`'s `speedup_groups`.\n"
    )
    sections.append("## Refit to a new cluster (few-shot, Lambda GPU types held out)\n\n" + markdown_table(
        ev.few_shot[ev.few_shot["group"].astype(str).str.startswith("all")] if len(ev.few_shot) else ev.few_shot
    ))
    sections.append(
        "k runs of the held-out GPU type refit a shrunken log offset (see `training/refit.py`); MAPE on "
        f"that type's other runs, mean over {FEW_SHOT_REPEATS} draws and over GPU types. `mape_best_offset` "
        "is the bound no offset beats: those runs after the offset that suits them best, "
        "which a refit of an offset could at most reach.\n"
    )
    if len(ev.cross_source_refit):
        sections.append(
            "## MLPerf after a refit of the model trained without it\n\n" + markdown_table(ev.cross_source_refit)
            + f"\n{CROSS_SOURCE_K[0]} MLPerf runs of a GPU type refit the shrunken log offset of the model trained on "
            f"the other sources only; MAPE on that type's other MLPerf runs, mean over {FEW_SHOT_REPEATS} draws.\n"
        )
    sections.append(no_harm_markdown(evaluation_summary(ev)["no_harm_violations"]))
    sections.append(losses_markdown(ev.losses))
    path = out_dir / "report.md"
    path.write_text("\n".join(sections))
    write_summary(ev, out_dir)
    return path
