"""Model inputs from the analytical breakdown: the physical feature frame.

Two feature sets, both built column-wise with numpy (no per-row Python):

* :func:`physical_features`: the breakdown's components in log-seconds, their
  shares, additive and overlapped totals, arithmetic intensity, communication
  volume over bandwidth, FLOPs over peak, bytes over bandwidth, I/O bytes over
  the host link, fan-in of workers per server, GPUs, nodes, precision,
  framework and software stack. The residual model learns on these.
* :func:`raw_features`: the job's own fields and catalogue figures with no
  analytical combination, for the pure-ML baseline that shows what the
  physics is worth.

Log-scale features use log10 of seconds (or bytes, FLOPs) with a floor of
1 ns (1 byte) so that zero components (no communication) stay finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.analytical import ARCHITECTURE_CODES, BreakdownArrays
from features.fields import FRAMEWORKS, SOFTWARE_STACKS
from features.resolve import ResolvedJobs
from features.table import map_values

_FLOOR_S = 1e-9
_FLOOR = 1.0

#: Bump when the feature list or its meaning changes; saved models record it.
FEATURE_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class FeatureFrame:
    """A float matrix, one row per job, and its column names."""

    names: tuple[str, ...]
    values: np.ndarray

    def column(self, name: str) -> np.ndarray:
        return self.values[:, self.names.index(name)]


def _log_s(seconds: np.ndarray) -> np.ndarray:
    return np.log10(np.maximum(seconds, _FLOOR_S))


def _log(values: np.ndarray) -> np.ndarray:
    return np.log10(np.maximum(values, _FLOOR))


def _one_hot(prefix: str, codes: np.ndarray, n: int) -> dict[str, np.ndarray]:
    return {f"{prefix}_{i}": (codes == i).astype(float) for i in range(n)}


def _categorical(resolved: ResolvedJobs, leaf: str, choices: tuple[str, ...]) -> np.ndarray:
    return map_values(resolved.table.columns[leaf], {c: i for i, c in enumerate(choices)}, -1, int)


def physical_features(resolved: ResolvedJobs, breakdown: BreakdownArrays) -> FeatureFrame:
    """The residual model's inputs, from the resolved jobs and their breakdown."""
    r, b = resolved, breakdown
    device_s = np.maximum(b.compute_s, b.memory_s)
    additive_s = b.additive_s
    step_flops = r.flops_per_sample * r.batch_size_per_gpu
    traffic_bytes = b.memory_s * r.memory_bw_bytes_per_s
    is_ps = r.architecture_code == ARCHITECTURE_CODES["ps-worker"]
    columns: dict[str, np.ndarray] = {
        "log_io_s": _log_s(b.io_s),
        "log_compute_s": _log_s(b.compute_s),
        "log_memory_s": _log_s(b.memory_s),
        "log_comm_s": _log_s(b.comm_s),
        "log_comm_intra_node_s": _log_s(b.comm.intra_node_s),
        "log_comm_network_s": _log_s(b.comm.network_s),
        "log_additive_s": _log_s(additive_s),
        "log_overlapped_s": _log_s(b.overlapped_s),
        "share_io": b.io_s / additive_s,
        "share_compute": b.compute_s / additive_s,
        "share_memory": b.memory_s / additive_s,
        "share_comm": b.comm_s / additive_s,
        "overlap_gain": _log_s(additive_s) - _log_s(b.overlapped_s),
        "log_comm_over_device": _log_s(b.comm_s) - _log_s(device_s),
        "log_compute_over_memory": _log_s(b.compute_s) - _log_s(b.memory_s),
        "log_arithmetic_intensity_flops_per_byte": _log(step_flops) - _log(traffic_bytes),
        "log_ridge_point_flops_per_byte": _log(r.peak_flops_per_s) - _log(r.memory_bw_bytes_per_s),
        "log_io_bytes_per_step": _log(r.input_bytes_per_sample * r.batch_size_per_gpu),
        "log_gradient_bytes": _log(r.gradient_bytes),
        "log_flops_per_sample": _log(r.flops_per_sample),
        "log_param_count": _log(r.param_count),
        "log_batch_size_per_gpu": _log(r.batch_size_per_gpu),
        "log_peak_flops_per_s": _log(r.peak_flops_per_s),
        "log_tensor_speedup": _log(r.peak_flops_per_s) - _log(r.fp32_peak_flops_per_s),
        "device_release_year": r.device_release_year,
        "log_memory_bw_bytes_per_s": _log(r.memory_bw_bytes_per_s),
        "log_intra_node_bw_bytes_per_s": _log(r.intra_node_bw_bytes_per_s),
        "log_network_bw_bytes_per_s": _log(r.network_bw_bytes_per_s),
        "log_host_link_bw_bytes_per_s": _log(r.host_link_bw_bytes_per_s),
        "total_gpus": r.total_gpus,
        "log_total_gpus": _log(r.total_gpus),
        "nodes": r.nodes,
        "gpus_per_node_used": r.gpus_per_node_used,
        "workers_per_server": np.where(is_ps, r.workers / r.parameter_servers, 0.0),
        "bytes_per_element": r.bytes_per_element,
    }
    columns.update(_one_hot("architecture", r.architecture_code, len(ARCHITECTURE_CODES)))
    columns.update(_one_hot("framework", _categorical(r, "framework", FRAMEWORKS), len(FRAMEWORKS)))
    columns["software_tuned"] = (_categorical(r, "software_stack", SOFTWARE_STACKS) == 1).astype(float)
    return _frame(columns, resolved)


def raw_features(resolved: ResolvedJobs) -> FeatureFrame:
    """The job's fields and catalogue figures, without the analytical model's combination of them."""
    r = resolved
    columns: dict[str, np.ndarray] = {
        "batch_size_per_gpu": r.batch_size_per_gpu,
        "workers": r.workers,
        "gpus_per_worker": r.gpus_per_worker,
        "total_gpus": r.total_gpus,
        "nodes": r.nodes,
        "parameter_servers": r.parameter_servers,
        "nics_per_node": r.nics_per_node,
        "bytes_per_element": r.bytes_per_element,
        "flops_per_sample": r.flops_per_sample,
        "param_count": r.param_count,
        "memory_bytes_per_sample": r.memory_bytes_per_sample,
        "input_bytes_per_sample": r.input_bytes_per_sample,
        "peak_flops_per_s": r.peak_flops_per_s,
        "fp32_peak_flops_per_s": r.fp32_peak_flops_per_s,
        "device_release_year": r.device_release_year,
        "memory_bw_bytes_per_s": r.memory_bw_bytes_per_s,
        "intra_node_bw_bytes_per_s": r.intra_node_bw_bytes_per_s,
        "network_bw_bytes_per_s": r.network_bw_bytes_per_s,
        "host_link_bw_bytes_per_s": r.host_link_bw_bytes_per_s,
        "architecture": r.architecture_code.astype(float),
        "framework": _categorical(r, "framework", FRAMEWORKS).astype(float),
        "software_tuned": (_categorical(r, "software_stack", SOFTWARE_STACKS) == 1).astype(float),
    }
    return _frame(columns, resolved)


def _frame(columns: dict[str, np.ndarray], resolved: ResolvedJobs) -> FeatureFrame:
    values = np.column_stack([np.asarray(v, float) for v in columns.values()]) if columns else np.zeros((0, 0))
    values[~resolved.ok] = np.nan
    return FeatureFrame(tuple(columns), values)


#: Bottleneck families that explanations sum feature attributions into, in display order.
FAMILIES = (
    "compute",
    "memory",
    "intra-node communication",
    "network communication",
    "parameter-server fan-in",
    "input I/O",
    "framework and other",
)

_FAMILY_OF = {
    "log_compute_s": "compute",
    "share_compute": "compute",
    "log_flops_per_sample": "compute",
    "log_peak_flops_per_s": "compute",
    "log_compute_over_memory": "compute",
    "log_arithmetic_intensity_flops_per_byte": "compute",
    "log_ridge_point_flops_per_byte": "compute",
    "log_tensor_speedup": "compute",
    "bytes_per_element": "compute",
    "log_memory_s": "memory",
    "share_memory": "memory",
    "log_memory_bw_bytes_per_s": "memory",
    "log_comm_intra_node_s": "intra-node communication",
    "log_intra_node_bw_bytes_per_s": "intra-node communication",
    "gpus_per_node_used": "intra-node communication",
    "log_comm_network_s": "network communication",
    "log_network_bw_bytes_per_s": "network communication",
    "log_comm_s": "network communication",
    "share_comm": "network communication",
    "log_comm_over_device": "network communication",
    "log_gradient_bytes": "network communication",
    "nodes": "network communication",
    "workers_per_server": "parameter-server fan-in",
    "architecture_3": "parameter-server fan-in",  # ps-worker
    "log_io_s": "input I/O",
    "share_io": "input I/O",
    "log_io_bytes_per_step": "input I/O",
    "log_host_link_bw_bytes_per_s": "input I/O",
}


def feature_family(name: str) -> str:
    """The bottleneck family a feature's attribution counts towards."""
    return _FAMILY_OF.get(name, "framework and other")
