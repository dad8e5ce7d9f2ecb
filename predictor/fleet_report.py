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
* the same for the parts of the roofline physics a learned model starts from
  (matrix and memory-bound operators, kernel launches, host overhead, the
  communication the backward pass cannot hide, input beyond the rest): where
  the PAI components count all communication and no dispatch, these say how
  much of the fleet's time goes to launching kernels and to the all-reduce
  tail that nothing hides;
* for layout jobs (transformers with tensor, pipeline or context
  parallelism, answered by the layout model alone), the shares of their own
  parts: compute, tensor-parallel communication, the exposed context- and
  data-parallel communication, the pipeline bubble and transfers, the
  optimizer step;
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

This module writes the report; :mod:`predictor.fleet_report_views` computes
its numbers, :mod:`predictor.fleet_report_text` its Markdown and
:mod:`predictor.fleet_report_figures` its figures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from features.errors import SpecError
from predictor.fleet_report_figures import plot_layout_shares, plot_roofline_shares, plot_shares, plot_speedups
from predictor.fleet_report_text import json_safe, markdown
from predictor.fleet_report_views import (
    PAI_COMMUNICATION_SHARE,
    PAI_ETHERNET_25_TO_100_SPEEDUP,
    PAI_PS_TO_ALLREDUCE_SHARE_FASTER,
    FleetReport,
    ShareRow,
    SpeedupView,
    build_report,
)

__all__ = [
    "PAI_COMMUNICATION_SHARE",
    "PAI_ETHERNET_25_TO_100_SPEEDUP",
    "PAI_PS_TO_ALLREDUCE_SHARE_FASTER",
    "FleetReport",
    "ShareRow",
    "SpeedupView",
    "build_report",
    "write_report",
]


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
    images = {"shares": "component_shares.png", "roofline": "roofline_shares.png", "views": "standard_views.png"}
    plot_shares(report, directory / images["shares"])
    plot_roofline_shares(report, directory / images["roofline"])
    if report.layout_shares:
        images["layout"] = "layout_shares.png"
        plot_layout_shares(report, directory / images["layout"])
    plot_speedups(
        [report.ps_to_allreduce, report.ethernet_upgrade],
        directory / images["views"],
        [None, (f"PAI study mean {PAI_ETHERNET_25_TO_100_SPEEDUP}x", PAI_ETHERNET_25_TO_100_SPEEDUP)],
    )
    if report.scenario is not None:
        images["scenario"] = "scenario_speedups.png"
        plot_speedups([report.scenario], directory / images["scenario"], [None])
    (directory / "report.md").write_text(markdown(report, images), encoding="utf-8")
    files = ["report.md", *images.values(), "summary.json"]
    report = FleetReport(**{**report.__dict__, "files": files})
    (directory / "summary.json").write_text(json.dumps(json_safe(report.to_dict()), indent=2), encoding="utf-8")
    return report
