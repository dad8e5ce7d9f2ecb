"""Run-table rows of testbed measurements, appended to a CSV one run at a time."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from training.testbed.measure import Measurement
from training.testbed.plan import RunConfig

#: Columns of the run table, in order: job fields, then measurement and provenance.
RUN_COLUMNS = (
    "name", "model", "batch_size_per_gpu", "precision", "framework", "software_year",
    "flops_per_sample", "param_count", "gradient_bytes", "memory_bytes_per_sample", "input_bytes_per_sample",
    "architecture", "workers", "gpus_per_worker", "parameter_servers",
    "nodes", "gpu", "gpus_per_node", "intra_node_link", "network", "nics_per_node",
    "measured_step_time_s",
    "source", "source_id", "system", "collected_at", "host", "software", "repeats", "spread_rel",
    "measured_compute_s", "measured_comm_s",
)  # fmt: skip

SOURCE = "testbed"


@dataclass(frozen=True)
class RunContext:
    """Where and with what a collection ran; the same for all its rows."""

    host: str
    system: str
    software: str
    collected_at: str


def run_row(config: RunConfig, measurement: Measurement, context: RunContext) -> dict:
    """One run-table row. Model figures (FLOPs, parameters, bytes) are left to the workload catalogue."""
    row = dict.fromkeys(RUN_COLUMNS)
    row.update(config.topology.job_columns())
    row.update(
        name=config.name,
        model=config.model,
        batch_size_per_gpu=config.batch_size,
        precision="fp32",
        framework="pytorch",
        # The torch build a collection runs is its own year's release at the latest.
        software_year=int(context.collected_at[:4]),
        network=config.network,
        measured_step_time_s=measurement.step_time_s,
        source=SOURCE,
        source_id=config.run_id,
        system=context.system,
        collected_at=context.collected_at,
        host=context.host,
        software=context.software,
        repeats=measurement.repeats,
        spread_rel=measurement.spread_rel,
        measured_compute_s=measurement.compute_s,
        measured_comm_s=measurement.comm_s,
    )
    return row


def read_rows(path: Path) -> list[dict]:
    """Rows of an existing run table (strings as written); none when the file is absent or empty."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != RUN_COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames} are not the run-table columns {list(RUN_COLUMNS)}")
        return list(reader)


def measured_keys(rows: list[dict]) -> set[tuple[str, str]]:
    """``(host, source_id)`` of the testbed rows already measured."""
    return {(r["host"], r["source_id"]) for r in rows if r["source"] == SOURCE}


def write_rows(path: Path, rows: list[dict]) -> None:
    """Replace ``path`` with ``rows`` (header included)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, RUN_COLUMNS)
        writer.writeheader()
        writer.writerows(_formatted(r) for r in rows)
    tmp.replace(path)


def append_row(path: Path, row: dict) -> None:
    """Append one row, writing the header first when the file is new or empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, RUN_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(_formatted(row))


def _formatted(row: dict) -> dict:
    out = {}
    for key in RUN_COLUMNS:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out[key] = ""
        elif isinstance(value, float):
            out[key] = f"{value:.6g}"
        else:
            out[key] = value
    return out
