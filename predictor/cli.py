"""The ``predict`` command line, thin over :class:`predictor.Predictor`.

Bad input of any kind (a malformed job file, an unknown GPU, a negative
batch, an unknown scenario) ends in one line on stderr and exit code 2; the
conversion happens in :func:`_command`, nowhere else. Heavy libraries load
inside the commands that need them, so ``predict time`` stays fast.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Callable

import typer

from features.errors import SpecError

app = typer.Typer(
    name="predict",
    help="Where a training job's step time goes, and how much faster it would run on other hardware or another architecture.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

JobOption = Annotated[Path, typer.Option("--job", "-j", help="Job spec JSON file (see `predict schema`).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
OverlapOption = Annotated[
    str, typer.Option("--overlap", help="How the analytical components add up: none (PAI, additive) or overlapped.")
]
ModelOption = Annotated[
    str, typer.Option("--model", help="Model directory; 'default' is the shipped model, 'none' the analytical model alone.")
]
LevelOption = Annotated[float, typer.Option("--confidence-level", help="Coverage of the prediction intervals.")]


def _command(*args: Any, **kwargs: Any) -> Callable:
    """Register a command whose domain errors become one stderr line and exit code 2."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            try:
                return fn(*a, **kw)
            except SpecError as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(code=2) from None

        return app.command(*args, **kwargs)(wrapper)

    return decorate


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _predictor(overlap: str, model: str = "default", confidence_level: float = 0.9):
    from predictor.api import Predictor

    return Predictor(model=None if model == "none" else model, overlap=overlap, confidence_level=confidence_level)


@_command("time")
def time_command(
    job: JobOption,
    as_json: JsonOption = False,
    overlap: OverlapOption = "none",
    model: ModelOption = "default",
    confidence_level: LevelOption = 0.9,
) -> None:
    """Predict one job's step time, throughput and where the time goes.

    Example: predict time --job examples/jobs/resnet50-ps.json
    """
    prediction = _predictor(overlap, model, confidence_level).time(job)
    if as_json:
        _echo_json(prediction.to_dict())
    else:
        from predictor.report import print_prediction

        print_prediction(prediction)


@_command("speedup")
def speedup_command(
    job: JobOption,
    to: Annotated[
        list[str],
        typer.Option(
            "--to",
            help="Scenario: a preset (allreduce-nvlink, allreduce-pcie, mixed-precision, a network such as "
            "ethernet-100g) or KEY=VALUE (gpu=H100-SXM, workers=16, nodes=4, batch_size_per_gpu=128). "
            "Repeat to combine; applied in order.",
        ),
    ],
    as_json: JsonOption = False,
    overlap: OverlapOption = "none",
    model: ModelOption = "default",
    confidence_level: LevelOption = 0.9,
) -> None:
    """Predict how much faster (or slower) a job runs under a what-if scenario.

    Example: predict speedup --job examples/jobs/resnet50-ps.json --to allreduce-nvlink
    """
    result = _predictor(overlap, model, confidence_level).speedup(job, to)
    if as_json:
        _echo_json(result.to_dict())
    else:
        from predictor.report import print_speedup

        print_speedup(result)


@_command("breakdown")
def breakdown_command(job: JobOption, as_json: JsonOption = False, overlap: OverlapOption = "none") -> None:
    """Show the analytical split of one step into io, compute, memory and communication.

    Example: predict breakdown --job examples/jobs/bert-allreduce-cluster.json --json
    """
    prediction = _predictor(overlap, model="none").time(job)
    if as_json:
        breakdown = prediction.breakdown
        _echo_json({**breakdown.to_dict(), "bottleneck": breakdown.bottleneck, "bottleneck_link": breakdown.bottleneck_link})
    else:
        from predictor.report import print_breakdown

        print_breakdown(prediction)


@_command("explain")
def explain_command(
    job: JobOption,
    to: Annotated[list[str] | None, typer.Option("--to", help="Explain the speedup under this scenario (as in `predict speedup`).")] = None,
    as_json: JsonOption = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a waterfall PNG of the factors.")] = None,
    model: ModelOption = "default",
) -> None:
    """Explain which bottleneck dominates a job and why, or why it gains (or not) under a what-if.

    Example: predict explain --job examples/jobs/resnet50-ps.json --to allreduce-nvlink --plot why.png
    """
    from predictor.explain import explain, plot_waterfall

    explanation = explain(_predictor("none", model), job, to)
    if plot is not None:
        plot_waterfall(explanation, plot)
    if as_json:
        _echo_json(explanation.to_dict())
    else:
        from predictor.report import print_explanation

        print_explanation(explanation)
        if plot is not None:
            typer.echo(f"wrote {plot}")


@_command("devices")
def devices_command(as_json: JsonOption = False) -> None:
    """List the GPUs and links of the hardware catalogue, with where each figure came from.

    Example: predict devices --json
    """
    from predictor.report import devices_records, print_records

    devices, links = devices_records()
    if as_json:
        _echo_json({"devices": devices, "links": links})
    else:
        print_records("Devices", devices)
        print_records("Links", links)


@_command("workloads")
def workloads_command(as_json: JsonOption = False) -> None:
    """List the workload catalogue: FLOPs, parameters, memory traffic and arithmetic intensity per model.

    Example: predict workloads
    """
    from predictor.report import print_records, workload_records

    records = workload_records()
    if as_json:
        _echo_json({"workloads": records})
    else:
        print_records("Workloads", records)


@_command("schema")
def schema_command() -> None:
    """Print the JSON Schema of a job file.

    Example: predict schema > job.schema.json
    """
    from features.jobspec import json_schema

    _echo_json(json_schema())


@_command("roofline")
def roofline_command(
    gpu: Annotated[str, typer.Option("--gpu", help="GPU name or alias.")],
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help="Workloads to place (repeatable); default: the AI Matrix suite.")
    ] = None,
    precision: Annotated[str, typer.Option("--precision", help="fp32, tf32, fp16, bf16 or fp8.")] = "fp32",
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.")] = Path("roofline.png"),
) -> None:
    """Draw a roofline: attainable FLOP/s against arithmetic intensity, with each workload's operating point.

    Example: predict roofline --gpu V100 --model resnet50 --model bert-large --out roofline.png
    """
    from predictor.roofline import plot_roofline

    path = plot_roofline(gpu, model or None, precision, out)
    typer.echo(f"wrote {path}")


# Commands kept in their own modules register themselves on `app`.
from predictor import cli_fleet, cli_training  # noqa: E402,F401


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
