"""``python -m training.importers SOURCE PATH``: map one public table and say what became of every row."""

from __future__ import annotations

from pathlib import Path

import typer

from features.errors import SpecError
from training.importers.registry import IMPORTERS, importer
from training.runs import save_runs

app = typer.Typer(add_completion=False)


@app.command()
def main(
    source: str = typer.Argument(..., help=f"Which table: {', '.join(IMPORTERS)}."),
    path: Path = typer.Argument(..., help="The source CSV (e.g. ../shared/data/lambda_throughput.csv)."),
    out: Path = typer.Option(None, "--out", help="Write the mapped runs here (.csv or .parquet)."),
    excluded: Path = typer.Option(None, "--excluded", help="Write the excluded rows, with reasons, here (.csv)."),
) -> None:
    """Map a public benchmark table onto run rows and print what was mapped and why the rest was not.

    Example: python -m training.importers lambda ../shared/data/lambda_throughput.csv --out runs_lambda.csv
    """
    from features.workloads import workload_catalog

    try:
        result = importer(source)(path)
        if out is not None:
            save_runs(result.runs, out)
        if excluded is not None:
            result.excluded.to_csv(excluded, index=False)
    except SpecError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    counts = result.counts()
    typer.echo(f"{counts['rows']} rows: {counts['mapped']} mapped, {counts['excluded']} excluded")
    for reason, count in counts["excluded_by_reason"].items():
        typer.echo(f"  excluded {count:5d}  {reason}")
    catalogue = workload_catalog()
    absent = sorted({m for m in result.runs["model"] if catalogue.workloads.find(m) is None})
    if absent:
        n_absent = int(result.runs["model"].isin(absent).sum())
        typer.echo(f"  note: {n_absent} mapped rows name models not yet in the workload catalogue ({', '.join(absent)}); load_runs rejects them until they are added")
    if out is not None:
        typer.echo(f"wrote {out}")
