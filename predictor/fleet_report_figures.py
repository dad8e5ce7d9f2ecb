"""The fleet report's figures (matplotlib, imported only when a report is drawn)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from features.analytical import COMPONENTS
from predictor.fleet_report_text import pct, times
from predictor.fleet_report_views import PAI_COMMUNICATION_SHARE, FleetReport, SpeedupView

_COLOURS = {"io": "tab:green", "compute": "tab:blue", "memory": "tab:orange", "communication": "tab:red"}


def plot_shares(report: FleetReport, path: Path) -> None:
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
