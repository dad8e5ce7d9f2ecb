"""The ``plan`` command: the fastest ways to lay a transformer out over N GPUs, thin over :mod:`features.layout_plan`."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import JobOption, JsonOption, domain_errors, echo_json


@domain_errors
def plan_command(
    job: JobOption,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs to plan for; default: the job's.", min=1)] = None,
    top: Annotated[int, typer.Option("--top", help="Layouts to show.", min=1)] = 10,
    as_json: JsonOption = False,
) -> None:
    """Rank every valid tensor/pipeline/context/data-parallel layout of a transformer job that fits memory by predicted step time.

    Example: predict plan --job examples/jobs/llama-70b-512-h100.json --gpus 1024
    """
    from features.jobspec import load_job
    from features.layout_spec import layout_job_from_row
    from features.layout_plan import plan

    spec = load_job(job)
    result = plan(layout_job_from_row(spec.row), gpus, top)
    if as_json:
        echo_json({
            "name": spec.name,
            "gpus": result.gpus,
            "valid_layouts": result.valid_layouts,
            "fitting_layouts": result.fitting_layouts,
            "ranked": [{"layout": p.layout.to_dict(), **p.breakdown.to_dict()} for p in result.ranked],
        })
    else:
        from predictor.layout_report import print_plan

        print_plan(result, spec.name, top)
