"""Human-readable tables (rich) for layout jobs: one step, a what-if, an explanation, a plan."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from features.layout_plan import Plan
from features.units import bytes_to_gib
from predictor.layout import LayoutExplanation, LayoutPrediction, LayoutSpeedup
from predictor.report import verdict

_console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)

_LABELS = {
    "compute": "compute",
    "memory": "memory-bound operators",
    "tp_communication": "tensor-parallel comm",
    "cp_communication": "context-parallel comm (exposed)",
    "pipeline_bubble": "pipeline bubble",
    "pipeline_transfers": "pipeline transfers",
    "dp_communication": "data-parallel comm (exposed)",
    "optimizer": "optimizer step",
}


def _s(value: float) -> str:
    if value == 0:
        return "0"
    return f"{value:.3f}" if value >= 0.01 else f"{value:.2e}"


def _layout_text(prediction: LayoutPrediction) -> str:
    lay = prediction.job.layout
    text = f"TP {lay.tensor_parallel} x PP {lay.pipeline_parallel} x CP {lay.context_parallel} x DP {lay.data_parallel}"
    text += f" = {lay.gpus} {prediction.job.gpu.name}, micro-batch {lay.micro_batch_size}, {lay.pipeline_schedule}"
    if lay.virtual_stages > 1:
        text += f" (v={lay.virtual_stages})"
    return text + f", recompute {lay.activation_recompute}, sharding {lay.sharding}"


def print_layout_prediction(prediction: LayoutPrediction) -> None:
    b = prediction.breakdown
    _console.print(
        f"[bold]{prediction.name}[/bold]: {_s(b.step_time_s)} s per step, {b.tokens_per_s:,.0f} tokens/s, "
        f"MFU {b.mfu:.1%}, HFU {b.hfu:.1%} (analytical layout model, no interval: too few measured runs to calibrate one)"
    )
    _console.print(_layout_text(prediction))
    if prediction.measured_step_time_s is not None:
        error = b.step_time_s / prediction.measured_step_time_s - 1
        _console.print(f"measured: {_s(prediction.measured_step_time_s)} s ({error:+.0%} off)")
    table = Table(title_justify="left")
    table.add_column("component")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    total = b.step_time_s
    for name, seconds in b.components_s.items():
        table.add_row(_LABELS[name], _s(seconds), f"{seconds / total:.1%}")
    table.add_row("  of which recompute", _s(b.recompute_s), "")
    table.add_row("step", _s(total), "", style="bold")
    _console.print(table)
    m = b.memory
    _console.print(
        f"memory per GPU: {bytes_to_gib(m.total_bytes):.1f} GB of {bytes_to_gib(b.memory_capacity_bytes):.0f} GB "
        f"(weights {bytes_to_gib(m.weights_bytes):.1f}, gradients {bytes_to_gib(m.gradients_bytes):.1f}, "
        f"optimizer {bytes_to_gib(m.optimizer_bytes):.1f}, activations {bytes_to_gib(m.activations_bytes):.1f}); "
        f"bubble {prediction.job.layout.bubble_fraction:.1%}; bottleneck: {_LABELS[b.bottleneck]}"
    )
    for warning in prediction.warnings:
        _console.print(f"[yellow]warning:[/yellow] {warning}")


def print_layout_speedup(result: LayoutSpeedup) -> None:
    base, target = result.baseline, result.target
    _console.print(f"[bold]{base.name}[/bold] -> {' + '.join(result.scenario)}: {verdict(result.speedup)} (analytical layout model, no interval)")
    table = Table(title_justify="left")
    table.add_column("")
    table.add_column("baseline", justify="right")
    table.add_column("target", justify="right")
    table.add_row("step time (s)", _s(base.step_time_s), _s(target.step_time_s), style="bold")
    table.add_row("tokens/s", f"{base.breakdown.tokens_per_s:,.0f}", f"{target.breakdown.tokens_per_s:,.0f}")
    table.add_row("MFU", f"{base.breakdown.mfu:.1%}", f"{target.breakdown.mfu:.1%}")
    for name in base.breakdown.components_s:
        table.add_row(f"{_LABELS[name]} (s)", _s(base.breakdown.components_s[name]), _s(target.breakdown.components_s[name]))
    table.add_row("memory per GPU (GB)", f"{bytes_to_gib(base.breakdown.memory.total_bytes):.1f}",
                  f"{bytes_to_gib(target.breakdown.memory.total_bytes):.1f}")
    _console.print(table)
    _console.print(f"baseline: {_layout_text(base)}")
    _console.print(f"target:   {_layout_text(target)}")
    if not target.fits:
        _console.print("[yellow]warning:[/yellow] the target does not fit: "
                       f"{bytes_to_gib(target.breakdown.memory.total_bytes):.1f} GB per GPU needed")
    for warning in dict.fromkeys(base.warnings + target.warnings):
        _console.print(f"[yellow]warning:[/yellow] {warning}")


def print_layout_explanation(explanation: LayoutExplanation) -> None:
    _console.print(f"[bold]{explanation.prediction.name}[/bold]: {explanation.summary()}")
    table = Table(title_justify="left")
    table.add_column("bottleneck family")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for name, seconds in explanation.prediction.breakdown.components_s.items():
        table.add_row(_LABELS[name], _s(seconds), f"{explanation.shares[name]:.1%}")
    _console.print(table)


def print_plan(plan: Plan, name: str, gpu_memory_bytes: float, rows: int = 10) -> None:
    if not plan.ranked and plan.leanest is not None:
        lay, memory = plan.leanest
        _console.print(
            f"[bold]{name}[/bold] on {plan.gpus} GPUs: none of the {plan.valid_layouts:,} valid layouts fits in "
            f"{bytes_to_gib(gpu_memory_bytes):.1f} GB per GPU; the leanest needs {bytes_to_gib(memory.total_bytes):.1f} GB "
            f"(TP{lay.tensor_parallel} PP{lay.pipeline_parallel} CP{lay.context_parallel} DP{lay.data_parallel} "
            f"mb{lay.micro_batch_size}, recompute {lay.activation_recompute}, sharding {lay.sharding}): plan for more GPUs "
            "or a GPU with more memory",
            soft_wrap=True,
        )
        return
    _console.print(
        f"[bold]{name}[/bold] on {plan.gpus} GPUs: {plan.valid_layouts:,} valid layouts, {plan.fitting_layouts:,} fit in memory; "
        f"fastest {min(rows, len(plan.ranked))}:"
    )
    table = Table(title_justify="left")
    for column in ("#", "TP", "PP", "CP", "DP", "mb", "schedule", "recompute", "sharding", "step (s)", "MFU", "GB/GPU",
                   "compute", "memory", "TP comm", "bubble", "PP xfer", "DP comm"):
        table.add_column(column, justify="left" if column in ("schedule", "recompute", "sharding") else "right")
    for i, planned in enumerate(plan.ranked[:rows], 1):
        lay, b = planned.layout, planned.breakdown
        c = b.components_s
        schedule = lay.pipeline_schedule if lay.virtual_stages == 1 else f"interleaved v{lay.virtual_stages}"
        table.add_row(
            str(i), str(lay.tensor_parallel), str(lay.pipeline_parallel), str(lay.context_parallel), str(lay.data_parallel),
            str(lay.micro_batch_size), schedule, lay.activation_recompute, lay.sharding, _s(b.step_time_s), f"{b.mfu:.1%}",
            f"{bytes_to_gib(b.memory.total_bytes):.1f}", _s(c["compute"]), _s(c["memory"]), _s(c["tp_communication"]),
            _s(c["pipeline_bubble"]), _s(c["pipeline_transfers"]), _s(c["dp_communication"]),
        )
    _console.print(table)
