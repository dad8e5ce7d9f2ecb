"""Command line of the testbed: ``python -m training.testbed collect|calibrate|calibrate-collectives``.

:func:`collect_command` is also what the product CLI mounts as
``predict collect``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from features.errors import SpecError
from training.testbed.netns import TestbedUnavailable

DEFAULT_OUT = Path("training/data/testbed_runs.csv")

app = typer.Typer(
    help="Measure real single, all-reduce and parameter-server training on this host under emulated network tiers.",
    no_args_is_help=True,
    add_completion=False,
)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def collect_command(
    plan: str = typer.Option("smoke", "--plan", help="smoke (under a minute) or full (about 30 minutes, 315 runs)."),
    out: Path = typer.Option(DEFAULT_OUT, "--out", help="Run table (CSV) to append to."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Measure again configurations already in --out."),
) -> None:
    """Train the testbed models on emulated hosts and append one run-table row per configuration.

    Needs root and iproute2 (ip, tc): every worker and parameter server runs
    in its own network namespace with a tc-limited NIC. Configurations
    already in --out are skipped, so an interrupted collection resumes.

    Example: python -m training.testbed collect --plan smoke --out /tmp/smoke.csv
    """
    from training.testbed.collect import collect

    try:
        collect(plan, out, overwrite=overwrite)
    except (TestbedUnavailable, SpecError) as error:
        _fail(str(error))
    except KeyboardInterrupt:
        typer.echo(f"interrupted: namespaces and qdiscs removed; rows so far are in {out}, rerun to resume", err=True)
        raise typer.Exit(code=130) from None


def calibrate_command(
    tiers: str = typer.Option("", "--tiers", help="Comma-separated tiers (default: those the plans use), e.g. 250m,1g."),
    out: Path | None = typer.Option(None, "--out", help="Catalogue file to write (default features/catalog/hardware/testbed.json)."),
    rounds: int = typer.Option(3, "--rounds", min=1, max=50, help="Rounds of host benchmarks; the figures are medians over them."),
) -> None:
    """Benchmark this host (single-thread FP32 FLOP/s, memory bandwidth) and its links; write the catalogue file.

    Example: python -m training.testbed calibrate --tiers 100m,250m,1g,4g
    """
    from training.testbed.calibrate import DEFAULT_TIERS, HARDWARE_PATH, calibrate
    from training.testbed.tiers import parse_tiers

    try:
        chosen = parse_tiers(tiers) if tiers else DEFAULT_TIERS
        calibrate(chosen, out or HARDWARE_PATH, rounds)
    except (TestbedUnavailable, SpecError) as error:
        _fail(str(error))
    except KeyboardInterrupt:
        typer.echo("interrupted: namespaces and qdiscs removed, catalogue file unchanged", err=True)
        raise typer.Exit(code=130) from None


def calibrate_collectives_command(
    tiers: str = typer.Option("", "--tiers", help="Comma-separated tiers (default: those the plans use), e.g. 250m,1g."),
    out: Path | None = typer.Option(
        None, "--out", help="Collectives catalogue to update, e.g. features/catalog/collectives.json (default: print only)."
    ),
    rounds: int = typer.Option(5, "--rounds", min=1, max=50, help="Rounds of probes; the figures are medians over them."),
) -> None:
    """Measure gloo's all-reduce over the host's loopback and each tier: bus efficiency and fixed cost per call.

    Two testbed processes time bare all-reduces of 4 KiB and of about a quarter second of the link's
    rate; the two-rank ring model solved at both sizes gives the figures. Reads the links' bandwidth
    and latency from the hardware catalogue (`calibrate`). About 15 seconds a round. Prints the
    figures; with --out, writes each link's median efficiency over the rounds and one call cost, the
    median over every link and round (on a 2-core host the 4 KiB time is bimodal, about 0.5 or 3 ms
    from run to run, whatever the link).

    Example: python -m training.testbed calibrate-collectives --tiers 100m,250m,1g,4g
    """
    from training.testbed.calibrate import DEFAULT_TIERS, calibrate_collectives
    from training.testbed.tiers import parse_tiers

    try:
        chosen = parse_tiers(tiers) if tiers else DEFAULT_TIERS
        calibrate_collectives(chosen, out, rounds)
    except (TestbedUnavailable, SpecError) as error:
        _fail(str(error))
    except KeyboardInterrupt:
        typer.echo("interrupted: namespaces and qdiscs removed, catalogue file unchanged", err=True)
        raise typer.Exit(code=130) from None


app.command("collect")(collect_command)
app.command("calibrate")(calibrate_command)
app.command("calibrate-collectives")(calibrate_collectives_command)
