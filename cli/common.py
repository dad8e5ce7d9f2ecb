"""What every ``predict`` command shares: option types, the one place domain errors become exit code 2, JSON output."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Annotated, Any, Callable

import typer

from features.errors import SpecError

JobOption = Annotated[Path, typer.Option("--job", "-j", help="Job spec JSON file (see `predict schema`).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
OverlapOption = Annotated[
    str, typer.Option("--overlap", help="How the analytical components add up: none (PAI, additive), overlapped, or roofline (op-class roofline, launches, bucketed overlap, NCCL ring/tree).")
]
ModelOption = Annotated[
    str, typer.Option("--model", help="Model directory; 'default' is the shipped model, 'none' the analytical model alone.")
]
LevelOption = Annotated[float, typer.Option("--confidence-level", help="Coverage of the prediction intervals.")]


def domain_errors(fn: Callable) -> Callable:
    """A command whose domain errors become one stderr line and exit code 2 (the only place they do)."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except SpecError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(code=2) from None

    return wrapper


def echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=json_default))


def json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def make_predictor(overlap: str, model: str = "default", confidence_level: float = 0.9):
    from predictor.api import Predictor

    return Predictor(model=None if model == "none" else model, overlap=overlap, confidence_level=confidence_level)


