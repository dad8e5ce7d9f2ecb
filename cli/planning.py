"""The ``plan`` command: the fastest ways to lay a transformer out over N GPUs, thin over :mod:`features.layout_plan`."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import JobOption, JsonOption, domain_errors, echo_json, nothing_fits


@domain_errors
def plan_command(
    job: JobOption,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs to plan for; default: the job's.", min=1)] = None,
    top: Annotated[int, typer.Option("--top", help="Layouts to show.", min=1)] = 10,
    as_json: JsonOption = False,
) -> None:
    """Rank every valid tensor/pipeline/context/data-parallel layout of a transformer job that fits memory by predicted step time.

    Exit code 3 (after the answer, which names the leanest layout's memory) when none fits.

    Example: predict plan --job examples/jobs/llama-70b-512-h100.json --gpus 1024
    """
    from features.errors import SpecError
    from features.jobspec import load_job
    from features.layout_spec import layout_job_from_row
    from features.layout_plan import gpu_count_rule, plan

    spec = load_job(job)
    layout_job = layout_job_from_row(spec.row)
    result = plan(layout_job, gpus, top)
    if not result.valid_layouts:
        # Without --gpus the count is the job's own layout's (TP beyond two nodes can leave it none).
        raise SpecError("--gpus" if gpus is not None else "parallelism (its GPU count)", result.gpus, gpu_count_rule(layout_job, result.gpus))
    if as_json:
        layout, memory = result.leanest
        echo_json({
            "name": spec.name,
            "gpus": result.gpus,
            "valid_layouts": result.valid_layouts,
            "fitting_layouts": result.fitting_layouts,
            "gpu_memory_bytes": float(layout_job.gpu.memory_bytes),
            "leanest": {"layout": layout.to_dict(), "memory": memory.to_dict()},
            "ranked": [{"layout": p.layout.to_dict(), **p.breakdown.to_dict()} for p in result.ranked],
        })
    else:
        from predictor.layout_report import print_plan

        print_plan(result, spec.name, float(layout_job.gpu.memory_bytes), top)
    if not result.fitting_layouts:
        nothing_fits(f"none of the {result.valid_layouts:,} valid layouts of {spec.name} on {result.gpus:,} GPUs fits {layout_job.gpu.name}'s memory", as_json)
