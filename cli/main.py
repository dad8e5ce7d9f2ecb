"""The ``predict`` application: every command registered on one Typer app, in one place.

The command modules define plain functions and never import this one, so the
command line has no import cycles; each function's docstring is its ``--help``.
Bad input of any kind ends in one line on stderr and exit code 2
(:func:`cli.common.domain_errors`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from cli import evaluating_llm, fleet, planning, predicting, training
from cli.common import fail


class OneLineUsageErrors(TyperGroup):
    """Usage errors (a missing option, a value of the wrong type, an unknown command) as one stderr line and
    exit code 2, as every other bad input ends (:func:`cli.common.fail`); a JSON object with ``--json``."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        arguments = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(arguments, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        except typer.TyperException as exc:  # the command line's own errors (typer's vendored click)
            if type(exc).__name__ == "NoArgsIsHelpError":  # `predict` alone: the help, as asked for
                exc.show()
                sys.exit(exc.exit_code)
            where = f"{exc.ctx.command_path}: " if getattr(exc, "ctx", None) is not None else ""
            try:
                fail(where + exc.format_message(), "--json" in arguments)
            except typer.Exit as done:
                sys.exit(done.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineUsageErrors,
    name="predict",
    help="Where a training job's step time goes, and how much faster it would run on other hardware or another architecture.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMANDS = {
    "time": predicting.time_command,
    "speedup": predicting.speedup_command,
    "compare": predicting.compare_command,
    "breakdown": predicting.breakdown_command,
    "explain": predicting.explain_command,
    "devices": predicting.devices_command,
    "workloads": predicting.workloads_command,
    "schema": predicting.schema_command,
    "roofline": predicting.roofline_command,
    "plan": planning.plan_command,
    "fleet": fleet.fleet_command,
    "fleet-example": fleet.fleet_example_command,
    "train": training.train_command,
    "evaluate": training.evaluate_command,
    "ablate": training.ablate_command,
    "physics-report": training.physics_report_command,
    "evaluate-llm": evaluating_llm.evaluate_llm_command,
    "refit": training.refit_command,
    "collect": training.collect_command,
}
for _name, _command in COMMANDS.items():
    app.command(_name)(_command)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
