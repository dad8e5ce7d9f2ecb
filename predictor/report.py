"""Human-readable tables for the CLI (rich), built from the typed results."""

from __future__ import annotations

import math
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from features.analytical import COMPONENTS
from predictor.results import Prediction, SpeedupPrediction

# Wide enough for the catalogue tables when the output is piped to a file.
_console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)

_METHOD_TEXT = {"analytical": "analytical model", "learned": "analytical model x learned residual"}
_OVERLAP_TEXT = {"none": "PAI additive", "overlapped": "overlapped", "roofline": "roofline physics"}


def safe_text(text: object) -> str:
    """User-given text (a job name, a scenario) as it may reach a terminal: control bytes shown
    as escapes (no terminal sequences run) and rich markup escaped (``[bold]`` stays literal)."""
    shown = "".join(
        char if char.isprintable() or char == " " else repr(char)[1:-1] for char in str(text)
    )
    return escape(shown)


def _seconds(value: float) -> str:
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2e}"


def _interval(prediction: Prediction) -> str:
    if prediction.lower_s is None:
        return ""
    return f", {prediction.confidence_level:.0%} interval {_seconds(prediction.lower_s)}-{_seconds(prediction.upper_s)} s"


def _bottleneck(prediction: Prediction) -> str:
    b = prediction.breakdown
    return f"{b.bottleneck} over {b.bottleneck_link}" if b.bottleneck_link else b.bottleneck


def print_breakdown(prediction: Prediction) -> None:
    b = prediction.breakdown
    table = Table(title=f"{safe_text(prediction.name)}: step breakdown", title_justify="left")
    table.add_column("component")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for name in COMPONENTS:
        table.add_row(name, _seconds(b.seconds[name]), f"{b.shares[name]:.1%}")
    table.add_row("  intra-node", _seconds(b.comm_intra_node_s), "")
    table.add_row("  network", _seconds(b.comm_network_s), "")
    table.add_row("additive (PAI)", _seconds(b.additive_s), "", style="bold")
    table.add_row("overlapped", _seconds(b.overlapped_s), "")
    if b.physics is not None:
        table.add_row("roofline physics", _seconds(b.physics["roofline_s"]), "", style="bold")
        for label, key in (("  matrix ops", "matrix_s"), ("  memory-bound ops", "memory_bound_s"),
                           ("  kernel launches", "launch_s"), ("  host overhead", "host_s"),
                           ("  exposed communication", "exposed_comm_s")):
            table.add_row(label, _seconds(b.physics[key]), "")
    _console.print(table)
    _console.print(f"bottleneck: {_bottleneck(prediction)}")


def print_prediction(prediction: Prediction) -> None:
    _console.print(
        f"[bold]{safe_text(prediction.name)}[/bold]: {_seconds(prediction.step_time_s)} s per step, "
        f"{prediction.throughput_samples_per_s:,.0f} samples/s{_interval(prediction)} "
        f"({_METHOD_TEXT[prediction.method]}, {_OVERLAP_TEXT[prediction.overlap]})"
    )
    if prediction.measured_step_time_s is not None:
        error = prediction.step_time_s / prediction.measured_step_time_s - 1
        _console.print(f"measured: {_seconds(prediction.measured_step_time_s)} s ({error:+.0%} off)")
    print_breakdown(prediction)
    if prediction.memory is not None:
        memory = prediction.memory
        _console.print(
            f"memory: about {memory['total_bytes'] / 2**30:.1f} of {memory['capacity_bytes'] / 2**30:.0f} GB per GPU "
            f"(estimated; activations {memory['parts']['activations_bytes'] / 2**30:.1f} GB)"
        )
    for warning in prediction.warnings:
        _console.print(f"[yellow]warning:[/yellow] {safe_text(warning)}")


def verdict(speedup: float) -> str:
    """A speedup in words: "1.95x faster", "1.27x slower", or "the same (1.00x)" where it shows as 1.00."""
    factor = speedup if speedup >= 1 else 1 / speedup
    if f"{factor:.2f}" == "1.00":
        return "the same (1.00x)"
    return f"{factor:.2f}x {'faster' if speedup >= 1 else 'slower'}"


def print_speedup(result: SpeedupPrediction) -> None:
    base, target = result.baseline, result.target
    line = f"[bold]{safe_text(base.name)}[/bold] -> {safe_text(' + '.join(result.scenario))}: "
    if result.changes_samples_per_step:  # a step is another amount of work: the answer is throughput
        r = result.samples_per_step_ratio
        line += f"{result.throughput_ratio:.2f}x the throughput ({r:.3g}x the samples per step, each step {verdict(result.speedup)})"
        if result.speedup_lower is not None:
            line += (
                f" (throughput ratio {result.throughput_ratio:.2f}, {result.confidence_level:.0%} interval "
                f"{result.speedup_lower * r:.2f}-{result.speedup_upper * r:.2f}, P(more throughput) {result.p_more_throughput:.0%})"
            )
    else:
        line += verdict(result.speedup)
        if result.speedup_lower is not None:
            line += (
                f" (speedup {result.speedup:.2f}, {result.confidence_level:.0%} interval "
                f"{result.speedup_lower:.2f}-{result.speedup_upper:.2f}, P(faster) {result.p_speedup_gt_1:.0%})"
            )
    _console.print(line)
    table = Table(title_justify="left")
    table.add_column("")
    table.add_column("baseline", justify="right")
    table.add_column("target", justify="right")
    table.add_row("step time (s)", _seconds(base.step_time_s), _seconds(target.step_time_s), style="bold")
    table.add_row("samples/s", f"{base.throughput_samples_per_s:,.0f}", f"{target.throughput_samples_per_s:,.0f}")
    for name in COMPONENTS:
        table.add_row(f"{name} (s)", _seconds(base.breakdown.seconds[name]), _seconds(target.breakdown.seconds[name]))
    table.add_row("bottleneck", _bottleneck(base), _bottleneck(target))
    _console.print(table)
    changed = {k: v for k, v in result.target_job.items() if v is not None}
    _console.print(
        "target: " + ", ".join(f"{k}={changed[k]}" for k in ("architecture", "workers", "gpus_per_worker", "gpu", "intra_node_link", "network", "precision") if k in changed)
    )
    for warning in dict.fromkeys(base.warnings + target.warnings):
        _console.print(f"[yellow]warning:[/yellow] {safe_text(warning)}")


_METHOD_TEXT = {"analytical": "analytical model", "learned": "analytical model x learned residual"}


def print_comparison(comparison) -> None:
    """The job on each GPU, fastest first: step time, speedup over its own GPU (with its interval), bottleneck."""
    own = next(o for o in comparison.options if o.gpu == comparison.gpu)
    baseline = f"{_seconds(comparison.step_time_s)} s per step" if comparison.step_time_s is not None else safe_text(own.error)
    _console.print(
        f"[bold]{safe_text(comparison.name)}[/bold] on {len(comparison.options)} GPUs, fastest first "
        f"(baseline {comparison.gpu}: {baseline}; {_METHOD_TEXT.get(comparison.method, comparison.method)})"
    )
    table = Table(title_justify="left")
    for name, justify in (("#", "right"), ("GPU", "left"), ("step (s)", "right"), ("speedup", "right"), ("interval", "right"),
                          ("bottleneck", "left"), ("note", "left")):  # fmt: skip
        table.add_column(name, justify=justify)
    for rank, o in enumerate(comparison.options, 1):
        if o.error is not None:
            table.add_row("", o.gpu, "", "", "", "", safe_text(o.error))
            continue
        interval = "" if o.speedup_lower is None else f"{o.speedup_lower:.2f}-{o.speedup_upper:.2f}"
        notes = ["its own GPU" if o.gpu == comparison.gpu else "outside the training data" if o.outside_training_data else ""]
        if o.computes_at is not None:
            notes.append(f"computes at {o.computes_at}")
        if o.passes is not None:
            notes.append(f"fits in {o.passes} passes of {o.samples_per_pass:g}")
        if o.fits is False:
            notes.append(f"may not fit ({o.memory_per_gpu_bytes / 2**30:.0f} GB)")
        note = "; ".join(n for n in notes if n)
        speedup = "" if o.speedup is None else f"{o.speedup:.2f}x"
        table.add_row(str(rank), o.gpu, _seconds(o.step_time_s), speedup, interval, o.bottleneck or "", note)
    _console.print(table)


def devices_records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from features.hardware import hardware_catalog

    catalog = hardware_catalog()
    devices = [
        {
            "name": d.name,
            "family": d.family,
            "fp32_tflops": d.peak_fp32_flops_per_s / 1e12,
            "fp16_tflops": d.peak_flops_per_s("fp16") / 1e12,
            "memory_bw_gb_per_s": d.memory_bw_bytes_per_s / 1e9,
            "memory_gib": round(d.memory_bytes / 2**30, 1),
            "intra_node_link": d.default_intra_node_link,
            "host_link": d.host_link,
            "provenance": d.provenance,
            "source": d.source,
        }
        for d in catalog.devices
    ]
    links = [
        {
            "name": link.name,
            "kind": link.kind,
            "gb_per_s": link.bw_bytes_per_s / 1e9,
            "latency_us": link.latency_s * 1e6,
            "provenance": link.provenance,
            "source": link.source,
        }
        for link in catalog.links
    ]
    return devices, links


def workload_records() -> list[dict[str, Any]]:
    from features.workloads import workload_catalog

    return [
        {
            "name": w.name,
            "domain": w.domain,
            "gflops_per_sample": w.flops_per_sample / 1e9,
            "params_m": w.param_count / 1e6,
            "dense_params_m": w.dense_param_count / 1e6,
            "memory_mb_per_sample": w.memory_bytes_per_sample_fp32 / 1e6,
            # Saved for the backward pass, FP32 (features.memory); None where not counted.
            "activations_mb_per_sample": None if w.activation_bytes_per_sample_fp32 is None else w.activation_bytes_per_sample_fp32 / 1e6,
            "flops_per_byte": w.arithmetic_intensity_flops_per_byte,
            "batch": w.default_batch_size_per_gpu,
            "ai_matrix": w.ai_matrix,
            "provenance": w.provenance.get("flops_per_sample"),
        }
        for w in workload_catalog().workloads
    ]


def print_records(title: str, records: list[dict[str, Any]]) -> None:
    if not records:
        return
    table = Table(title=title, title_justify="left")
    columns = [c for c in records[0] if c != "source"]
    for column in columns:
        table.add_column(column, justify="right" if isinstance(records[0][column], (int, float)) else "left")
    for record in records:
        table.add_row(*(_cell(record[c]) for c in columns))
    _console.print(table)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


#: Titles of an explanation's two breakdowns.
PHYSICS_TITLE = "roofline physics: the analytical step, part by part"
PAI_TITLE = "PAI components at datasheet rates, one after another"


def print_explanation(explanation) -> None:
    from predictor.explain import SpeedupExplanation

    if isinstance(explanation, SpeedupExplanation):
        _console.print(
            f"[bold]{safe_text(explanation.baseline.name)}[/bold] under {safe_text(' + '.join(explanation.scenario))}: "
            f"{safe_text(explanation.summary())}"
        )
        base, target = explanation.baseline, explanation.target
        if base.physics_seconds and target.physics_seconds:
            table = Table(title=PHYSICS_TITLE, title_justify="left")
            table.add_column("part")
            table.add_column("baseline (s)", justify="right")
            table.add_column("target (s)", justify="right")
            for part, seconds in base.physics_seconds.items():
                table.add_row(part, _seconds(seconds), _seconds(target.physics_seconds[part]))
            _console.print(table)
        table = Table(title=PAI_TITLE, title_justify="left")
        table.add_column("component")
        table.add_column("baseline (s)", justify="right")
        table.add_column("target (s)", justify="right")
        for name in COMPONENTS:
            table.add_row(name, _seconds(base.seconds[name]), _seconds(target.seconds[name]))
        _console.print(table)
        factors = explanation.family_speedup_factors
        if factors:
            _print_factors("learned residual, baseline over target (>1 adds to the speedup)", factors)
        return
    _console.print(f"[bold]{safe_text(explanation.name)}[/bold]: {safe_text(explanation.summary())}")
    if explanation.physics_seconds:
        total = sum(explanation.physics_seconds.values())
        table = Table(title=PHYSICS_TITLE, title_justify="left")
        table.add_column("part")
        table.add_column("seconds", justify="right")
        table.add_column("share", justify="right")
        for part, seconds in explanation.physics_seconds.items():
            table.add_row(part, _seconds(seconds), f"{seconds / total:.1%}" if total > 0 else "")
        _console.print(table)
    table = Table(title=PAI_TITLE, title_justify="left")
    table.add_column("component")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for name in COMPONENTS:
        table.add_row(name, _seconds(explanation.seconds[name]), f"{explanation.shares[name]:.1%}")
    _console.print(table)
    if explanation.family_factors:
        _console.print(
            f"analytical {_seconds(explanation.analytical_step_time_s)} s x residual base x{explanation.base_factor:.2f} "
            f"x families below = {_seconds(explanation.step_time_s)} s"
        )
        _print_factors("learned residual by family (x>1: slower than the physics says)", explanation.family_factors)
    else:
        _console.print("no trained model: analytical breakdown only")


def _print_factors(title: str, factors: dict[str, float]) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column("family")
    table.add_column("factor", justify="right")
    for family, factor in sorted(factors.items(), key=lambda kv: -abs(math.log(kv[1]))):
        table.add_row(family, f"x{factor:.3f}")
    _console.print(table)
