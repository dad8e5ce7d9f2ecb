"""The fleet report's figures (matplotlib, imported only when a report is drawn)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from features.analytical import COMPONENTS
from features.physics import STEP_PARTS
from predictor.fleet_report_text import pct, times
from predictor.fleet_report_views import PAI_COMMUNICATION_SHARE, FleetReport, ShareRow, SpeedupView

_COLOURS = {
    "io": "tab:green",
    "compute": "tab:blue",
    "memory": "tab:orange",
    "communication": "tab:red",
    "matrix operators": "tab:blue",
    "memory-bound operators": "tab:orange",
    "kernel launches": "tab:purple",
    "host overhead": "tab:pink",
    "exposed communication": "tab:red",
    "input": "tab:green",
    "tensor-parallel communication": "tab:red",
    "context-parallel communication (exposed)": "tab:brown",
    "pipeline bubble": "tab:gray",
    "pipeline transfers": "tab:olive",
    "data-parallel communication (exposed)": "tab:pink",
    "optimizer step": "tab:cyan",
}


def plot_shares(report: FleetReport, path: Path) -> None:
    """The PAI components' shares of the additive step, with the study's communication share."""
    _plot_share_rows(report.shares, COMPONENTS, path, "Where the fleet's step time goes", "share of the additive step time", study=True)


def plot_roofline_shares(report: FleetReport, path: Path) -> None:
    """The roofline physics' parts' shares of its step."""
    _plot_share_rows(report.roofline_shares, STEP_PARTS, path, "Where the fleet's step time goes on the roofline physics", "share of the physics' step time")


def plot_layout_shares(report: FleetReport, path: Path) -> None:
    """The layout jobs' parts' shares of their step."""
    from predictor.fleet_layout import LAYOUT_PARTS

    _plot_share_rows(report.layout_shares, tuple(LAYOUT_PARTS.values()), path, "Where the layout jobs' step time goes", "share of the layout model's step time")


def _plot_share_rows(rows: list[ShareRow], parts: tuple[str, ...], path: Path, title: str, xlabel: str, study: bool = False) -> None:
    from matplotlib.figure import Figure

    labels = [f"{r.group} ({r.jobs:,})" for r in rows] + (["PAI study (communication)"] if study else [])
    # Long part names (a layout job's) take fewer legend columns and more rows below the bars.
    columns = min(len(parts), 3 if max(map(len, parts)) > 24 else 6)
    legend_rows = -(-len(parts) // columns)
    height = 1.2 + 0.9 * (len(labels) + 1) + 0.25 * legend_rows
    fig = Figure(figsize=(9, height))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key, heading in ((axes[0], "per_job", "mean over jobs"), (axes[1], "gpu_time", "share of GPU time")):
        left = np.zeros(len(labels))
        for part in parts:
            values = np.array([getattr(r, key)[part] for r in rows] + ([np.nan] if study else []))
            if study and part == "communication":
                values[-1] = PAI_COMMUNICATION_SHARE
            values = np.nan_to_num(values)
            ax.barh(labels, values, left=left, color=_COLOURS[part], label=part)
            left += values
        ax.set_xlim(0, 1)
        ax.set_title(heading)
        ax.set_xlabel(xlabel)
    axes[0].invert_yaxis()  # shared: the fleet on top (and the study's figure at the bottom)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=columns, fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, (0.05 + 0.25 * legend_rows) / height, 1, 1))
    fig.savefig(path, dpi=110)


def plot_speedups(views: list[SpeedupView], path: Path, study: list[tuple[str, float] | None]) -> None:
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
        faster = f"{pct(view.share_faster)} faster"
        if "share_faster" in view.study:
            faster += f" (PAI study: {view.study['share_faster']:.0%})"
        ax.set_title(f"{view.title}\n{view.jobs:,} jobs, {faster}, mean {times(view.mean_speedup)}", fontsize=10)
        ax.set_xlabel("speedup (baseline / target step time)")
        ax.set_ylabel("jobs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
