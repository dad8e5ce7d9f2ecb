"""The ``predict`` application: every command registered on one Typer app, in one place.

The command modules define plain functions and never import this one, so the
command line has no import cycles; each function's docstring is its ``--help``.
Bad input of any kind ends in one line on stderr and exit code 2
(:func:`cli.common.domain_errors`).
"""

from __future__ import annotations

import sys

import typer

from cli import evaluating_llm, fleet, planning, predicting, training

app = typer.Typer(
    name="predict",
    help="Where a training job's step time goes, and how much faster it would run on other hardware or another architecture.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMANDS = {
    "time": predicting.time_command,
    "speedup": predicting.speedup_command,
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
