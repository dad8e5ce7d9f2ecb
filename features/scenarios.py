"""What-if scenarios: named presets and ``key=value`` overrides, applied in order.

A scenario rewrites a job's fields, never its physics: the target job goes
through the same resolution and breakdown as the baseline, so the identity
what-if gives exactly 1.0x.

Presets:

* ``allreduce-nvlink``: a multi-GPU job (PS/Worker, or AllReduce over another
  link) to AllReduce over the GPU's own NVLink inside nodes: ``allreduce-local``
  if all GPUs fit in one node, else ``allreduce-cluster`` on the fewest nodes
  that hold them; a one-GPU job has no gradients to exchange and stays as it is;
* ``allreduce-pcie``: the same over the GPU's PCIe generation;
* any network link name (``ethernet-25g``, ``ethernet-100g``, ``infiniband-ndr`` ...):
  the job's nodes and parameter servers use that NIC;
* ``mixed-precision``: FP32/TF32 training to FP16 on tensor cores.

Overrides set one flat job field: ``gpu=H100-SXM``, ``workers=16``, ``nodes=4``,
``batch_size_per_gpu=128``, ``network=ethernet-100g`` ... A GPU change keeps
the kind of intra-node link (NVLink stays NVLink, at the new GPU's generation;
PCIe stays PCIe, at the new GPU's generation) unless the scenario also sets
``intra_node_link``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from features.errors import SpecError, UnknownNameError
from features.hardware import HardwareCatalog, hardware_catalog
from features.fields import FLAT_FIELDS
from features.table import RULES, JobTable, check_column, map_values

#: Flat fields a ``key=value`` override may set.
OVERRIDABLE = tuple(leaf for leaf in FLAT_FIELDS if leaf not in ("name", "measured_step_time_s"))


@dataclass(frozen=True)
class Step:
    """One parsed scenario step: a preset, or an override of one field."""

    text: str
    apply: Callable[[JobTable, HardwareCatalog], None]


def _device_links(table: JobTable, catalog: HardwareCatalog, attr: str) -> np.ndarray:
    """Per row, the named link attribute of the row's GPU (None where the GPU is unknown or has none)."""
    codes, uniques = table.codes("gpu")
    per_unique = []
    for name in uniques:
        device = catalog.devices.find(name) if name is not None else None
        per_unique.append(getattr(device, attr) if device is not None else None)
    links = np.empty(len(per_unique), object)
    links[:] = per_unique
    return links[codes]


def _to_allreduce(link_attr: str, preset: str) -> Callable[[JobTable, HardwareCatalog], None]:
    """Move multi-GPU jobs to AllReduce over the GPU's own link; a one-GPU job has nothing to exchange and stays."""

    def apply(table: JobTable, catalog: HardwareCatalog) -> None:
        cols = table.columns
        total = cols["workers"] * cols["gpus_per_worker"]
        moves = total > 1
        link = _device_links(table, catalog, link_attr)
        codes, gpus = table.codes("gpu")
        for u, gpu in enumerate(gpus):
            device = catalog.devices.find(gpu) if gpu is not None else None
            if device is not None and getattr(device, link_attr) is None:
                table.fail(moves & (codes == u), str(SpecError("--to", preset, f"{gpu} has no NVLink; use allreduce-pcie")))
        fits = total <= cols["gpus_per_node"]
        architecture = np.where(fits, "allreduce-local", "allreduce-cluster").astype(object)
        cols["architecture"] = np.where(moves, architecture, cols["architecture"]).astype(object)
        cols["intra_node_link"] = np.where(moves, link, cols["intra_node_link"]).astype(object)
        cols["nodes"] = np.where(moves, np.nan, cols["nodes"])
        cols["parameter_servers"] = np.where(moves, np.nan, cols["parameter_servers"])

    return apply


def _set_network(name: str) -> Callable[[JobTable, HardwareCatalog], None]:
    def apply(table: JobTable, catalog: HardwareCatalog) -> None:
        table.columns["network"] = np.full(len(table), name, object)

    return apply


def _mixed_precision(table: JobTable, catalog: HardwareCatalog) -> None:
    precision = table.columns["precision"]
    lowered = map_values(precision, {"fp32": "fp16", "tf32": "fp16"}, None, object)
    table.columns["precision"] = np.where(lowered == None, precision, lowered).astype(object)  # noqa: E711


def _override(leaf: str, raw: str) -> Callable[[JobTable, HardwareCatalog], None]:
    rule = RULES[leaf]
    probe = JobTable({}, np.full(1, None, object))
    value = check_column(probe, rule, np.array([raw], object))[0]
    if probe.errors[0] is not None:
        raise SpecError(f"--to {leaf}", raw, probe.errors[0].split("; ", 1)[-1])

    def apply(table: JobTable, catalog: HardwareCatalog) -> None:
        if leaf == "gpu":
            _move_gpu(table, catalog, value)
        kind = object if rule.kind == "str" else float
        table.columns[leaf] = np.full(len(table), value, kind)

    return apply


def _move_gpu(table: JobTable, catalog: HardwareCatalog, new_gpu: str) -> None:
    """Keep the kind of intra-node link when the GPU changes, at the new GPU's generation."""
    device = catalog.devices.get(new_gpu, "--to gpu")
    old_links = table.columns["intra_node_link"]
    old_default = _device_links(table, catalog, "default_intra_node_link")
    current = np.where([v is None for v in old_links], old_default, old_links)
    kinds = map_values(current, {link.name: link.kind for link in catalog.links}, None, object)
    nvlink = device.nvlink_link or device.host_link
    table.columns["intra_node_link"] = np.where(kinds == "nvlink", nvlink, np.where(kinds == "pcie", device.host_link, None)).astype(object)


def presets(catalog: HardwareCatalog | None = None) -> dict[str, Callable[[JobTable, HardwareCatalog], None]]:
    """Named presets; every network link of the catalogue is one."""
    catalog = catalog or hardware_catalog()
    named = {
        "allreduce-nvlink": _to_allreduce("nvlink_link", "allreduce-nvlink"),
        "allreduce-pcie": _to_allreduce("host_link", "allreduce-pcie"),
        "mixed-precision": _mixed_precision,
    }
    for link in catalog.links_of_kind("network"):
        named[link.name] = _set_network(link.name)
    return named


def parse(steps: Sequence[str], catalog: HardwareCatalog | None = None) -> list[Step]:
    """Parse ``--to`` values; an unknown preset or key raises ``SpecError`` listing the valid ones."""
    catalog = catalog or hardware_catalog()
    named = presets(catalog)
    parsed = []
    for text in steps:
        text = text.strip()
        if "=" in text:
            key, _, value = (part.strip() for part in text.partition("="))
            if key not in OVERRIDABLE:
                raise SpecError("--to", text, f"overridable keys: {', '.join(OVERRIDABLE)}")
            if key in ("gpu", "intra_node_link", "network") and value:
                value = _canonical_name(catalog, key, value)
            parsed.append(Step(text, _override(key, value)))
        elif text in named:
            parsed.append(Step(text, named[text]))
        else:
            link = catalog.links.find(text)
            if link is not None and link.kind == "network":
                parsed.append(Step(text, named[link.name]))
                continue
            raise UnknownNameError("scenario", "--to", text, [*named, "KEY=VALUE"], listed=None)  # a short list: all of it
    return parsed


def _canonical_name(catalog: HardwareCatalog, key: str, value: str) -> str:
    if key == "gpu":
        return catalog.devices.get(value, "--to gpu").name
    return catalog.links.get(value, f"--to {key}").name


def apply(table: JobTable, steps: Sequence[Step], catalog: HardwareCatalog | None = None) -> JobTable:
    """A new table with the scenario applied in order; rows that already failed keep their error."""
    catalog = catalog or hardware_catalog()
    target = table.copy()
    for step in steps:
        step.apply(target, catalog)
    return target
