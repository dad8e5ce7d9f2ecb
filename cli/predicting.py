"""The answering commands: time, speedup, breakdown, explain, and the catalogues, thin over :class:`predictor.Predictor`.

Heavy libraries load inside the commands that need them, so ``predict time`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import (
    JobOption, JsonOption, LevelOption, ModelOption, OverlapOption, domain_errors, echo_json, make_predictor, nothing_fits,
)


@domain_errors
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
    prediction = make_predictor(overlap, model, confidence_level).time(job)
    if hasattr(prediction, "check_fits"):  # a layout job: a layout that does not fit memory exits 2
        from predictor.layout_report import print_layout_prediction

        if as_json:
            echo_json(prediction.to_dict())
        else:
            prediction.check_fits()
            print_layout_prediction(prediction)
        prediction.check_fits()
    elif as_json:
        echo_json(prediction.to_dict())
    else:
        from predictor.report import print_prediction

        print_prediction(prediction)


@domain_errors
def speedup_command(
    job: JobOption,
    to: Annotated[
        list[str],
        typer.Option(
            "--to",
            help="Scenario: a preset (allreduce-nvlink, allreduce-pcie, mixed-precision, a network such as "
            "ethernet-100g) or KEY=VALUE (gpu=H100-SXM, workers=16, nodes=4, batch_size_per_gpu=128; for a "
            "transformer layout tensor_parallel=4, pipeline_parallel=8, sharding=full, activation_recompute=full, "
            "micro_batch_size=2, sequence_length=32768, context_parallel=4). "
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
    result = make_predictor(overlap, model, confidence_level).speedup(job, to)
    if as_json:
        echo_json(result.to_dict())
    elif hasattr(result.baseline, "check_fits"):
        from predictor.layout_report import print_layout_speedup

        print_layout_speedup(result)
    else:
        from predictor.report import print_speedup

        print_speedup(result)


@domain_errors
def compare_command(
    job: JobOption,
    gpu: Annotated[
        list[str] | None,
        typer.Option("--gpu", help="A GPU to compare (repeatable; name or alias); default: one GPU of each catalogue family."),
    ] = None,
    accumulate_to_fit: Annotated[
        bool,
        typer.Option("--accumulate-to-fit", help="Score a GPU the step may not fit in the fewest gradient-accumulation passes that fit."),
    ] = False,
    as_json: JsonOption = False,
    overlap: OverlapOption = "none",
    model: ModelOption = "default",
    confidence_level: LevelOption = 0.9,
) -> None:
    """Rank GPUs for one job: its step time and speedup on each (the gpu= what-if of predict speedup).

    With --accumulate-to-fit, a GPU whose memory the data-parallel step may exceed is scored as the same
    step in the fewest passes that fit (gradient_accumulation_steps dividing the batch per GPU).
    Exit code 3 (after the ranking) when no GPU compared, the job's own included, can run the job.

    Example: predict compare --job examples/jobs/resnet50-single.json --gpu A100 --gpu H100 --gpu H800
    """
    from predictor.compare import compare_gpus

    comparison = compare_gpus(make_predictor(overlap, model, confidence_level), job, gpu, accumulate_to_fit)
    if as_json:
        echo_json(comparison.to_dict())
    else:
        from predictor.report import print_comparison

        print_comparison(comparison)
    if not comparison.runs_anywhere:
        nothing_fits(f"no GPU compared can run {comparison.name}; each is listed with why (try --gpu with more memory)", as_json)


@domain_errors
def breakdown_command(job: JobOption, as_json: JsonOption = False, overlap: OverlapOption = "none") -> None:
    """Show the analytical split of one step into io, compute, memory and communication.

    Example: predict breakdown --job examples/jobs/bert-large-allreduce-cluster.json --json
    """
    prediction = make_predictor(overlap, model="none").time(job)
    if hasattr(prediction, "check_fits"):  # a layout job: its components are its breakdown
        from predictor.layout_report import print_layout_prediction

        echo_json(prediction.to_dict()) if as_json else print_layout_prediction(prediction)
        return
    if as_json:
        breakdown = prediction.breakdown
        echo_json({**breakdown.to_dict(), "bottleneck": breakdown.bottleneck, "bottleneck_link": breakdown.bottleneck_link})
    else:
        from predictor.report import print_breakdown

        print_breakdown(prediction)


@domain_errors
def explain_command(
    job: JobOption,
    to: Annotated[list[str] | None, typer.Option("--to", help="Explain the speedup under this scenario (as in `predict speedup`).")] = None,
    as_json: JsonOption = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a waterfall of the factors (.png, .svg or .pdf).")] = None,
    model: ModelOption = "default",
) -> None:
    """Explain which bottleneck dominates a job and why, or why it gains (or not) under a what-if.

    Example: predict explain --job examples/jobs/resnet50-ps.json --to allreduce-nvlink --plot why.png
    """
    from predictor.explain import explain, plot_waterfall
    from predictor.outputs import image_file

    if plot is not None:
        image_file(plot, "--plot")
    explanation = explain(make_predictor("none", model), job, to)
    if plot is not None:
        if hasattr(explanation, "prediction"):
            from features.errors import SpecError

            raise SpecError("--plot", str(plot), "the waterfall is for data-parallel jobs; a layout job's families are in the table")
        plot_waterfall(explanation, plot)
    if as_json:
        echo_json(explanation.to_dict())
    else:
        from predictor.report import print_explanation

        if hasattr(explanation, "prediction"):  # a layout job's bottleneck families
            from predictor.layout_report import print_layout_explanation as print_explanation
        print_explanation(explanation)
        if plot is not None:
            typer.echo(f"wrote {plot}")


@domain_errors
def devices_command(as_json: JsonOption = False) -> None:
    """List the GPUs and links of the hardware catalogue, with where each figure came from.

    Example: predict devices --json
    """
    from predictor.report import devices_records, print_records

    devices, links = devices_records()
    if as_json:
        echo_json({"devices": devices, "links": links})
    else:
        print_records("Devices", devices)
        print_records("Links", links)


@domain_errors
def workloads_command(as_json: JsonOption = False) -> None:
    """List the workload catalogue: FLOPs, parameters, memory traffic and arithmetic intensity per model.

    Example: predict workloads
    """
    from predictor.report import print_records, workload_records

    records = workload_records()
    if as_json:
        echo_json({"workloads": records})
    else:
        print_records("Workloads", records)


@domain_errors
def schema_command() -> None:
    """Print the JSON Schema of a job file.

    Example: predict schema > job.schema.json
    """
    from features.fields import json_schema

    echo_json(json_schema())


@domain_errors
def roofline_command(
    gpu: Annotated[str, typer.Option("--gpu", help="GPU name or alias.")],
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help="Workloads to place (repeatable); default: the AI Matrix suite.")
    ] = None,
    precision: Annotated[str, typer.Option("--precision", help="fp32, tf32, fp16, bf16 or fp8.")] = "fp32",
    out: Annotated[Path, typer.Option("--out", "-o", help="Image file to write (.png, .svg or .pdf).")] = Path("roofline.png"),
) -> None:
    """Draw a roofline: attainable FLOP/s against arithmetic intensity, with each workload's operating point.

    Example: predict roofline --gpu V100 --model resnet50 --model bert-large --out roofline.png
    """
    from predictor.outputs import image_file
    from predictor.roofline import plot_roofline

    image_file(out, "--out")
    path = plot_roofline(gpu, model or None, precision, out)
    typer.echo(f"wrote {path}")
