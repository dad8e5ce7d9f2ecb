"""Run a plan on the emulated network and append one run-table row per configuration."""

from __future__ import annotations

import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path

from training.testbed.measure import summarize
from training.testbed.netns import EmulatedNetwork, check_available
from training.testbed.plan import Plan, RunConfig, make_plan
from training.testbed.processes import ProcessSet
from training.testbed.results import RunContext, append_row, measured_keys, read_rows, run_row, write_rows

BASE_PORT = 29500


@dataclass(frozen=True)
class CollectionSummary:
    """What a collection did: runs measured and skipped, wall time, load average before and after."""

    plan: str
    out_path: Path
    measured: int
    skipped: int
    duration_s: float
    loadavg_start: tuple[float, float, float]
    loadavg_end: tuple[float, float, float]


def _system_name(host: str) -> str:
    return f"testbed {host} ({os.cpu_count()} CPU cores, network namespaces + tc tbf)"


def _software(init_reply: dict) -> str:
    return f"torch {init_reply.get('torch', '?')} gloo; python {platform.python_version()}"


def describe(config: RunConfig, measurement) -> str:
    where = config.network or "loopback"
    return (
        f"{config.topology.label} {where} {config.model} b{config.batch_size}: "
        f"{measurement.step_time_s * 1e3:.1f} ms/step (compute {measurement.compute_s * 1e3:.1f}, "
        f"comm {measurement.comm_s * 1e3:.1f}), {measurement.repeats} steps, spread {measurement.spread_rel:.0%}"
    )


def collect(
    plan: str | Plan,
    out_path: str | Path,
    *,
    overwrite: bool = False,
    progress: Callable[[str], None] = print,
) -> CollectionSummary:
    """Measure every configuration of ``plan`` and append its row to ``out_path``.

    Configurations already in ``out_path`` for this host are skipped unless
    ``overwrite``, in which case their old rows are replaced. Raises
    ``TestbedUnavailable`` when the host cannot emulate a network.
    """
    check_available()
    plan = make_plan(plan) if isinstance(plan, str) else plan
    out_path = Path(out_path)
    host = socket.gethostname()
    started = time.monotonic()
    loadavg_start = os.getloadavg()

    runs = plan.runs()
    rows = read_rows(out_path)
    planned = {(host, r.run_id) for r in runs}
    if overwrite and rows:
        write_rows(out_path, [r for r in rows if (r["host"], r["source_id"]) not in planned])
        rows = read_rows(out_path)
    done = measured_keys(rows)
    todo = [r for r in runs if (host, r.run_id) not in done]
    skipped = len(runs) - len(todo)
    progress(
        f"testbed: plan {plan.name}, {len(runs)} runs, {skipped} already in {out_path}; "
        f"load average {loadavg_start[0]:.2f}"
    )

    measured = 0
    if todo:
        with EmulatedNetwork(plan.max_hosts) as network:
            for index, (topology, block_runs) in enumerate(groupby(todo, key=lambda r: r.topology)):
                block_runs = list(block_runs)
                start_s = time.monotonic()
                with ProcessSet(topology, network, BASE_PORT + index) as procs:
                    progress(f"  {topology.label}: {topology.processes} processes up in {time.monotonic() - start_s:.1f} s")
                    context = RunContext(
                        host=host,
                        system=_system_name(host),
                        software=_software(procs.init_replies[0]),
                        collected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    )
                    for config in block_runs:
                        if config.tier is not None and config.tier != network.tier:
                            network.set_tier(config.tier)
                        replies = procs.run(plan.timing.request(config))
                        measurement = summarize(topology.architecture, replies[0])
                        append_row(out_path, run_row(config, measurement, context))
                        measured += 1
                        progress(f"  [{skipped + measured}/{len(runs)}] {describe(config, measurement)}")
    summary = CollectionSummary(
        plan.name, out_path, measured, skipped, time.monotonic() - started, loadavg_start, os.getloadavg()
    )
    progress(
        f"testbed: {measured} runs measured, {skipped} skipped, {summary.duration_s:.0f} s; "
        f"load average {summary.loadavg_start[0]:.2f} -> {summary.loadavg_end[0]:.2f}"
    )
    return summary
