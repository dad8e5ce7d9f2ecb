"""The ``predict fleet`` and ``predict fleet-example`` commands ."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from features.errors import SpecError
from cli.common import LevelOption, ModelOption, OverlapOption, domain_errors
from predictor.outputs import output_dir, output_file

ENGINES = ("local", "dask")
#: The largest example fleet: built in memory, about 0.25 GB per million jobs.
MAX_EXAMPLE_JOBS = 20_000_000


@domain_errors
def fleet_command(
    jobs: Annotated[Path, typer.Option("--jobs", "-j", help="Fleet table (.parquet or .csv) with the flat job columns; other columns pass through.")],
    to: Annotated[
        list[str] | None,
        typer.Option("--to", help="Scenario for every job, as in `predict speedup` (repeat to combine)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the scored fleet here (.parquet or .csv), atomically.")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Write the fleet report (report.md, PNGs, summary.json) into this directory.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="local (in process, in chunks) or dask (partitions on a cluster).")] = "local",
    scheduler: Annotated[
        str | None, typer.Option("--scheduler", help="Dask scheduler address; default: a local cluster of 2 worker processes.")
    ] = None,
    overlap: OverlapOption = "none",
    model: ModelOption = "default",
    confidence_level: LevelOption = 0.9,
    chunk_rows: Annotated[int, typer.Option("--chunk-rows", help="Rows scored at once by the local engine.")] = 200_000,
    explain: Annotated[
        bool, typer.Option("--explain", help="Add each job's residual factors per bottleneck family (why_* columns; needs a trained model).")
    ] = False,
    explain_method: Annotated[
        str, typer.Option("--explain-method", help="treeshap (exact SHAP values) or saabas (XGBoost's approximate path attributions, about 5x faster on large fleets).")
    ] = "treeshap",
) -> None:
    """Score every job of a fleet: step time, breakdown, bottleneck and, with --to, the speedup.

    Rows come out in order, bad rows kept with their error. Without --out a
    summary is printed. Rows with a transformer's shape or layout fields are
    layout jobs, answered by the layout model as `predict time` answers one.

    Example: predict fleet --jobs fleet.csv --to allreduce-nvlink --report fleet-report
    """
    from features import scenarios
    from predictor import fleet

    to = list(to or [])
    if engine not in ENGINES:
        raise SpecError("--engine", engine, f"allowed: {', '.join(ENGINES)}")
    if scheduler and engine != "dask":
        raise SpecError("--scheduler", scheduler, "a scheduler address needs --engine dask")
    if chunk_rows < 1:
        raise SpecError("--chunk-rows", chunk_rows, "allowed: a whole number >= 1")
    scenarios.parse(to)
    from predictor.explain import ATTRIBUTION_METHODS

    if explain_method not in ATTRIBUTION_METHODS:
        raise SpecError("--explain-method", explain_method, f"allowed: {', '.join(ATTRIBUTION_METHODS)}")
    explain_as = explain_method if explain else False
    predictor = fleet.predictor_for(overlap, model, confidence_level)
    if explain and predictor.method != "learned":
        raise SpecError("--explain", True, "explains a learned model's residual; give a trained model, not --model none")
    if out is not None:
        fleet.fleet_format(out, "--out")
        output_file(out, "--out")
    if report is not None:
        output_dir(report, "--report")
    if engine == "local":
        frame = _read_with_warnings(jobs)
        chunks = fleet.iter_scored(frame, to, overlap, chunk_rows, None, model, confidence_level, explain_as)
    else:
        chunks = fleet.iter_scored_dask(jobs, to, overlap, scheduler, model=model, confidence_level=confidence_level, explain=explain_as)

    # The summary needs a few columns; the report needs the jobs and their predictions.
    keep = None if report is not None else [
        "step_time_s", "memory_s", "speedup", "throughput_ratio", "error", "measured_step_time_s", "lower_s", "upper_s",
        "arithmetic_floor_s", "memory_share_of_gpu", "target_memory_share_of_gpu", "passes_to_fit",
    ]
    kept = []

    def collect(stream):
        for chunk in stream:
            kept.append(chunk if keep is None else chunk[[c for c in keep if c in chunk.columns]])
            yield chunk

    if out is not None:
        rows = fleet.write_atomic(collect(chunks), out)
    else:
        for _ in collect(chunks):
            pass
    import pandas as pd

    scored = pd.concat(kept).reset_index(drop=True)
    for line in fleet.summarize(scored, to, predictor.baseline, method=predictor.method, confidence_level=confidence_level).lines():
        typer.echo(line)
    for warning in predictor.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if out is not None:
        typer.echo(f"wrote {out} ({rows:,} rows)")
    if report is not None:
        from predictor.fleet_report import write_report

        written = write_report(scored, report, to, overlap, predictor.method, model, confidence_level)
        typer.echo(f"report: {report / 'report.md'} ({', '.join(written.files[1:])})")


def _read_with_warnings(jobs: Path):
    """The fleet table, each of the reader's warnings printed as one line on stderr."""
    import warnings

    from predictor.fleet_input import FleetInputWarning, read_fleet

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FleetInputWarning)
        frame = read_fleet(jobs)
    for warning in caught:
        if issubclass(warning.category, FleetInputWarning):
            typer.echo(f"warning: {warning.message}", err=True)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    return frame


@domain_errors
def fleet_example_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="File to write (.parquet or .csv).")],
    n: Annotated[int, typer.Option("--n", help="Number of jobs.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Random seed; the same seed gives the same fleet.")] = 0,
) -> None:
    """Write a synthetic example fleet drawn from the catalogues (labelled synthetic in every row).

    Example: predict fleet-example --n 2000 --out fleet.csv
    """
    from predictor import fleet
    from predictor.fleet_example import example_fleet

    if not 1 <= n <= MAX_EXAMPLE_JOBS:
        raise SpecError("--n", n, f"allowed: a whole number from 1 to {MAX_EXAMPLE_JOBS:,} (the fleet is built in memory)")
    if seed < 0:
        raise SpecError("--seed", seed, "allowed: a whole number >= 0")
    fleet.fleet_format(out, "--out")
    output_file(out, "--out")
    rows = fleet.write_atomic(example_fleet(n, seed), out, row_group_rows=fleet.DEFAULT_CHUNK_ROWS)
    typer.echo(f"wrote {rows:,} synthetic jobs to {out} (seed {seed})")
