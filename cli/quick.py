"""The ``predict`` console entry: one-job JSON answers without loading the command-line framework.

``predict time --job F --json`` and ``predict speedup --job F --to S --json``
(with ``--model``, ``--overlap``, ``--confidence-level``) are answered here
straight from :class:`predictor.Predictor`, and print what the Typer
commands print. Anything else (another command, ``--help``, an option or
spelling this small parser does not take, and any failure at all) goes to
the Typer app in :mod:`cli.main`, which answers it as always, so errors keep
their one path. Typer and the click it carries take about 0.35 s to import,
half of what numpy takes, on a command that does a millisecond of work.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

#: The commands answered here, and whether they take --to.
COMMANDS = {"time": False, "speedup": True}
OPTIONS = {"--job": "job", "-j": "job", "--to": "to", "--overlap": "overlap", "--model": "model", "--confidence-level": "confidence_level"}


def parse(argv: Sequence[str]) -> dict[str, Any] | None:
    """The options of a one-job JSON answer, or None where the Typer app must parse ``argv``."""
    if not argv or argv[0] not in COMMANDS:
        return None
    options: dict[str, Any] = {"to": [], "overlap": "none", "model": "default", "confidence_level": "0.9", "json": False}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--json":
            options["json"] = True
            i += 1
            continue
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in OPTIONS:
            return None
        if not equals:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
        i += 1 if equals else 2
        if OPTIONS[name] == "to":
            options["to"].append(value)
        else:
            options[OPTIONS[name]] = value
    if not options["json"] or "job" not in options or COMMANDS[argv[0]] != bool(options["to"]):
        return None
    return options


def answer(command: str, options: dict[str, Any]) -> str | None:
    """The JSON text the command prints, or None where anything went wrong (the Typer app then says what)."""
    try:
        from predictor.api import Predictor

        model = options["model"]
        predictor = Predictor(model=None if model == "none" else model, overlap=options["overlap"], confidence_level=float(options["confidence_level"]))
        result = predictor.time(options["job"]) if command == "time" else predictor.speedup(options["job"], options["to"])
        if hasattr(result, "check_fits"):  # a layout job: `predict time` also checks that it fits memory
            return None
        return json.dumps(result.to_dict(), indent=2, default=_plain) + "\n"
    except Exception:  # every failure is reported by the full command line, in its one way
        return None


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def main(argv: Sequence[str] | None = None) -> None:
    """Answer ``argv`` (default: the command line) here when it is a one-job JSON answer, else with the Typer app."""
    argv = list(sys.argv[1:] if argv is None else argv)
    options = parse(argv)
    text = None if options is None else answer(argv[0], options)
    if text is not None:
        sys.stdout.write(text)
        return
    from cli.main import app

    app(args=argv, prog_name="predict")
