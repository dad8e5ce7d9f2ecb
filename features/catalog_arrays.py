"""The hardware and workload catalogues as arrays, indexed like their name lists, for vectorized look-ups."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from features.fields import PRECISIONS
from features.hardware import LINK_KINDS, HardwareCatalog, hardware_catalog
from features.workloads import WorkloadCatalog, workload_catalog


@dataclass(frozen=True)
class CatalogArrays:
    """The catalogues as arrays, indexed like their name lists, for vectorized look-ups."""

    hardware: HardwareCatalog
    workloads: WorkloadCatalog
    device_names: list[str]
    link_names: list[str]
    workload_names: list[str]
    peak_flops_per_s: np.ndarray  # [device, precision in PRECISIONS order]
    release_year: np.ndarray  # NaN where the catalogue has none
    memory_bw_bytes_per_s: np.ndarray
    host_link_index: np.ndarray
    default_intra_link_index: np.ndarray
    has_nvlink: np.ndarray
    link_bw_bytes_per_s: np.ndarray
    link_latency_s: np.ndarray
    link_kind: np.ndarray  # index into LINK_KINDS
    workload_flops_per_sample: np.ndarray
    workload_memory_bytes_per_sample_fp32: np.ndarray
    workload_input_bytes_per_sample: np.ndarray
    workload_dense_param_count: np.ndarray
    workload_default_batch: np.ndarray


def catalog_arrays(hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None) -> CatalogArrays:
    """Array views of the given catalogues (the shipped ones by default, built once)."""
    if hardware is None and workloads is None:
        return _shipped_catalog_arrays()
    return _build_catalog_arrays(hardware or hardware_catalog(), workloads or workload_catalog())


@lru_cache(maxsize=1)
def _shipped_catalog_arrays() -> CatalogArrays:
    return _build_catalog_arrays(hardware_catalog(), workload_catalog())


def _build_catalog_arrays(hardware: HardwareCatalog, workloads: WorkloadCatalog) -> CatalogArrays:
    devices = list(hardware.devices)
    links = list(hardware.links)
    link_names = [link.name for link in links]
    link_pos = {name: i for i, name in enumerate(link_names)}
    specs = list(workloads.workloads)
    return CatalogArrays(
        hardware=hardware,
        workloads=workloads,
        device_names=[d.name for d in devices],
        link_names=link_names,
        workload_names=[w.name for w in specs],
        peak_flops_per_s=np.array([[d.peak_flops_per_s(p) for p in PRECISIONS] for d in devices], float),
        release_year=np.array([d.release_year or np.nan for d in devices], float),
        memory_bw_bytes_per_s=np.array([d.memory_bw_bytes_per_s for d in devices], float),
        host_link_index=np.array([link_pos[hardware.links.get(d.host_link, "host_link").name] for d in devices]),
        default_intra_link_index=np.array(
            [link_pos[hardware.links.get(d.default_intra_node_link, "default_intra_node_link").name] for d in devices]
        ),
        has_nvlink=np.array([d.nvlink_link is not None for d in devices], bool),
        link_bw_bytes_per_s=np.array([link.bw_bytes_per_s for link in links], float),
        link_latency_s=np.array([link.latency_s for link in links], float),
        link_kind=np.array([LINK_KINDS.index(link.kind) for link in links], int),
        workload_flops_per_sample=np.array([w.flops_per_sample for w in specs], float),
        workload_memory_bytes_per_sample_fp32=np.array([w.memory_bytes_per_sample_fp32 for w in specs], float),
        workload_input_bytes_per_sample=np.array([w.input_bytes_per_sample for w in specs], float),
        workload_dense_param_count=np.array([w.dense_param_count for w in specs], float),
        workload_default_batch=np.array([w.default_batch_size_per_gpu for w in specs], float),
    )
