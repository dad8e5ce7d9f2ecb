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

import codecs
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
from features.table import bound_text, table_from_rows

@dataclass(frozen=True)
class Job:
    """One validated job, as its flat row (leaf name -> value as given, None where omitted)."""

    name: str
    row: Mapping[str, Any]

    @property
    def measured_step_time_s(self) -> float | None:
        value = self.row.get("measured_step_time_s")
        return None if value is None else float(value)


#: Integers beyond any field's bound (and beyond float range) are refused before conversion.
MAX_INTEGER = 10**30


def _fields_of(section: str | None) -> list[str]:
    if section is None:
        return ["name", *SECTIONS]
    return [f.name for f in FIELDS if f.section == section]


def _json_type(value: Any) -> str:
    """What JSON calls a parsed value's type."""
    for kinds, name in ((type(None), "null"), (bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array")):
        if isinstance(value, kinds):
            return name
    return type(value).__name__


def job_from_dict(data: Any) -> Job:
    """Validate a parsed JSON object as a job; the first problem raises ``SpecError``."""
    if not isinstance(data, dict):
        raise SpecError("job", f"a JSON {_json_type(data)}", "a job is a JSON object with workload and cluster")
    for key in data:
        if key not in _fields_of(None):
            raise SpecError(key, data[key], f"unknown field; allowed here: {', '.join(_fields_of(None))}")
    for section in REQUIRED_SECTIONS:
        if section not in data:
            raise SpecError(section, MISSING, "this field is required")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise SpecError("name", name, "a name is a JSON string")
    row: dict[str, Any] = {"name": name}
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
            rule = next(f for f in FIELDS if f.section == section and f.name == key)
            if isinstance(value, str) and rule.kind in ("int", "float"):
                # The JSON Schema (`predict schema`) says number: "64" in quotes is text, as a typo'd "6 4" would be.
                raise SpecError(f"{section}.{key}", value, f"a JSON number without quotes; {bound_text(rule)}")
            if isinstance(value, float) and not math.isfinite(value):
                raise SpecError(f"{section}.{key}", value, "a finite number is expected")
            if isinstance(value, int) and abs(value) > MAX_INTEGER:
                raise SpecError(f"{section}.{key}", f"an integer of {len(str(abs(value)))} digits", "a finite number within the field's bounds")
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


#: A job is two levels deep (sections of fields); deeper text is not a job.
MAX_JSON_DEPTH = 16

_WIDE_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


def load_job(path: str | Path) -> Job:
    """Read and validate one job JSON file (UTF-8, optionally with a byte-order mark)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise SpecError("--job", str(path), "is a directory; give a job JSON file") from None
    except OSError as exc:
        raise SpecError("--job", str(path), f"cannot read the file ({exc.strerror})") from None
    return job_from_dict(parse_json_text(raw, "--job", str(path)))


def parse_json_text(raw: bytes, field: str, where: str) -> Any:
    """Parse JSON bytes at the input edge: UTF-8 only, bounded nesting, numbers Python can hold."""
    for bom, encoding in _WIDE_BOMS.items():
        if raw.startswith(bom):
            raise SpecError(field, where, f"is {encoding} encoded; save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(field, where, f"is not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r}); save it as UTF-8") from None
    depth = _max_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise SpecError(field, where, f"nests {depth} levels deep; a job has at most {MAX_JSON_DEPTH}")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise SpecError(field, where, f"names {exc.args[0]!r} twice in one object; give each field once") from None
    except json.JSONDecodeError as exc:
        raise SpecError(field, where, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # an integer beyond Python's digit limit
        raise SpecError(field, where, f"holds a number too long to read ({exc}); numbers must be finite and within the field's bounds") from None
    except RecursionError:
        raise SpecError(field, where, f"nests too deep; a job has at most {MAX_JSON_DEPTH} levels") from None


class _DuplicateKey(ValueError):
    """A JSON object that names one key twice (the parser would keep the last silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _max_depth(text: str) -> int:
    """Deepest bracket nesting outside JSON strings (a linear scan, no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def flatten(job: Job) -> dict[str, Any]:
    """The job as one fleet row: leaf names to values (None where omitted)."""
    return {leaf: job.row.get(leaf) for leaf in FLAT_FIELDS}
