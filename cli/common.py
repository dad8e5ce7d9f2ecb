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
    str, typer.Option("--overlap", help="How the analytical components add up: none (PAI, additive), overlapped, or roofline (op-class roofline, launches, bucketed overlap, NCCL ring/tree). A learned model starts from the form it was trained on (roofline for the shipped one) whatever this says; it chooses the form with --model none.")
]
ModelOption = Annotated[
    str, typer.Option("--model", help="Model directory; 'default' is the shipped model, 'none' the analytical model alone.")
]
LevelOption = Annotated[float, typer.Option("--confidence-level", help="Coverage of the prediction intervals.")]


def domain_errors(fn: Callable) -> Callable:
    """A command whose user errors become one stderr line and exit code 2 (the only place they do).

    User errors are the domain's :class:`SpecError` (a bad job, scenario,
    model directory or output path) and the operating system refusing a file
    the user named (a full disk, a permission). With ``--json`` the line is a
    JSON object, ``{"error": ...}``.
    """

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except SpecError as exc:
            fail(str(exc), bool(kw.get("as_json")))
        except OSError as exc:
            if exc.filename is None:
                raise
            fail(f"{exc.filename}: {exc.strerror or exc}", bool(kw.get("as_json")))

    return wrapper


def fail(message: str, as_json: bool = False) -> None:
    """Print one error line on stderr (a JSON object for ``--json`` callers) and exit with code 2."""
    _last_line("error", message, as_json, code=2)


#: Exit code of an answer that finds nothing able to run the job: no GPU compared holds it
#: (``predict compare``), no layout fits memory (``predict plan``). The answer is printed as
#: always; the code lets a script tell it from a ranking (0) without parsing it.
NOTHING_FITS_EXIT = 3


def nothing_fits(message: str, as_json: bool = False) -> None:
    """After an answer with nothing able to run the job: one line on stderr and exit code :data:`NOTHING_FITS_EXIT`."""
    _last_line("nothing_fits", message, as_json, code=NOTHING_FITS_EXIT)


def _last_line(key: str, message: str, as_json: bool, code: int) -> None:
    """``key: message`` on one stderr line (``{"key": message}`` for ``--json`` callers), then exit with ``code``."""
    one_line = " ".join(message.split())
    if as_json:
        typer.echo(json.dumps({key: one_line}), err=True)
    else:
        typer.echo(f"{key.replace('_', ' ')}: {one_line}", err=True)
    raise typer.Exit(code=code)


def echo_json(data: Any) -> None:
    """Strict JSON on stdout: a NaN or infinity is a bug, never printed as ``NaN``."""
    typer.echo(json.dumps(data, indent=2, default=json_default, allow_nan=False))


def json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def make_predictor(overlap: str, model: str = "default", confidence_level: float = 0.9):
    from predictor.api import Predictor

    return Predictor(model=None if model == "none" else model, overlap=overlap, confidence_level=confidence_level)


