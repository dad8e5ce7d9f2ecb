"""The hardware and workload catalogues as arrays, indexed like their name lists, for vectorized look-ups."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from features.fields import FRAMEWORKS, PRECISIONS, SOFTWARE_STACKS
from features.hardware import LINK_KINDS, HardwareCatalog, hardware_catalog
from features.mechanisms import collective_catalog, gpu_mechanisms, software_specs
from features.physics import bucket_layout
from features.workloads import WorkloadCatalog, workload_catalog


@dataclass(frozen=True)
class CatalogArrays:
    """The catalogues as arrays, indexed like their name lists, for vectorized look-ups."""

    hardware: HardwareCatalog
    workloads: WorkloadCatalog
    device_names: list[str]
    #: Per device, the name and family the learned layer's training domain counts it as (its silicon twin's).
    device_domain_names: list[str]
    device_domain_families: list[str]
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
    link_max_gpus: np.ndarray  # inf where a link joins every GPU of the node
    link_kind: np.ndarray  # index into LINK_KINDS
    workload_flops_per_sample: np.ndarray
    workload_memory_bytes_per_sample_fp32: np.ndarray
    workload_input_bytes_per_sample: np.ndarray
    workload_dense_param_count: np.ndarray
    workload_default_batch: np.ndarray
    # Mechanisms (features.mechanisms) and op classes (features.op_counting).
    device_is_gpu: np.ndarray
    device_sm_count: np.ndarray  # NaN where the catalogue has none
    device_cores: np.ndarray  # CPU devices' cores shared by a job's processes; NaN where none
    #: CPU devices' measured per-operator and per-step costs (NaN where the software catalogue's apply).
    device_launch_latency_s: np.ndarray
    device_host_overhead_s: np.ndarray
    #: Tensor cores' hardware rate over the catalogue's (FP32-accumulate) peak: 2 on GeForce parts, else 1.
    device_tensor_hardware_scale: np.ndarray
    link_ring_efficiency: np.ndarray
    link_tree_efficiency: np.ndarray
    link_call_latency_s: np.ndarray
    workload_matrix_flop_ratio: np.ndarray  # matrix FLOPs over flops_per_sample
    workload_other_flop_ratio: np.ndarray
    workload_memory_bound_share: np.ndarray  # memory-bound bytes over all counted bytes
    workload_kernels: np.ndarray  # forward + backward + optimizer (foreach) per step
    #: forward + backward + optimizer (one kernel per tensor: PyTorch's default off GPUs) per step
    workload_kernels_per_tensor: np.ndarray
    workload_backward_kernels: np.ndarray
    #: Forward + backward kernels of one pass (what a gradient-accumulation step repeats).
    workload_pass_kernels: np.ndarray
    workload_matrix_kernels: np.ndarray
    workload_winograd_share: np.ndarray  # Winograd-eligible FLOPs over matrix FLOPs
    #: Matrix multiplies with a model dimension no multiple of 8, over matrix FLOPs (features.op_counting).
    workload_unaligned_gemm_share: np.ndarray
    #: The tensor cores' generation (1 Volta, 2 Turing, 3 Ampere ...; 0 none; NaN where the catalogue has none).
    device_tensor_core_generation: np.ndarray
    workload_gradients: list  # (elements in backward order, ready fractions) or None
    #: Matrix operators by band of arithmetic intensity (features.op_counting): each band's share of the
    #: workload's matrix FLOPs and of its matrix bytes, [workload, band], zero-padded; NaN rows where not counted.
    workload_band_flop_shares: np.ndarray
    workload_band_byte_shares: np.ndarray
    software_launch_latency_s: np.ndarray  # [framework, software stack]
    software_host_overhead_s: np.ndarray

    def gradient_layout(self, workload: int, bytes_per_element: float) -> tuple[np.ndarray, np.ndarray] | None:
        """DDP bucket layout (shares, ready fractions) of a catalogue workload's gradients; None where not counted."""
        key = (workload, float(bytes_per_element))
        if key not in self._layouts:
            gradients = self.workload_gradients[workload]
            self._layouts[key] = None if gradients is None else bucket_layout(*gradients, bytes_per_element)
        return self._layouts[key]

    @property
    def _layouts(self) -> dict:
        cache = self.__dict__.get("_layout_cache")
        if cache is None:
            cache = {}
            object.__setattr__(self, "_layout_cache", cache)
        return cache


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
    mechanisms = gpu_mechanisms()
    collectives = collective_catalog()
    link_collectives = [collectives.for_link(link.name, link.kind) for link in links]
    software = software_specs()
    op_classes = [w.op_class_figures for w in specs]

    def op_array(name: str) -> np.ndarray:
        return np.array([o[name] for o in op_classes], float)

    counted_bytes = op_array("matrix_bytes_per_sample_fp32") + op_array("memory_bound_bytes_per_sample_fp32")
    flops = np.array([w.flops_per_sample for w in specs], float)
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix_ratio = np.where(flops > 0, op_array("matrix_flops_per_sample") / flops, 1.0)
        other_ratio = np.where(flops > 0, op_array("other_flops_per_sample") / flops, 0.0)
        bound_share = np.where(counted_bytes > 0, op_array("memory_bound_bytes_per_sample_fp32") / counted_bytes, 1.0)
        matrix_flops = op_array("matrix_flops_per_sample")
        winograd_share = np.where(matrix_flops > 0, op_array("winograd_flops_per_sample") / matrix_flops, 0.0)
        unaligned_share = np.where(matrix_flops > 0, op_array("unaligned_gemm_flops_per_sample") / matrix_flops, 0.0)
    gradients = [
        (o["gradient_elements_backward_order"], o["gradient_ready_fraction"])
        if o.get("gradient_elements_backward_order") else None
        for o in op_classes
    ]
    band_flop_shares, band_byte_shares = _band_shares([o.get("matrix_intensity_bands") for o in op_classes])
    return CatalogArrays(
        hardware=hardware,
        workloads=workloads,
        device_names=[d.name for d in devices],
        device_domain_names=[hardware.domain_device(d).name for d in devices],
        device_domain_families=[hardware.domain_device(d).family for d in devices],
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
        link_max_gpus=np.array([np.inf if link.max_gpus is None else link.max_gpus for link in links], float),
        link_kind=np.array([LINK_KINDS.index(link.kind) for link in links], int),
        workload_flops_per_sample=np.array([w.flops_per_sample for w in specs], float),
        workload_memory_bytes_per_sample_fp32=np.array([w.memory_bytes_per_sample_fp32 for w in specs], float),
        workload_input_bytes_per_sample=np.array([w.input_bytes_per_sample for w in specs], float),
        workload_dense_param_count=np.array([w.dense_param_count for w in specs], float),
        workload_default_batch=np.array([w.default_batch_size_per_gpu for w in specs], float),
        device_is_gpu=np.array([d.kind == "gpu" for d in devices], bool),
        device_sm_count=np.array([mechanisms[d.name].sm_count if d.name in mechanisms else np.nan for d in devices], float),
        device_cores=np.array([d.cores or np.nan for d in devices], float),
        device_launch_latency_s=np.array([d.kernel_launch_latency_s or np.nan for d in devices], float),
        device_host_overhead_s=np.array([d.host_overhead_s or np.nan for d in devices], float),
        device_tensor_hardware_scale=np.array(
            [1.0 / mechanisms[d.name].fp32_accumulate_tensor_rate if d.name in mechanisms else 1.0 for d in devices], float
        ),
        link_ring_efficiency=np.array([c.ring_bus_bw_efficiency for c in link_collectives], float),
        link_tree_efficiency=np.array([c.tree_bus_bw_efficiency for c in link_collectives], float),
        link_call_latency_s=np.array([c.call_latency_s for c in link_collectives], float),
        workload_matrix_flop_ratio=matrix_ratio,
        workload_other_flop_ratio=other_ratio,
        workload_memory_bound_share=bound_share,
        workload_kernels=op_array("kernels_forward") + op_array("kernels_backward") + op_array("kernels_optimizer_foreach"),
        workload_kernels_per_tensor=(
            op_array("kernels_forward") + op_array("kernels_backward") + op_array("kernels_optimizer_per_tensor")
        ),
        workload_backward_kernels=op_array("kernels_backward"),
        workload_pass_kernels=op_array("kernels_forward") + op_array("kernels_backward"),
        workload_matrix_kernels=op_array("matrix_kernels"),
        workload_winograd_share=winograd_share,
        workload_unaligned_gemm_share=np.nan_to_num(unaligned_share),
        device_tensor_core_generation=np.array(
            [mechanisms[d.name].tensor_core_generation if d.name in mechanisms else np.nan for d in devices], float
        ),
        workload_gradients=gradients,
        workload_band_flop_shares=band_flop_shares,
        workload_band_byte_shares=band_byte_shares,
        software_launch_latency_s=np.array(
            [[software[(f, s)].kernel_launch_latency_s for s in SOFTWARE_STACKS] for f in FRAMEWORKS], float
        ),
        software_host_overhead_s=np.array([[software[(f, s)].host_overhead_s for s in SOFTWARE_STACKS] for f in FRAMEWORKS], float),
    )


def _band_shares(bands: list) -> tuple[np.ndarray, np.ndarray]:
    """Each workload's intensity bands as shares of its matrix FLOPs and bytes ([workload, band]; NaN rows where
    the bands were not counted or hold no FLOPs or no bytes)."""
    width = max((len(b) for b in bands if b), default=1)
    flop_shares = np.full((len(bands), width), np.nan)
    byte_shares = np.full((len(bands), width), np.nan)
    for i, b in enumerate(bands):
        if not b:
            continue
        values = np.array(b, float)
        totals = values.sum(axis=0)
        if totals[0] <= 0 or totals[1] <= 0:
            continue
        flop_shares[i] = 0.0
        byte_shares[i] = 0.0
        flop_shares[i, : len(values)] = values[:, 0] / totals[0]
        byte_shares[i, : len(values)] = values[:, 1] / totals[1]
    return flop_shares, byte_shares
