"""The job spec: one training job as JSON; a fleet row is the same fields flattened.

A job names a workload (a catalogue model, or explicit figures), how it is
parallelised and the cluster it runs on. A fleet is a table with the same
fields flattened to their leaf names (``model``, ``workers``, ``gpu`` ...) and
``measured_step_time_s``. :data:`FIELDS` is the one description of every
field (:mod:`features.fields`); a job file and a fleet row are judged by the
same rules, those of :mod:`features.table`.

Defaults (also in the README):

* ``workload.batch_size_per_gpu``: the catalogue model's default batch;
  ``precision`` fp32; ``framework`` pytorch; ``software_stack`` stock.
* ``parallelism.architecture`` single; ``workers`` 1; ``gpus_per_worker`` 1;
  ``parameter_servers`` 1 for ps-worker; ``nodes`` for allreduce-cluster: the
  fewest nodes that hold all GPUs at ``gpus_per_node`` each.
* ``cluster.gpus_per_node`` 8; ``intra_node_link`` the GPU's own (NVLink or
  NVSwitch for SXM parts, its PCIe generation for cards); ``network``
  ethernet-25g; ``nics_per_node`` 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from features.errors import MISSING, SpecError
from features.fields import (  # noqa: F401  (the spec's vocabulary, re-exported for callers)
    ARCHITECTURES,
    FIELDS,
    FIELDS_BY_LEAF,
    FLAT_FIELDS,
    FRAMEWORKS,
    PRECISIONS,
    REQUIRED_SECTIONS,
    SECTIONS,
    SOFTWARE_STACKS,
    Field,
    field_path,
    json_schema,
)
from features.table import table_from_rows

@dataclass(frozen=True)
class Job:
    """One validated job, as its flat row (leaf name -> value as given, None where omitted)."""

    name: str
    row: Mapping[str, Any]

    @property
    def measured_step_time_s(self) -> float | None:
        value = self.row.get("measured_step_time_s")
        return None if value is None else float(value)


def _fields_of(section: str | None) -> list[str]:
    if section is None:
        return ["name", *SECTIONS]
    return [f.name for f in FIELDS if f.section == section]


def job_from_dict(data: Any) -> Job:
    """Validate a parsed JSON object as a job; the first problem raises ``SpecError``."""
    if not isinstance(data, dict):
        raise SpecError("job", type(data).__name__, "a job is a JSON object with workload and cluster")
    for key in data:
        if key not in _fields_of(None):
            raise SpecError(key, data[key], f"unknown field; allowed here: {', '.join(_fields_of(None))}")
    for section in REQUIRED_SECTIONS:
        if section not in data:
            raise SpecError(section, MISSING, "this field is required")
    row: dict[str, Any] = {"name": data.get("name")}
    for section in SECTIONS:
        values = data.get(section)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise SpecError(section, values, f"a JSON object with fields: {', '.join(_fields_of(section))}")
        if section == "workload" and isinstance(values.get("adapter"), dict):
            values = _flat_adapter(values)
        for key, value in values.items():
            if key not in _fields_of(section):
                raise SpecError(f"{section}.{key}", value, f"unknown field; allowed here: {', '.join(_fields_of(section))}")
            if isinstance(value, bool) and FIELDS_BY_LEAF.get(key) is not None and FIELDS_BY_LEAF[key].kind == "bool":
                continue
            if isinstance(value, (dict, list, bool)):
                raise SpecError(f"{section}.{key}", value, "a single number or text is expected")
            if isinstance(value, float) and not math.isfinite(value):
                raise SpecError(f"{section}.{key}", value, "a finite number is expected")
        if section == "measured" and "step_time_s" not in values:
            raise SpecError("measured.step_time_s", MISSING, "this field is required when measured is given")
        for f in FIELDS:
            if f.section == section:
                row[f.leaf] = values.get(f.name)
    table = table_from_rows([row])
    if table.errors[0] is not None:
        from features.errors import RowError

        raise RowError(table.errors[0])
    name = table.columns["name"][0]
    return Job(name=str(name), row=row)


def _flat_adapter(workload: dict[str, Any]) -> dict[str, Any]:
    """``"adapter": {"kind": "lora", "rank": 16}`` as the flat fields adapter and adapter_rank."""
    adapter = workload["adapter"]
    unknown = set(adapter) - {"kind", "rank"}
    if unknown:
        raise SpecError(f"workload.adapter.{sorted(unknown)[0]}", adapter[sorted(unknown)[0]], "allowed here: kind, rank")
    if "adapter_rank" in workload and "rank" in adapter:
        raise SpecError("workload.adapter_rank", workload["adapter_rank"], "give the rank once, in workload.adapter.rank")
    flat = {k: v for k, v in workload.items() if k != "adapter"}
    flat["adapter"] = adapter.get("kind")
    if "rank" in adapter:
        flat["adapter_rank"] = adapter["rank"]
    return flat


def load_job(path: str | Path) -> Job:
    """Read and validate one job JSON file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("--job", str(path), f"cannot read the file ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError("--job", str(path), f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return job_from_dict(data)


def flatten(job: Job) -> dict[str, Any]:
    """The job as one fleet row: leaf names to values (None where omitted)."""
    return {leaf: job.row.get(leaf) for leaf in FLAT_FIELDS}
