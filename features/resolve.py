"""From validated job columns to the physical quantities the breakdown needs.

Names resolve against the catalogues once per distinct value; catalogue
defaults fill what a job leaves out (batch size, intra-node link, node count);
rules that tie fields together (:mod:`features.rules`) are checked per row,
without stopping the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features import analytical
from features.analytical import ARCHITECTURE_CODES, BreakdownArrays, communication_s
from features.catalog_arrays import CatalogArrays, catalog_arrays
from features.errors import UnknownNameError
from features.fields import PRECISIONS
from features.rules import check_links, check_not_layout, check_parallelism, check_workload
from features.table import JobTable, factorize, map_values
from features.units import BYTES_PER_ELEMENT, GRADIENT_BYTES_PER_ELEMENT



@dataclass
class ResolvedJobs:
    """Per-job physical inputs of the analytical model (numpy arrays, NaN on failed rows)."""

    table: JobTable
    device_index: np.ndarray  # into catalog.devices.names(); -1 on failed rows
    workload_index: np.ndarray  # into catalog workloads; -1 for explicit-figure models
    intra_link_index: np.ndarray
    network_link_index: np.ndarray
    architecture_code: np.ndarray
    batch_size_per_gpu: np.ndarray
    bytes_per_element: np.ndarray
    flops_per_sample: np.ndarray
    memory_bytes_per_sample: np.ndarray
    input_bytes_per_sample: np.ndarray
    param_count: np.ndarray
    gradient_bytes: np.ndarray
    peak_flops_per_s: np.ndarray
    fp32_peak_flops_per_s: np.ndarray
    device_release_year: np.ndarray
    memory_bw_bytes_per_s: np.ndarray
    host_link_bw_bytes_per_s: np.ndarray
    intra_node_bw_bytes_per_s: np.ndarray
    intra_node_latency_s: np.ndarray
    network_bw_bytes_per_s: np.ndarray
    network_latency_s: np.ndarray
    workers: np.ndarray
    gpus_per_worker: np.ndarray
    total_gpus: np.ndarray
    parameter_servers: np.ndarray
    nodes: np.ndarray
    gpus_per_node_used: np.ndarray
    nics_per_node: np.ndarray

    @property
    def errors(self) -> np.ndarray:
        return self.table.errors

    @property
    def ok(self) -> np.ndarray:
        return self.table.ok

    def breakdown(self) -> BreakdownArrays:
        """The analytical breakdown of every job (NaN on failed rows)."""
        traffic = analytical.memory_traffic_bytes(
            self.memory_bytes_per_sample, self.batch_size_per_gpu, self.param_count, self.bytes_per_element
        )
        comm = communication_s(
            self.architecture_code,
            self.gradient_bytes,
            self.total_gpus,
            self.gpus_per_node_used,
            self.nodes,
            self.workers,
            self.gpus_per_worker,
            self.parameter_servers,
            self.intra_node_bw_bytes_per_s,
            self.intra_node_latency_s,
            self.host_link_bw_bytes_per_s,
            self.network_bw_bytes_per_s,
            self.network_latency_s,
            self.nics_per_node,
        )
        return BreakdownArrays(
            io_s=analytical.io_s(self.input_bytes_per_sample, self.batch_size_per_gpu, self.host_link_bw_bytes_per_s),
            compute_s=analytical.compute_s(self.flops_per_sample, self.batch_size_per_gpu, self.peak_flops_per_s),
            memory_s=analytical.memory_s(traffic, self.memory_bw_bytes_per_s),
            comm=comm,
        )


def _lookup(table: JobTable, leaf: str, path: str, index, names: list[str], strict: bool = True) -> np.ndarray:
    """Positions in ``names`` of a name column's values; -1 where missing or unknown.

    ``index`` is a catalogue NameIndex. An unknown name is a row error when
    ``strict``; otherwise the caller decides (a model outside the catalogue is
    fine when the job gives its figures).
    """
    values = table.columns[leaf]
    codes, uniques = factorize(values)
    position = {name: i for i, name in enumerate(names)}
    resolved = np.full(len(uniques), -1)
    messages: list[str | None] = [None] * len(uniques)
    for u, value in enumerate(uniques):
        if value is None:
            continue
        try:
            resolved[u] = position[index.get(value, path).name]
        except UnknownNameError as exc:
            messages[u] = str(exc)
    out = resolved[codes]
    if strict:
        for u, message in enumerate(messages):
            if message is not None:
                table.fail(codes == u, message)
    return out


def resolve(table: JobTable, catalogs: CatalogArrays | None = None) -> ResolvedJobs:
    """Resolve names, fill catalogue defaults and check cross-field rules, row by row."""
    cat = catalogs or catalog_arrays()
    cols = table.columns
    n = len(table)

    device = _lookup(table, "gpu", "cluster.gpu", cat.hardware.devices, cat.device_names)
    model = _lookup(table, "model", "workload.model", cat.workloads.workloads, cat.workload_names, strict=False)
    network = _lookup(table, "network", "cluster.network", cat.hardware.links, cat.link_names)
    intra = _lookup(table, "intra_node_link", "cluster.intra_node_link", cat.hardware.links, cat.link_names)
    has_device = device >= 0
    safe_device = np.where(has_device, device, 0)
    intra = np.where((intra < 0) & has_device, cat.default_intra_link_index[safe_device], intra)
    check_links(table, cat, device, intra, network)

    # Workload figures: explicit figures win over the catalogue's.
    has_model = model >= 0
    safe_model = np.where(has_model, model, 0)
    precision = cols["precision"]
    bytes_per_element = _per_precision(precision, BYTES_PER_ELEMENT)
    gradient_bytes_per_element = _per_precision(precision, GRADIENT_BYTES_PER_ELEMENT)

    def catalogue_or_nan(values: np.ndarray) -> np.ndarray:
        return np.where(has_model, values[safe_model], np.nan)

    flops = _first_given(cols["flops_per_sample"], catalogue_or_nan(cat.workload_flops_per_sample))
    memory = _first_given(
        cols["memory_bytes_per_sample"],
        catalogue_or_nan(cat.workload_memory_bytes_per_sample_fp32) * bytes_per_element / BYTES_PER_ELEMENT["fp32"],
    )
    input_bytes = _first_given(cols["input_bytes_per_sample"], catalogue_or_nan(cat.workload_input_bytes_per_sample))
    param_count = _first_given(
        cols["param_count"],
        cols["gradient_bytes"] / gradient_bytes_per_element,
        catalogue_or_nan(cat.workload_dense_param_count),
    )
    gradient_bytes = _first_given(cols["gradient_bytes"], param_count * gradient_bytes_per_element)
    batch = _first_given(cols["batch_size_per_gpu"], catalogue_or_nan(cat.workload_default_batch))
    check_workload(table, cat, has_model, flops, memory, input_bytes, param_count, batch)

    # Parallelism.
    arch = map_values(cols["architecture"], ARCHITECTURE_CODES, -1, int)
    workers = cols["workers"]
    gpus_per_worker = cols["gpus_per_worker"]
    total_gpus = workers * gpus_per_worker
    gpus_per_node = cols["gpus_per_node"]
    fewest_nodes = np.ceil(total_gpus / gpus_per_node)
    nodes = np.where(np.isnan(cols["nodes"]), fewest_nodes, cols["nodes"])
    parameter_servers = np.where(np.isnan(cols["parameter_servers"]), 1.0, cols["parameter_servers"])
    gpus_per_node_used = np.select(
        [arch == ARCHITECTURE_CODES["allreduce-cluster"], arch == ARCHITECTURE_CODES["ps-worker"]],
        [total_gpus / nodes, gpus_per_worker],
        total_gpus,
    )
    nodes = np.select(
        [arch == ARCHITECTURE_CODES["allreduce-cluster"], arch == ARCHITECTURE_CODES["ps-worker"]],
        [nodes, workers],
        1.0,
    )
    check_parallelism(table, arch, total_gpus, gpus_per_node, nodes, gpus_per_worker, cols)
    check_not_layout(table)

    ok = table.ok
    precision_index = map_values(precision, {p: i for i, p in enumerate(PRECISIONS)}, 0, int)
    safe_intra = np.where(intra >= 0, intra, 0)
    safe_network = np.where(network >= 0, network, 0)

    def masked(values: np.ndarray) -> np.ndarray:
        return np.where(ok, values, np.nan)

    return ResolvedJobs(
        table=table,
        device_index=np.where(ok, device, -1),
        workload_index=np.where(ok, model, -1),
        intra_link_index=np.where(ok, intra, -1),
        network_link_index=np.where(ok, network, -1),
        architecture_code=np.where(ok, arch, -1),
        batch_size_per_gpu=masked(batch),
        bytes_per_element=masked(bytes_per_element),
        flops_per_sample=masked(flops),
        memory_bytes_per_sample=masked(memory),
        input_bytes_per_sample=masked(input_bytes),
        param_count=masked(param_count),
        gradient_bytes=masked(gradient_bytes),
        peak_flops_per_s=masked(cat.peak_flops_per_s[safe_device, precision_index]),
        fp32_peak_flops_per_s=masked(cat.peak_flops_per_s[safe_device, PRECISIONS.index("fp32")]),
        device_release_year=masked(cat.release_year[safe_device]),
        memory_bw_bytes_per_s=masked(cat.memory_bw_bytes_per_s[safe_device]),
        host_link_bw_bytes_per_s=masked(cat.link_bw_bytes_per_s[cat.host_link_index[safe_device]]),
        intra_node_bw_bytes_per_s=masked(cat.link_bw_bytes_per_s[safe_intra]),
        intra_node_latency_s=masked(cat.link_latency_s[safe_intra]),
        network_bw_bytes_per_s=masked(cat.link_bw_bytes_per_s[safe_network]),
        network_latency_s=masked(cat.link_latency_s[safe_network]),
        workers=masked(workers),
        gpus_per_worker=masked(gpus_per_worker),
        total_gpus=masked(total_gpus),
        parameter_servers=masked(parameter_servers),
        nodes=masked(nodes),
        gpus_per_node_used=masked(gpus_per_node_used),
        nics_per_node=masked(cols["nics_per_node"]),
    )


def _per_precision(precision: np.ndarray, table: dict[str, float]) -> np.ndarray:
    return map_values(precision, table, np.nan)


def _first_given(*candidates: np.ndarray) -> np.ndarray:
    out = np.asarray(candidates[0], float)
    for candidate in candidates[1:]:
        out = np.where(np.isnan(out), candidate, out)
    return out


def bottleneck_links(resolved: ResolvedJobs, breakdown: BreakdownArrays, catalogs: CatalogArrays | None = None) -> np.ndarray:
    """Per job, the link behind an io or communication bottleneck (None for compute and memory).

    Communication names the slower of the intra-node link and the network; a
    PS/Worker network bound by the servers' NICs says so.
    """
    cat = catalogs or catalog_arrays()
    code = breakdown.bottleneck_code()
    names = np.array(cat.link_names + [None], object)
    host = np.where(resolved.device_index >= 0, cat.host_link_index[np.maximum(resolved.device_index, 0)], -1)
    intra = names[resolved.intra_link_index]
    network = names[resolved.network_link_index]
    fan_in_names = np.array([name + " (parameter-server fan-in)" for name in cat.link_names] + [None], object)
    fan_in = breakdown.comm.ps_fan_in_bound
    network_label = np.where(fan_in, fan_in_names[resolved.network_link_index], network)
    comm_link = np.where(breakdown.comm.network_s >= breakdown.comm.intra_node_s, network_label, intra)
    out = np.full(len(code), None, object)
    out[code == 0] = names[host][code == 0]
    out[code == 3] = comm_link[code == 3]
    out[~resolved.ok] = None
    return out
