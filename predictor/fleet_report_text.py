"""The fleet report as Markdown, and its numbers as plain JSON values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from features.analytical import COMPONENTS
from features.physics import STEP_PARTS
from predictor.fleet_measured import MeasuredCheck
from predictor.fleet_report_views import (
    PAI_COMMUNICATION_SHARE,
    PAI_ETHERNET_25_TO_100_SPEEDUP,
    PAI_PS_TO_ALLREDUCE_SHARE_FASTER,
    FleetReport,
    ShareRow,
    SpeedupView,
)

def pct(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.0%}"


def times(value: float) -> str:
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


def markdown(report: FleetReport, images: dict[str, str]) -> str:
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
            f"Communication takes **{pct(overall.per_job['communication'])}** of a job's step time on average "
            f"(**{pct(overall.gpu_time['communication'])}** of the fleet's GPU time); "
            f"the PAI study found about {PAI_COMMUNICATION_SHARE:.0%}.",
            "",
        ]
    study = ["PAI study", "", "", "", "", f"~{PAI_COMMUNICATION_SHARE:.0%}", "", "", "", ""]
    lines += _share_table(report.shares, COMPONENTS, extra=[study]) + ["", f"![component shares]({images['shares']})", ""]
    if report.layout_shares:
        lines += [
            f"The {report.layout_shares[0].jobs:,} layout jobs (transformers with tensor, pipeline or context parallelism) "
            "are not in this table nor the next: the layout model splits their step its own way (see Layout jobs).",
            "",
        ]
    lines += _roofline_section(report, images["roofline"])
    if report.layout_shares:
        lines += _layout_section(report, images["layout"])

    if report.scenario is not None:
        v = report.scenario
        per_sample = v.measure != "speedup"
        lines += [
            f"## Scenario: {v.scenario}",
            "",
            f"{v.jobs:,} jobs scored under the scenario ({v.not_applicable:,} where it does not apply). "
            + ("The scenario changes the samples per step, so the figures compare throughput (the same samples take "
               "another number of steps). " if per_sample else "")
            + f"Median {v.measure} {times(v.median_speedup)}, mean {times(v.mean_speedup)}; {pct(v.share_faster)} of jobs "
            f"{'with more throughput' if per_sample else 'faster'} "
            f"({pct(v.share_faster_gpu_time)} of GPU time); the fleet's GPU time for the same samples shrinks {times(v.gpu_time_speedup)}."
            + (
                f" {pct(v.share_faster_at_lower_bound)} are {'ahead' if per_sample else 'faster'} even at the lower end of "
                f"their {v.measure} interval."
                if v.share_faster_at_lower_bound is not None
                else ""
            ),
            "",
            f"![speedup distribution]({images['scenario']})",
            "",
        ]

    def view_row(v: SpeedupView, study: str) -> list[str]:
        return [
            v.title, f"{v.jobs:,}", f"{v.not_applicable:,}", pct(v.share_faster), pct(v.share_faster_gpu_time),
            times(v.mean_speedup), times(v.gpu_time_speedup), study,
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
    if report.measured is not None and (report.measured.jobs or report.measured.below_floor):
        lines += _measured_section(report.measured)
    if report.memory is not None and (report.memory.over or report.memory.target_over):
        lines += _memory_section(report.memory, report.scenario)
    return "\n".join(lines)


def _memory_section(m: MemoryView, scenario: SpeedupView | None) -> list[str]:
    lines = [
        "## Jobs that may not fit their GPU's memory",
        "",
        f"{m.over:,} of the {m.estimated:,} predicted jobs with a memory estimate need more per GPU than their GPU holds "
        "(`memory_share_of_gpu` > 1: trained weights, gradients and Adam's moments in FP32, the counted activations "
        "of one pass, the all-reduce bucket and a runtime reserve; `features/memory.py`). Their step times are "
        "predictions for steps that may not run.",
        "",
    ]
    if m.over:
        median = "" if m.median_passes_to_fit is None else f", a median of {m.median_passes_to_fit:g} passes"
        lines += [f"{m.accumulable:,} of them would fit as the same optimizer step in gradient-accumulation passes "
                  f"(`passes_to_fit`: the fewest that divide the batch per GPU{median}); the other {m.over - m.accumulable:,} "
                  "need more than one sample a pass leaves room for: a sharded layout.", ""]
    if m.over_by_gpu:
        lines += _markdown_table(["GPU", "jobs over its memory"], [[gpu, f"{n:,}"] for gpu, n in m.over_by_gpu.items()])
        lines.append("")
    if scenario is not None and m.target_estimated:
        lines += [f"Under {scenario.scenario}, {m.target_over:,} of the {m.target_estimated:,} jobs it scores would not fit "
                  "the target's memory (`target_memory_share_of_gpu` > 1).", ""]
    return lines


def _measured_section(m: MeasuredCheck) -> list[str]:
    lines = ["## Measured against predicted", ""]
    if m.below_floor:
        lines += [
            f"{m.below_floor:,} measured steps are shorter than their job's arithmetic at the GPU's dense peak "
            "(`arithmetic_floor_s`: every FLOP at the peak, no memory traffic, launches or communication), so they "
            "were not measured on the job as its row states it (another precision, batch or GPU count?): the rows "
            "where `measured_step_time_s < arithmetic_floor_s`. They are left out of what follows.",
            "",
        ]
    if not m.jobs:
        return lines
    lines += [
        f"{m.jobs:,} predicted jobs give a measured step (`measured_step_time_s`): the median measured step is "
        f"{times(m.median_measured_over_predicted)} the predicted one, and the predictions are {pct(m.mape)} off on average "
        "(mean |predicted / measured - 1|).",
        "",
    ]
    if m.with_interval:
        n = m.with_interval
        expected = 1.0 - m.confidence_level
        lines += [
            *_markdown_table(
                ["where the measured step falls", "jobs", "share", "a calibrated model"],
                [
                    [f"inside the {m.confidence_level:.0%} interval", f"{m.inside:,}", pct(m.inside / n), pct(m.confidence_level)],
                    ["slower than the interval allows", f"{m.slower:,}", pct(m.slower / n), f"about {pct(expected / 2)}"],
                    ["faster than the interval allows", f"{m.faster:,}", pct(m.faster / n), f"about {pct(expected / 2)}"],
                ],
            ),
            "",
            "A job slower than its interval runs below what its hardware should give it, or is one the model has wrong; "
            "many on one side say which way the model leans on this fleet.",
            "",
        ]
    return lines


def _roofline_section(report: FleetReport, image: str) -> list[str]:
    """The roofline physics' parts by group, and what they say that the PAI components cannot."""
    lines = ["## Where the step time goes on the roofline physics", ""]
    if not report.roofline_shares:
        return lines + ["No job was predicted.", ""]
    overall = report.roofline_shares[0]

    def dispatch(shares: dict[str, float]) -> float:
        return shares["kernel launches"] + shares["host overhead"]

    lines += [
        "The roofline physics, the step a learned model starts from, splits each step by mechanism: matrix and "
        "memory-bound operators at their attainable rates, kernel launches, host overhead, the communication the "
        "backward pass cannot hide, and input beyond the rest of the step (prefetched); the parts add up to its step. "
        f"Dispatch (kernel launches and host overhead) takes **{pct(dispatch(overall.per_job))}** of a job's step on average "
        f"(**{pct(dispatch(overall.gpu_time))}** of the fleet's GPU time) and exposed communication "
        f"**{pct(overall.per_job['exposed communication'])}** (**{pct(overall.gpu_time['exposed communication'])}**). "
        "The PAI components above count all communication, hidden or not, and no dispatch.",
        "",
    ]
    return lines + _share_table(report.roofline_shares, STEP_PARTS) + ["", f"![roofline shares]({image})", ""]


def _layout_section(report: FleetReport, image: str) -> list[str]:
    """Layout jobs' parts: where a tensor/pipeline/context-parallel step goes."""
    from predictor.fleet_layout import LAYOUT_PARTS

    overall = report.layout_shares[0]
    parts = tuple(LAYOUT_PARTS.values())
    communication = [p for p in parts if "communication" in p or p == "pipeline transfers"]

    def share(shares: dict[str, float], names) -> float:
        return sum(shares[n] for n in names)

    lines = [
        "## Layout jobs: where the step time goes",
        "",
        "The analytical layout model alone answers these (no learned residual, no interval): compute at its attainable "
        "FLOP rate, tensor-parallel all-reduces, the context-parallel and data-parallel communication the computation "
        "cannot hide, the pipeline's bubble and its stage-to-stage transfers, and the optimizer step. "
        f"Communication takes **{pct(share(overall.per_job, communication))}** of a layout job's step on average "
        f"(**{pct(share(overall.gpu_time, communication))}** of their GPU time) and the pipeline bubble "
        f"**{pct(overall.per_job['pipeline bubble'])}** (**{pct(overall.gpu_time['pipeline bubble'])}**).",
        "",
    ]
    return lines + _share_table(report.layout_shares, parts) + ["", f"![layout shares]({image})", ""]


def _share_table(rows: Sequence[ShareRow], parts: Sequence[str], extra: Sequence[Sequence[str]] = ()) -> list[str]:
    """Each group's share of each part, per job then by GPU time, as a Markdown table (``extra`` rows last)."""
    header = ["jobs", "count", *(f"{c} (per job)" for c in parts), *(f"{c} (GPU time)" for c in parts)]
    cells = [[r.group, f"{r.jobs:,}", *(pct(r.per_job[c]) for c in parts), *(pct(r.gpu_time[c]) for c in parts)] for r in rows]
    return _markdown_table(header, [*cells, *extra])


def json_safe(value: Any) -> Any:
    """Plain JSON values: numpy scalars unwrapped, NaN and infinities as null."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
