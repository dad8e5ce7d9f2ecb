"""The fleet report's numbers: the PAI study's views computed on a scored fleet (see :mod:`predictor.fleet_report`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from features.analytical import COMPONENTS
from features.fields import ARCHITECTURES, FLAT_FIELDS
from features.physics import STEP_PARTS
from features.resolve import resolve
from features.table import RULES, JobTable, check_column, validate_columns
from predictor.fleet_configs import distinct_configs
from predictor.fleet_layout import LAYOUT_PARTS, layout_parts_s
from predictor.fleet_measured import MeasuredCheck, measured_check
from predictor.fleet_scoring import score_frame

#: Wang et al. 2019, abstract: communication "takes almost 62% of the total execution time ... on average".
PAI_COMMUNICATION_SHARE = 0.62
#: Wang et al. 2019, abstract: "60% of PS/Worker workloads can be potentially sped up" on AllReduce over NVLink.
PAI_PS_TO_ALLREDUCE_SHARE_FASTER = 0.60
#: Wang et al. 2019, abstract: "on average 1.7X speedup" from 25 Gbps to 100 Gbps Ethernet.
PAI_ETHERNET_25_TO_100_SPEEDUP = 1.7

COMPONENT_COLUMNS = ("io_s", "compute_s", "memory_s", "comm_s")
NETWORK_ARCHITECTURES = ("ps-worker", "allreduce-cluster")
TOP_JOBS = 10


@dataclass(frozen=True)
class Weights:
    """Per-job GPU time used to weight the fleet figures."""

    values: np.ndarray
    basis: str
    unit: str


@dataclass(frozen=True)
class ShareRow:
    """Shares of a step's parts for one group of jobs: the PAI components of the additive step, or
    the roofline physics' parts (:data:`features.physics.STEP_PARTS`)."""

    group: str
    jobs: int
    per_job: dict[str, float]
    gpu_time: dict[str, float]


@dataclass(frozen=True)
class SpeedupView:
    """Speedups of a group of jobs under one scenario."""

    title: str
    scenario: str
    jobs: int
    not_applicable: int
    share_faster: float
    share_faster_gpu_time: float
    mean_speedup: float
    median_speedup: float
    gpu_time_speedup: float
    #: With a learned model: share of jobs faster even at the lower end of the speedup interval.
    share_faster_at_lower_bound: float | None = None
    study: dict[str, float] = field(default_factory=dict)
    speedups: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    #: What the numbers are: "speedup" (per step), or "throughput ratio" where the scenario changes the
    #: samples per step (the same samples then take another number of steps).
    measure: str = "speedup"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("speedups")
        return data


@dataclass(frozen=True)
class MemoryView:
    """Predicted jobs whose estimated memory per GPU exceeds their GPU's (``memory_share_of_gpu`` > 1)."""

    estimated: int  # predicted jobs with an estimate
    over: int
    over_by_gpu: dict[str, int]  # the GPUs with the most such jobs (at most 10), most first
    target_estimated: int  # under a scenario: speedups scored whose target has an estimate
    target_over: int
    accumulable: int = 0  # of ``over``, those some number of gradient-accumulation passes fits (``passes_to_fit``)
    median_passes_to_fit: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def memory_view(scored: pd.DataFrame) -> MemoryView | None:
    """The jobs over their GPU's memory, overall and by GPU (None without the column)."""
    if "memory_share_of_gpu" not in scored.columns:
        return None
    share = scored["memory_share_of_gpu"].to_numpy(float)
    estimated = np.isfinite(scored["step_time_s"].to_numpy(float)) & np.isfinite(share)
    with np.errstate(invalid="ignore"):
        over = estimated & (share > 1.0)
    by_gpu = scored.loc[over, "gpu"].astype(str).value_counts().head(10) if "gpu" in scored.columns else pd.Series(dtype=int)
    target_estimated = target_over = 0
    if "target_memory_share_of_gpu" in scored.columns and "speedup" in scored.columns:
        target = scored["target_memory_share_of_gpu"].to_numpy(float)
        scored_speedup = np.isfinite(scored["speedup"].to_numpy(float)) & np.isfinite(target)
        target_estimated = int(scored_speedup.sum())
        with np.errstate(invalid="ignore"):
            target_over = int((scored_speedup & (target > 1.0)).sum())
    passes = scored["passes_to_fit"].to_numpy(float) if "passes_to_fit" in scored.columns else np.full(len(scored), np.nan)
    accumulable = over & np.isfinite(passes)
    median = float(np.median(passes[accumulable])) if accumulable.any() else None
    return MemoryView(int(estimated.sum()), int(over.sum()), {str(k): int(v) for k, v in by_gpu.items()}, target_estimated, target_over,
                      int(accumulable.sum()), median)


@dataclass(frozen=True)
class FleetReport:
    """Every number of the report, and the files written."""

    rows: int
    scored: int
    error_rows: int
    weight_basis: str
    weight_unit: str
    overlap: str
    method: str
    shares: list[ShareRow]
    roofline_shares: list[ShareRow]
    #: Layout jobs (transformers with TP/PP/CP): their own parts, which the two tables above leave out.
    layout_shares: list[ShareRow]
    scenario: SpeedupView | None
    ps_to_allreduce: SpeedupView
    ethernet_upgrade: SpeedupView
    top_gain_scenario: str
    top_gains: pd.DataFrame
    total_gain: float
    files: list[str]
    #: The fleet's measured steps against the predictions (``jobs`` 0 where it gives none).
    measured: MeasuredCheck | None = None
    #: The jobs that may not fit their GPU's memory (None where the scoring has no estimate).
    memory: MemoryView | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "scored": self.scored,
            "error_rows": self.error_rows,
            "weight_basis": self.weight_basis,
            "weight_unit": self.weight_unit,
            "overlap": self.overlap,
            "method": self.method,
            "shares": [asdict(row) for row in self.shares],
            "study_communication_share": PAI_COMMUNICATION_SHARE,
            "roofline_shares": [asdict(row) for row in self.roofline_shares],
            "layout_shares": [asdict(row) for row in self.layout_shares],
            "scenario": None if self.scenario is None else self.scenario.to_dict(),
            "ps_to_allreduce": self.ps_to_allreduce.to_dict(),
            "ethernet_upgrade": self.ethernet_upgrade.to_dict(),
            "top_gain_scenario": self.top_gain_scenario,
            "total_gain": self.total_gain,
            "top_gains": json.loads(self.top_gains.to_json(orient="records")),
            "files": self.files,
            "measured": None if self.measured is None else self.measured.to_dict(),
            "memory": None if self.memory is None else self.memory.to_dict(),
        }


# -- the numbers -------------------------------------------------------------


def gpu_time_weights(scored: pd.DataFrame) -> Weights:
    """GPU time per job: ``gpu_hours``, else GPUs x step time x ``steps``, else GPUs x step time."""
    gpus = scored["total_gpus"].to_numpy(float)
    step = scored["step_time_s"].to_numpy(float)
    if "gpu_hours" in scored.columns:
        values = pd.to_numeric(scored["gpu_hours"], errors="coerce").to_numpy(float, na_value=np.nan)
        return Weights(values, "the fleet's gpu_hours column", "GPU-hours")
    if "steps" in scored.columns:
        steps = pd.to_numeric(scored["steps"], errors="coerce").to_numpy(float, na_value=np.nan)
        return Weights(gpus * step * steps / 3600.0, "total GPUs x predicted step time x the steps column", "GPU-hours")
    return Weights(gpus * step, "total GPUs x predicted step time (one step per job: no steps or gpu_hours column)", "GPU-seconds per step")


def _architectures(scored: pd.DataFrame) -> np.ndarray:
    """Each row's architecture as the job spec reads it (case-folded, default ``single``)."""
    if "architecture" not in scored.columns:
        return np.full(len(scored), "single", object)
    raw = np.asarray(scored["architecture"].to_numpy(dtype=object, na_value=None), dtype=object)
    table = JobTable({}, np.full(len(scored), None, object), np.zeros(len(scored), bool))
    return check_column(table, RULES["architecture"], raw)


def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    ok = np.isfinite(values) & np.isfinite(weights) & (weights > 0)
    return float(np.sum(values[ok] * weights[ok]) / np.sum(weights[ok])) if ok.any() else float("nan")


def component_shares(scored: pd.DataFrame, weights: Weights, architecture: np.ndarray) -> list[ShareRow]:
    """Shares of io, compute, memory and communication in the additive step time, overall and per architecture."""
    seconds = np.stack([scored[c].to_numpy(float) for c in COMPONENT_COLUMNS], axis=1)
    return _share_rows(seconds, COMPONENTS, weights, architecture)


def roofline_parts_s(scored: pd.DataFrame) -> np.ndarray:
    """Seconds of each part of the roofline physics (:data:`features.physics.STEP_PARTS`), rows x parts.

    The physics a learned model starts from, whatever the fleet was scored
    with; computed once per distinct job configuration. A row without a
    prediction has none (NaN).
    """
    inverse, distinct, k = distinct_configs(scored)
    resolved = resolve(validate_columns(distinct, k))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        parts = resolved.breakdown().physics.parts_s()
    parts[~resolved.ok] = np.nan
    parts = parts[inverse]
    parts[~np.isfinite(scored["step_time_s"].to_numpy(float))] = np.nan
    return parts


def roofline_shares(scored: pd.DataFrame, weights: Weights, architecture: np.ndarray) -> list[ShareRow]:
    """Shares of the roofline physics' parts in its step time, overall and per architecture."""
    return _share_rows(roofline_parts_s(scored), STEP_PARTS, weights, architecture)


def layout_shares(scored: pd.DataFrame, weights: Weights) -> list[ShareRow]:
    """Shares of a layout job's parts (:data:`predictor.fleet_layout.LAYOUT_PARTS`) in its step, over the layout jobs.

    Recomputed from the job columns once per distinct configuration, as the
    fleet scored them (the layout model alone); a row without a prediction has none.
    """
    if not len(scored):
        return []
    inverse, distinct, k = distinct_configs(scored)
    parts = layout_parts_s(distinct, k)[inverse]
    parts[~np.isfinite(scored["step_time_s"].to_numpy(float))] = np.nan
    return _share_rows(parts, tuple(LAYOUT_PARTS.values()), weights, np.full(len(scored), ""), everyone="layout jobs")


def _share_rows(
    seconds: np.ndarray, names: Sequence[str], weights: Weights, architecture: np.ndarray, everyone: str = "all jobs"
) -> list[ShareRow]:
    """Each part's share of the step (``seconds``: rows x parts, adding up to the step) by group of jobs."""
    total = seconds.sum(axis=1)
    valid = np.isfinite(total) & (total > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = seconds / total[:, None]
    groups = [(everyone, valid)] + [(a, valid & (architecture == a)) for a in ARCHITECTURES]
    rows = []
    for name, mask in groups:
        if not mask.any():
            continue
        rows.append(
            ShareRow(
                group=name,
                jobs=int(mask.sum()),
                per_job={c: float(shares[mask, i].mean()) for i, c in enumerate(names)},
                gpu_time={c: _weighted_mean(shares[mask, i], weights.values[mask]) for i, c in enumerate(names)},
            )
        )
    return rows


def _speedup_view(
    title: str,
    scenario: str,
    speedup: np.ndarray,
    weights: np.ndarray,
    gpu_ratio: np.ndarray | None = None,
    study: dict | None = None,
    lower: np.ndarray | None = None,
    measure: str = "speedup",
) -> SpeedupView:
    """Summary of ``speedup`` (NaN where the scenario does not apply) with GPU-time weights."""
    ok = np.isfinite(speedup)
    surely = None if lower is None or not ok.any() else float(np.mean(lower[ok] > 1.0))
    s, w = speedup[ok], weights[ok]
    ratio = np.ones(len(s)) if gpu_ratio is None else gpu_ratio[ok]
    wok = np.isfinite(w) & (w > 0)
    after = np.sum(w[wok] * ratio[wok] / s[wok])
    return SpeedupView(
        title=title,
        scenario=scenario,
        jobs=int(ok.sum()),
        not_applicable=int((~ok).sum()),
        share_faster=float(np.mean(s > 1.0)) if len(s) else float("nan"),
        share_faster_gpu_time=float(np.sum(w[wok] * (s[wok] > 1.0)) / np.sum(w[wok])) if wok.any() else float("nan"),
        mean_speedup=float(np.mean(s)) if len(s) else float("nan"),
        median_speedup=float(np.median(s)) if len(s) else float("nan"),
        gpu_time_speedup=float(np.sum(w[wok]) / after) if wok.any() and after > 0 else float("nan"),
        share_faster_at_lower_bound=surely,
        study=study or {},
        speedups=s,
        measure=measure,
    )


def _job_columns(scored: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    return scored.loc[mask, [c for c in FLAT_FIELDS if c in scored.columns]]


def _rescored_speedup(jobs: pd.DataFrame, to: Sequence[str], scoring: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """Speedups of ``jobs`` under ``to`` (and their lower bounds, with a learned model), scored as the fleet was."""
    scored = score_frame(jobs, to, **scoring)
    lower = scored["speedup_lower"].to_numpy(float) if "speedup_lower" in scored.columns else None
    return scored["speedup"].to_numpy(float), lower


def ps_to_allreduce_view(scored: pd.DataFrame, weights: Weights, architecture: np.ndarray, scoring: dict) -> SpeedupView:
    """PS/Worker jobs rewritten to AllReduce over their GPU's NVLink (GPUs without one: not applicable)."""
    mask = (architecture == "ps-worker") & np.isfinite(scored["step_time_s"].to_numpy(float))
    speedup, lower = _rescored_speedup(_job_columns(scored, mask), ["allreduce-nvlink"], scoring)
    return _speedup_view(
        "PS/Worker jobs on AllReduce over NVLink",
        "allreduce-nvlink",
        speedup,
        weights.values[mask],
        study={"share_faster": PAI_PS_TO_ALLREDUCE_SHARE_FASTER},
        lower=lower,
    )


def ethernet_upgrade_view(scored: pd.DataFrame, weights: Weights, architecture: np.ndarray, scoring: dict) -> SpeedupView:
    """Jobs whose gradients cross the network, placed on 25 GbE and then on 100 GbE."""
    mask = np.isin(architecture, NETWORK_ARCHITECTURES) & np.isfinite(scored["step_time_s"].to_numpy(float))
    jobs = _job_columns(scored, mask).assign(network="ethernet-25g")
    speedup, lower = _rescored_speedup(jobs, ["ethernet-100g"], scoring)
    return _speedup_view(
        "Multi-node jobs, 25 GbE to 100 GbE",
        "network=ethernet-25g -> ethernet-100g",
        speedup,
        weights.values[mask],
        study={"mean_speedup": PAI_ETHERNET_25_TO_100_SPEEDUP},
        lower=lower,
    )


def top_gains(
    scored: pd.DataFrame, weights: Weights, speedup: np.ndarray, gpu_ratio: np.ndarray, n: int = TOP_JOBS, measure: str = "speedup",
) -> tuple[pd.DataFrame, float]:
    """The ``n`` jobs that would save the most GPU time, and the fleet's net saving.

    A job's saving is its GPU time x (1 - target GPUs / baseline GPUs /
    speedup): the same samples at the target's throughput and GPU count
    (``speedup`` is the throughput ratio where the scenario changes the samples
    per step, and ``measure`` names it).
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        gain = weights.values * (1.0 - gpu_ratio / speedup)
    ok = np.isfinite(gain)
    order = np.argsort(-np.where(ok, gain, -np.inf), kind="stable")[:n]
    order = order[ok[order] & (gain[order] > 0)]
    shown = [c for c in ("name", "model", "architecture", "gpu", "network") if c in scored.columns]
    table = scored.iloc[order][shown].copy()
    table = table.astype({c: object for c in shown})
    table["total_gpus"] = scored["total_gpus"].to_numpy(float)[order]
    table[measure] = speedup[order]
    table[weights.unit] = weights.values[order]
    table[f"{weights.unit} saved"] = gain[order]
    table.insert(0, "row", order)
    return table.reset_index(drop=True), float(np.sum(gain[ok]))


def build_report(
    scored: pd.DataFrame,
    to: Sequence[str] = (),
    overlap: str = "none",
    method: str = "analytical",
    model: str = "default",
    confidence_level: float = 0.9,
) -> FleetReport:
    """All the report's numbers for a scored fleet (the output of :func:`predictor.fleet.score_fleet`).

    ``overlap``, ``model`` and ``confidence_level`` must be those the fleet
    was scored with: the standard views score parts of it again.
    """
    scoring = {"overlap": overlap, "model": model, "confidence_level": confidence_level}
    weights = gpu_time_weights(scored)
    architecture = _architectures(scored)
    step = scored["step_time_s"].to_numpy(float)
    shares = component_shares(scored, weights, architecture)
    physics_shares = roofline_shares(scored, weights, architecture)
    transformer_shares = layout_shares(scored, weights)
    ps_view = ps_to_allreduce_view(scored, weights, architecture, scoring)
    ethernet_view = ethernet_upgrade_view(scored, weights, architecture, scoring)

    scenario_view = None
    if to and "speedup" in scored.columns:
        speedup = scored["speedup"].to_numpy(float)
        # Where the scenario changes the samples per step, the same samples take another number of
        # steps: the view and the GPU time saved compare throughput, not steps.
        throughput = scored["throughput_ratio"].to_numpy(float) if "throughput_ratio" in scored.columns else speedup
        per_sample = bool((np.isfinite(speedup) & (np.abs(throughput - speedup) > 1e-9 * np.abs(speedup))).any())
        measure = "throughput ratio" if per_sample else "speedup"
        samples = throughput / speedup if per_sample else np.ones(len(speedup))
        values = throughput if per_sample else speedup
        ratio = scored["target_total_gpus"].to_numpy(float) / scored["total_gpus"].to_numpy(float)
        valid = np.isfinite(step)
        lower = (scored["speedup_lower"].to_numpy(float) * samples)[valid] if "speedup_lower" in scored.columns else None
        scenario_view = _speedup_view("Scenario", " + ".join(to), values[valid], weights.values[valid], ratio[valid], lower=lower, measure=measure)
        table, total = top_gains(scored, weights, values, ratio, measure=measure)
        gain_scenario = " + ".join(to)
    else:
        mask = (architecture == "ps-worker") & np.isfinite(step)
        speedup = np.full(len(scored), np.nan)
        speedup[mask] = _rescored_speedup(_job_columns(scored, mask), ["allreduce-nvlink"], scoring)[0]
        table, total = top_gains(scored, weights, speedup, np.ones(len(scored)))
        gain_scenario = "allreduce-nvlink (PS/Worker jobs)"
    errors = scored["error"].notna().to_numpy()
    return FleetReport(
        rows=len(scored),
        scored=int(np.isfinite(step).sum()),
        error_rows=int(errors.sum()),
        weight_basis=weights.basis,
        weight_unit=weights.unit,
        overlap=overlap,
        method=method,
        shares=shares,
        roofline_shares=physics_shares,
        layout_shares=transformer_shares,
        scenario=scenario_view,
        ps_to_allreduce=ps_view,
        ethernet_upgrade=ethernet_view,
        top_gain_scenario=gain_scenario,
        top_gains=table,
        total_gain=total,
        files=[],
        measured=measured_check(scored, confidence_level),
        memory=memory_view(scored),
    )
