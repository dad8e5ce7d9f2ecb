"""Rules that tie a job's fields together, checked per row without stopping the others.

Links must be of the right kind (an intra-node link inside a node, a network
between nodes) and an NVLink needs a GPU that has one; a model outside the
catalogue must bring its own figures; the parallel layout must fit the
architecture (a single job has one GPU, allreduce-local one node, an
allreduce-cluster spreads evenly over its nodes, a PS/Worker worker is one node).
"""

from __future__ import annotations

import numpy as np

from features.analytical import ARCHITECTURE_CODES
from features.catalog_arrays import CatalogArrays
from features.errors import MISSING, SpecError, UnknownNameError
from features.hardware import INTRA_NODE_LINK_KINDS, LINK_KINDS
from features.table import JobTable


def check_links(table: JobTable, cat: CatalogArrays, device, intra, network) -> None:
    intra_kind = np.where(intra >= 0, cat.link_kind[np.maximum(intra, 0)], -1)
    network_kind = np.where(network >= 0, cat.link_kind[np.maximum(network, 0)], -1)
    names = cat.link_names
    intra_codes = [LINK_KINDS.index(k) for k in INTRA_NODE_LINK_KINDS]
    network_code = LINK_KINDS.index("network")
    intra_allowed = ", ".join(n for n, k in zip(names, cat.link_kind) if k in intra_codes)
    network_allowed = ", ".join(n for n, k in zip(names, cat.link_kind) if k == network_code)
    intra_values = table.columns["intra_node_link"]
    bad_intra = (intra >= 0) & ~np.isin(intra_kind, intra_codes)
    table.fail(bad_intra, lambda i: str(SpecError("cluster.intra_node_link", intra_values[i], f"an intra-node link is needed: {intra_allowed}")))
    network_values = table.columns["network"]
    table.fail(
        (network >= 0) & (network_kind != network_code),
        lambda i: str(SpecError("cluster.network", network_values[i], f"a network link is needed: {network_allowed}")),
    )
    nvlink_code = LINK_KINDS.index("nvlink")
    no_nvlink = (device >= 0) & (intra_kind == nvlink_code) & ~cat.has_nvlink[np.maximum(device, 0)]

    def nvlink_message(i: int) -> str:
        gpu = cat.device_names[device[i]]
        spec = cat.hardware.devices.get(gpu, "cluster.gpu")
        return str(SpecError("cluster.intra_node_link", intra_values[i] or names[intra[i]], f"{gpu} has no NVLink; use {spec.host_link}"))

    table.fail(no_nvlink, nvlink_message)


def check_workload(table, cat, has_model, flops, memory, input_bytes, param_count, batch) -> None:
    """A model outside the catalogue must bring its own figures."""
    models = table.columns["model"]
    custom = ~has_model & table.ok
    needed = {
        "workload.flops_per_sample": flops,
        "workload.param_count": param_count,
        "workload.memory_bytes_per_sample": memory,
        "workload.input_bytes_per_sample": input_bytes,
        "workload.batch_size_per_gpu": batch,
    }
    for path, values in needed.items():
        missing = custom & np.isnan(values)
        what = "param_count or gradient_bytes" if path.endswith("param_count") else path.split(".")[1]
        table.fail(
            missing,
            lambda i, what=what: (
                f"{UnknownNameError('model', 'workload.model', models[i], cat.workload_names)} "
                f"(or describe it: {what} is missing)"
                if models[i] is not None
                else str(SpecError("workload.model", MISSING, f"give a catalogue model or explicit figures ({what} is missing)"))
            ),
        )


def check_passes(table, batch, passes) -> None:
    """Each forward and backward pass of an accumulated step takes at least one sample."""
    with np.errstate(invalid="ignore"):
        short = table.ok & (batch < passes)
    table.fail(short, lambda i: str(SpecError(
        "workload.gradient_accumulation_steps", int(passes[i]),
        f"at most batch_size_per_gpu ({batch[i]:g}) passes: each pass takes at least one sample")))


def check_parallelism(table, arch, total_gpus, gpus_per_node, nodes, gpus_per_worker, cols) -> None:
    single = arch == ARCHITECTURE_CODES["single"]
    table.fail(single & (total_gpus != 1), lambda i: str(SpecError(
        "parallelism.workers", f"{cols['workers'][i]:.0f} x {cols['gpus_per_worker'][i]:.0f} GPUs",
        "single runs 1 worker on 1 GPU; use allreduce-local or allreduce-cluster for more")))
    local = arch == ARCHITECTURE_CODES["allreduce-local"]
    table.fail(local & (total_gpus > gpus_per_node), lambda i: str(SpecError(
        "parallelism.gpus_per_worker", f"{total_gpus[i]:.0f} GPUs",
        f"allreduce-local runs on one node of {gpus_per_node[i]:.0f} GPUs; use allreduce-cluster")))
    cluster = arch == ARCHITECTURE_CODES["allreduce-cluster"]
    with np.errstate(invalid="ignore", divide="ignore"):
        per_node = total_gpus / nodes
    uneven = cluster & ((per_node != np.round(per_node)) | (per_node > gpus_per_node))
    table.fail(uneven, lambda i: str(SpecError(
        "parallelism.nodes", int(nodes[i]),
        f"{total_gpus[i]:.0f} GPUs must spread evenly over the nodes, at most {gpus_per_node[i]:.0f} per node")))
    ps = arch == ARCHITECTURE_CODES["ps-worker"]
    table.fail(ps & (gpus_per_worker > gpus_per_node), lambda i: str(SpecError(
        "parallelism.gpus_per_worker", int(gpus_per_worker[i]),
        f"a worker is one node: at most cluster.gpus_per_node = {gpus_per_node[i]:.0f}")))


def check_not_layout(table: JobTable) -> None:
    """A row with transformer-layout fields is a layout job, answered by the layout model (features.layout:
    ``predict time``, ``plan``, and ``fleet``, which routes such rows there); resolved here as a data-parallel
    job it would silently ignore its layout."""
    from features.fields import FIELDS_BY_LEAF
    from features.layout import LAYOUT_LEAVES, SHAPE_LEAVES
    from features.table import is_missing

    def shown(value):
        return f"{value:g}" if isinstance(value, float) else value

    for leaf in SHAPE_LEAVES + LAYOUT_LEAVES:
        values = table.columns.get(leaf)
        if values is None:
            continue
        table.fail(~is_missing(values), lambda i, leaf=leaf, values=values: str(SpecError(
            FIELDS_BY_LEAF[leaf].path, shown(values[i]),
            "a transformer layout field: such a job is answered by the layout model (predict time, plan, fleet), "
            "not as a data-parallel job")))
