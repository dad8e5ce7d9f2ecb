"""The fleet report: the Alibaba-PAI study's views, computed on the user's own fleet.

Wang et al., "Characterizing Deep Learning Training Workloads on
Alibaba-PAI" (IISWC 2019, arXiv:1910.05930), summarise their cluster in three
numbers (abstract): gradient/weight communication takes almost 62% of the
execution time on average; 60% of PS/Worker workloads would speed up on
AllReduce over NVLink; and upgrading Ethernet from 25 to 100 Gbit/s gives
1.7x on average. The report computes the same views for a scored fleet and
prints each next to the study's figure:

* share of step time per component (io, compute, memory, communication) of
  the PAI additive breakdown, over the fleet and per architecture;
* the speedup distribution under the run's scenario (``--to``), if any;
* PS/Worker jobs moved to AllReduce over their GPU's NVLink, and the jobs
  whose gradients cross the network (PS/Worker, multi-node AllReduce) placed
  on 25 GbE and then on 100 GbE, whatever ``--to`` says;
* the jobs with the most GPU-hours to gain.

Each figure comes two ways. *Per job* is the plain mean over jobs, as the
study reports its averages over workloads. *GPU time* weights each job by
the GPU time it uses: the ``gpu_hours`` column if the fleet has one, else
total GPUs x predicted step time x the ``steps`` column, else total GPUs x
step time (GPU-seconds per step, every job counted for one step). A weighted
speedup is the fleet's total GPU time before over after.

The report is Markdown with PNG figures next to it, plus ``summary.json`` with
every number: Markdown renders where the fleet's owners already read text
(repository browsers, notebooks, editors), diffs cleanly between two runs,
and keeps the figures as files that drop into slides; the JSON feeds
dashboards.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from features.analytical import COMPONENTS
from features.errors import SpecError
from features.fields import ARCHITECTURES, FLAT_FIELDS
from features.table import RULES, JobTable, check_column
from predictor.fleet import score_frame

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
    """Component shares of the additive step time for one group of jobs."""

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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("speedups")
        return data


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
    scenario: SpeedupView | None
    ps_to_allreduce: SpeedupView
    ethernet_upgrade: SpeedupView
    top_gain_scenario: str
    top_gains: pd.DataFrame
    total_gain: float
    files: list[str]

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
            "scenario": None if self.scenario is None else self.scenario.to_dict(),
            "ps_to_allreduce": self.ps_to_allreduce.to_dict(),
            "ethernet_upgrade": self.ethernet_upgrade.to_dict(),
            "top_gain_scenario": self.top_gain_scenario,
            "total_gain": self.total_gain,
            "top_gains": json.loads(self.top_gains.to_json(orient="records")),
            "files": self.files,
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
    total = seconds.sum(axis=1)
    valid = np.isfinite(total) & (total > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = seconds / total[:, None]
    groups = [("all jobs", valid)] + [(a, valid & (architecture == a)) for a in ARCHITECTURES]
    rows = []
    for name, mask in groups:
        if not mask.any():
            continue
        rows.append(
            ShareRow(
                group=name,
                jobs=int(mask.sum()),
                per_job={c: float(shares[mask, i].mean()) for i, c in enumerate(COMPONENTS)},
                gpu_time={c: _weighted_mean(shares[mask, i], weights.values[mask]) for i, c in enumerate(COMPONENTS)},
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


def top_gains(scored: pd.DataFrame, weights: Weights, speedup: np.ndarray, gpu_ratio: np.ndarray, n: int = TOP_JOBS) -> tuple[pd.DataFrame, float]:
    """The ``n`` jobs that would save the most GPU time, and the fleet's net saving.

    A job's saving is its GPU time x (1 - target GPUs / baseline GPUs /
    speedup): the same work at the target's step time and GPU count.
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
    table["speedup"] = speedup[order]
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
    ps_view = ps_to_allreduce_view(scored, weights, architecture, scoring)
    ethernet_view = ethernet_upgrade_view(scored, weights, architecture, scoring)

    scenario_view = None
    if to and "speedup" in scored.columns:
        speedup = scored["speedup"].to_numpy(float)
        ratio = scored["target_total_gpus"].to_numpy(float) / scored["total_gpus"].to_numpy(float)
        valid = np.isfinite(step)
        lower = scored["speedup_lower"].to_numpy(float)[valid] if "speedup_lower" in scored.columns else None
        scenario_view = _speedup_view("Scenario", " + ".join(to), speedup[valid], weights.values[valid], ratio[valid], lower=lower)
        table, total = top_gains(scored, weights, speedup, ratio)
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
        scenario=scenario_view,
        ps_to_allreduce=ps_view,
        ethernet_upgrade=ethernet_view,
        top_gain_scenario=gain_scenario,
        top_gains=table,
        total_gain=total,
        files=[],
    )


# -- the files -----------------------------------------------------------------

_COLOURS = {"io": "tab:green", "compute": "tab:blue", "memory": "tab:orange", "communication": "tab:red"}


def _plot_shares(report: FleetReport, path: Path) -> None:
    from matplotlib.figure import Figure

    rows = report.shares
    fig = Figure(figsize=(9, 1.2 + 0.9 * (len(rows) + 1)))
    axes = fig.subplots(1, 2, sharey=True)
    labels = [f"{r.group} ({r.jobs:,})" for r in rows] + ["PAI study (communication)"]
    for ax, key, title in ((axes[0], "per_job", "mean over jobs"), (axes[1], "gpu_time", "share of GPU time")):
        left = np.zeros(len(labels))
        for component in COMPONENTS:
            values = np.array([getattr(r, key)[component] for r in rows] + [np.nan])
            if component == "communication":
                values[-1] = PAI_COMMUNICATION_SHARE
            values = np.nan_to_num(values)
            ax.barh(labels, values, left=left, color=_COLOURS[component], label=component)
            left += values
        ax.set_xlim(0, 1)
        ax.set_title(title)
        ax.set_xlabel("share of the additive step time")
    axes[0].invert_yaxis()  # shared: the fleet on top, the study's figure at the bottom
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Where the fleet's step time goes")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)


def _plot_speedups(views: list[SpeedupView], path: Path, study: list[tuple[str, float] | None]) -> None:
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig = Figure(figsize=(5 * len(views), 4))
    axes = np.atleast_1d(fig.subplots(1, len(views)))
    for ax, view, reference in zip(axes, views, study):
        s = view.speedups
        if len(s):
            low, high = np.log10(max(s.min(), 1e-3)), np.log10(max(s.max(), 1.0001))
            bins = np.logspace(min(low, -0.05), max(high, 0.05), 40)
            ax.hist(s, bins=bins, color="tab:blue", alpha=0.8)
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.axvline(1.0, color="black", lw=1, ls=":")
        if reference is not None:
            ax.axvline(reference[1], color="tab:red", lw=1.5, ls="--", label=reference[0])
            ax.legend(fontsize=8)
        faster = f"{_pct(view.share_faster)} faster"
        if "share_faster" in view.study:
            faster += f" (PAI study: {view.study['share_faster']:.0%})"
        ax.set_title(f"{view.title}\n{view.jobs:,} jobs, {faster}, mean {_x(view.mean_speedup)}", fontsize=10)
        ax.set_xlabel("speedup (baseline / target step time)")
        ax.set_ylabel("jobs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _pct(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.0%}"


def _x(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.2f}x"


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def _cell(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            return ""
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return "" if value is None else str(value)


def _markdown(report: FleetReport, images: dict[str, str]) -> str:
    overall = report.shares[0] if report.shares else None
    lines = [
        "# Fleet report",
        "",
        f"{report.rows:,} jobs: {report.scored:,} predicted, {report.rows - report.scored:,} failed validation "
        f"({'analytical model x learned residual' if report.method == 'learned' else 'analytical model'}, "
        f"{ {'none': 'PAI additive', 'roofline': 'roofline physics'}.get(report.overlap, 'overlapped')} breakdown). "
        f"GPU-time weights: {report.weight_basis} ({report.weight_unit}).",
        "",
        "## Where the step time goes",
        "",
    ]
    if overall is not None:
        lines += [
            f"Communication takes **{_pct(overall.per_job['communication'])}** of a job's step time on average "
            f"(**{_pct(overall.gpu_time['communication'])}** of the fleet's GPU time); "
            f"the PAI study found about {PAI_COMMUNICATION_SHARE:.0%}.",
            "",
        ]
    header = ["jobs", "count", *(f"{c} (per job)" for c in COMPONENTS), *(f"{c} (GPU time)" for c in COMPONENTS)]
    rows = [[r.group, f"{r.jobs:,}", *(_pct(r.per_job[c]) for c in COMPONENTS), *(_pct(r.gpu_time[c]) for c in COMPONENTS)] for r in report.shares]
    rows.append(["PAI study", "", "", "", "", f"~{PAI_COMMUNICATION_SHARE:.0%}", "", "", "", ""])
    lines += _markdown_table(header, rows) + ["", f"![component shares]({images['shares']})", ""]

    if report.scenario is not None:
        v = report.scenario
        lines += [
            f"## Scenario: {v.scenario}",
            "",
            f"{v.jobs:,} jobs scored under the scenario ({v.not_applicable:,} where it does not apply). "
            f"Median speedup {_x(v.median_speedup)}, mean {_x(v.mean_speedup)}; {_pct(v.share_faster)} of jobs faster "
            f"({_pct(v.share_faster_gpu_time)} of GPU time); the fleet's GPU time shrinks {_x(v.gpu_time_speedup)}."
            + (
                f" {_pct(v.share_faster_at_lower_bound)} are faster even at the lower end of their speedup interval."
                if v.share_faster_at_lower_bound is not None
                else ""
            ),
            "",
            f"![speedup distribution]({images['scenario']})",
            "",
        ]

    def view_row(v: SpeedupView, study: str) -> list[str]:
        return [
            v.title, f"{v.jobs:,}", f"{v.not_applicable:,}", _pct(v.share_faster), _pct(v.share_faster_gpu_time),
            _x(v.mean_speedup), _x(v.gpu_time_speedup), study,
        ]

    header = ["view", "jobs", "not applicable", "faster (per job)", "faster (GPU time)", "mean speedup", "GPU-time speedup", "PAI study"]
    lines += [
        "## The study's standard views",
        "",
        *_markdown_table(
            header,
            [
                view_row(report.ps_to_allreduce, f"{PAI_PS_TO_ALLREDUCE_SHARE_FASTER:.0%} faster"),
                view_row(report.ethernet_upgrade, f"{PAI_ETHERNET_25_TO_100_SPEEDUP}x mean"),
            ],
        ),
        "",
        "PS/Worker jobs on GPUs without NVLink cannot take the first scenario and count as not applicable. "
        "The second places every job whose gradients cross the network (PS/Worker, multi-node AllReduce) on 25 GbE, then on 100 GbE.",
        "",
        f"![standard views]({images['views']})",
        "",
        f"## Jobs with the most {report.weight_unit} to gain ({report.top_gain_scenario})",
        "",
        f"Across the fleet, {_cell(report.total_gain)} {report.weight_unit} would be saved (net of jobs that get slower).",
        "",
    ]
    if len(report.top_gains):
        table = report.top_gains
        lines += _markdown_table(list(table.columns), [[_cell(v) for v in row] for row in table.itertuples(index=False)])
    else:
        lines.append("No job gains under this scenario.")
    lines.append("")
    return "\n".join(lines)


def write_report(
    scored: pd.DataFrame,
    directory: str | Path,
    to: Sequence[str] = (),
    overlap: str = "none",
    method: str = "analytical",
    model: str = "default",
    confidence_level: float = 0.9,
) -> FleetReport:
    """Compute the report and write ``report.md``, its PNG figures and ``summary.json`` into ``directory``."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError("--report", str(directory), f"cannot create the directory ({exc.strerror})") from None
    report = build_report(scored, to, overlap, method, model, confidence_level)
    images = {"shares": "component_shares.png", "views": "standard_views.png"}
    _plot_shares(report, directory / images["shares"])
    _plot_speedups(
        [report.ps_to_allreduce, report.ethernet_upgrade],
        directory / images["views"],
        [None, (f"PAI study mean {PAI_ETHERNET_25_TO_100_SPEEDUP}x", PAI_ETHERNET_25_TO_100_SPEEDUP)],
    )
    if report.scenario is not None:
        images["scenario"] = "scenario_speedups.png"
        _plot_speedups([report.scenario], directory / images["scenario"], [None])
    (directory / "report.md").write_text(_markdown(report, images), encoding="utf-8")
    files = ["report.md", *images.values(), "summary.json"]
    report = FleetReport(**{**report.__dict__, "files": files})
    (directory / "summary.json").write_text(json.dumps(_json_safe(report.to_dict()), indent=2), encoding="utf-8")
    return report


def _json_safe(value: Any) -> Any:
    """Plain JSON values: numpy scalars unwrapped, NaN and infinities as null."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
