"""The ``evaluate-llm`` command: the layout model against measured MLPerf GPT-3 175B runs, thin over :mod:`training.llm_evaluation`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import domain_errors, echo_json


@domain_errors
def evaluate_llm_command(
    out: Annotated[Path, typer.Option("--out", help="Report directory to write.")] = Path("reports/llm"),
    data: Annotated[Path | None, typer.Option("--data", help="Folder of the MLPerf tables; default ../shared/data.")] = None,
    llm_analysis: Annotated[
        bool, typer.Option("--llm-analysis/--no-llm-analysis", help="Compare with llm-analysis where it is installed.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Score the large-model layout model on the MLPerf GPT-3 175B runs and write report.md (step-time MAPE, scale-out speedups, llm-analysis side by side).

    Example: predict evaluate-llm --out reports/llm
    """
    from training.llm_evaluation import SHARED_DATA, evaluate, write_report

    result = evaluate(data or SHARED_DATA, use_llm_analysis=llm_analysis)
    path = write_report(result, out)
    if as_json:
        echo_json(result.metrics)
    else:
        headline = result.metrics["step_time_mape"]["layout model, leave-one-submitter-out"]
        typer.echo(f"{result.metrics['runs']} runs, step-time MAPE {headline:.1%} (leave-one-submitter-out); wrote {path}")
        if result.llm_analysis_note and "not installed" in result.llm_analysis_note:
            typer.echo(f"note: {result.llm_analysis_note}")
