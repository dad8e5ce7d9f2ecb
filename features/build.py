"""Model inputs from the analytical breakdown: the physical feature frame.

Two feature sets, both built column-wise with numpy (no per-row Python):

* :func:`physical_features`: device and communication seconds, additive
  and overlapped totals (log-seconds), each component's volume and rate, arithmetic intensity, the bandwidths and
  peak FLOP/s the job uses, gradient and input volumes, fan-in of workers per
  server, GPUs, nodes, precision, framework and software stack. The residual
  model learns on these, monotone in each where physics fixes the sign
  (:data:`MONOTONE_SIGNS`).
* :func:`raw_features`: the job's own fields and catalogue figures with no
  analytical combination, for the pure-ML baseline that shows what the
  physics is worth.

Log-scale features use log10 of seconds (or bytes, FLOPs) with a floor of
1 ns (1 byte) so that zero components (no communication) stay finite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from features.analytical import ARCHITECTURE_CODES, BreakdownArrays, memory_traffic_bytes
from features.fields import DEFAULT_SOFTWARE_YEAR, FRAMEWORKS, SOFTWARE_STACKS
from features.resolve import ResolvedJobs

_FLOOR_S = 1e-9
_FLOOR = 1.0

#: log10 bytes/s shown for a link the job does not use.
UNUSED_LINK_LOG_BW = 0.0

#: Bump when the feature list or its meaning changes; saved models record it.
FEATURE_SCHEMA_VERSION = 6


@dataclass(frozen=True)
class FeatureFrame:
    """A float matrix, one row per job, and its column names."""

    names: tuple[str, ...]
    values: np.ndarray
    #: The columns as computed (float64) before they were stacked, where kept; failed rows are not blanked in them.
    columns: dict[str, np.ndarray] | None = field(default=None, compare=False, repr=False)

    def column(self, name: str) -> np.ndarray:
        """One column at full precision (NaN on failed rows is the caller's: see :func:`range_columns`)."""
        if self.columns is not None:
            return self.columns[name]
        return self.values[:, self.names.index(name)]


def _log_s(seconds: np.ndarray) -> np.ndarray:
    return np.log10(np.maximum(seconds, _FLOOR_S))


def _log(values: np.ndarray) -> np.ndarray:
    return np.log10(np.maximum(values, _FLOOR))


def _one_hot(prefix: str, codes: np.ndarray, n: int) -> dict[str, np.ndarray]:
    return {f"{prefix}_{i}": (codes == i).astype(float) for i in range(n)}


def _categorical(resolved: ResolvedJobs, leaf: str, choices: tuple[str, ...]) -> np.ndarray:
    return resolved.table.map_column(leaf, {c: i for i, c in enumerate(choices)}, -1, int)


def physical_features(
    resolved: ResolvedJobs, breakdown: BreakdownArrays, candidates: Sequence[str] = (), without: Sequence[str] = ()
) -> FeatureFrame:
    """The residual model's inputs (:func:`physical_columns`) as one float matrix, plus the named
    :data:`CANDIDATE_GROUPS` columns an ablation adds and less the :data:`REMOVABLE_GROUPS`
    columns it takes out (neither in the shipped model)."""
    columns = physical_columns(resolved, breakdown)
    if candidates:
        columns.update(candidate_columns(resolved, candidates))
    unknown = sorted(set(without) - set().union(*REMOVABLE_GROUPS.values()))
    if unknown:
        raise ValueError(f"unknown removable features: {', '.join(unknown)}")
    for name in without:
        del columns[name]
    return _frame(columns, resolved)


#: Rows written per pass over the columns of :func:`stacked_features` (a block of 8,192 rows of
#: 40 float32 features is 1.3 MB, inside a core's cache).
FILL_BLOCK_ROWS = 8192


def stacked_features(sides: Sequence[tuple[ResolvedJobs, BreakdownArrays]]) -> tuple[np.ndarray, list[FeatureFrame]]:
    """:func:`physical_features` of several tables as one float32 matrix, the trees' input (they split on float32).

    Each column is written once, straight into float32, with no float64 matrix
    between. The frames returned per table view their rows of the matrix and
    keep the float64 columns, so range checks read exact values.
    """
    sides_columns = [physical_columns(resolved, breakdown) for resolved, breakdown in sides]
    names = tuple(sides_columns[0]) if sides_columns else ()
    sizes = [len(resolved.ok) for resolved, _ in sides]
    values = np.empty((sum(sizes), len(names)), np.float32)
    frames, start = [], 0
    for (resolved, _), columns, size in zip(sides, sides_columns, sizes):
        block = values[start : start + size]
        # A few thousand rows at a time, so the rows being written stay in cache across the columns.
        for row in range(0, size, FILL_BLOCK_ROWS):
            rows = slice(row, row + FILL_BLOCK_ROWS)
            for j, column in enumerate(columns.values()):
                block[rows, j] = column[rows]
        block[~resolved.ok] = np.nan
        frames.append(FeatureFrame(names, block, columns))
        start += size
    return values, frames


def physical_columns(resolved: ResolvedJobs, breakdown: BreakdownArrays) -> dict[str, np.ndarray]:
    """The residual model's inputs by name, from the resolved jobs and their breakdown.

    Every feature either moves in one direction under every hardware upgrade
    (a component's seconds fall, a bandwidth or peak rises; see
    :data:`MONOTONE_SIGNS`) or does not move at all, so a residual monotone in
    each feature keeps the physics' signs. Ratios that one upgrade raises and
    another lowers (component shares, compute over memory, the ridge point)
    are left out, and so are figures that name a model or a GPU rather than
    a mechanism (FLOPs per sample, parameter count, peak FLOP/s, release
    year): left in, the trees learned identities that did not carry to
    held-out benchmarks (MLPerf leave-one-benchmark-out 50.4% with them,
    47.6% without; Lambda leave-one-GPU-type-out 15.1% either way). A link the job does not use (the network of a one-node job,
    the intra-node link of a one-GPU ring) shows as 1 B/s, so changing it
    leaves every feature exactly unchanged. The software release year is one more: no hardware
    upgrade moves it, and the residual is monotone in it (a newer release is never slower).
    """
    r, b = resolved, breakdown
    step_flops = r.flops_per_sample * r.batch_size_per_gpu
    traffic_bytes = analytical_traffic_bytes(r)
    code = r.architecture_code
    is_ps = code == ARCHITECTURE_CODES["ps-worker"]
    is_cluster = code == ARCHITECTURE_CODES["allreduce-cluster"]
    is_local = code == ARCHITECTURE_CODES["allreduce-local"]
    uses_network = is_ps | (is_cluster & (r.nodes > 1))
    uses_intra_ring = (
        (is_local & (r.total_gpus > 1)) | (is_cluster & (r.gpus_per_node_used > 1)) | (is_ps & (r.gpus_per_worker > 1))
    )
    columns: dict[str, np.ndarray] = {
        # A component that is one volume over one rate enters as the two: the volume is free (larger
        # kernels run nearer their peak) and the rate monotone, so the residual may fall with the work
        # done while never rising with a faster part.
        "log_step_flops": _log(step_flops),
        "log_traffic_bytes_per_step": _log(traffic_bytes),
        "log_device_s": _log_s(np.maximum(b.compute_s, b.memory_s)),
        "log_comm_s": _log_s(b.comm_s),
        "log_comm_intra_node_s": _log_s(b.comm.intra_node_s),
        "log_comm_network_s": _log_s(b.comm.network_s),
        "log_additive_s": _log_s(b.additive_s),
        "log_overlapped_s": _log_s(b.overlapped_s),
        **roofline_columns(b),
        "log_arithmetic_intensity_flops_per_byte": _log(step_flops) - _log(traffic_bytes),
        "log_io_bytes_per_step": _log(r.input_bytes_per_sample * r.batch_size_per_gpu),
        "log_gradient_bytes": _log(r.gradient_bytes),
        "log_batch_size_per_gpu": _log(r.batch_size_per_gpu),
        "log_memory_bw_bytes_per_s": _log(r.memory_bw_bytes_per_s),
        "log_intra_node_bw_bytes_per_s": np.where(uses_intra_ring, _log(r.intra_node_bw_bytes_per_s), UNUSED_LINK_LOG_BW),
        "log_network_bw_bytes_per_s": np.where(uses_network, _log(r.network_bw_bytes_per_s), UNUSED_LINK_LOG_BW),
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
    columns["software_year"] = software_year(r)
    return columns


def software_year(r: ResolvedJobs) -> np.ndarray:
    """Each job's software release year (the field's default where the job states none)."""
    return np.nan_to_num(np.asarray(r.table.columns["software_year"], float), nan=DEFAULT_SOFTWARE_YEAR)


def analytical_traffic_bytes(r: ResolvedJobs) -> np.ndarray:
    """DRAM bytes per step, from the workload alone (independent of the memory bandwidth)."""
    return memory_traffic_bytes(r.memory_bytes_per_sample, r.batch_size_per_gpu, r.param_count, r.bytes_per_element)


#: The sign physics fixes for the residual's slope in a feature: +1 where more
#: seconds of a component mean a slower step, -1 where more bandwidth or peak
#: FLOP/s mean a faster one. Features of the workload and of the job's shape
#: stay free (no hardware upgrade moves them). Training passes these to
#: XGBoost as monotone constraints, so the learned step time never rises
#: when any of these moves the faster way.
MONOTONE_SIGNS: dict[str, int] = {
    "log_device_s": 1,
    "log_comm_s": 1,
    "log_comm_intra_node_s": 1,
    "log_comm_network_s": 1,
    "log_additive_s": 1,
    "log_overlapped_s": 1,
    "log_roofline_s": 1,
    "log_matrix_s": 1,
    "log_memory_bound_s": 1,
    "log_launch_s": 1,
    "log_host_s": 1,
    "log_memory_bw_bytes_per_s": -1,
    "log_intra_node_bw_bytes_per_s": -1,
    "log_network_bw_bytes_per_s": -1,
    "log_host_link_bw_bytes_per_s": -1,
    # A newer release of the same framework is never slower on the same job: kernel libraries
    # (cuDNN, cuBLAS, NCCL) and fusions only get added between NGC releases in the measured runs.
    "software_year": -1,
}


#: Candidate features that the shipped set leaves out, by group, for the leave-one-group-out
#: ablation (:mod:`training.ablation`, ``predict ablate``): figures that describe which GPU or model
#: a job runs rather than a mechanism's seconds or rates. None of them is monotone-constrained, so
#: none is safe to ship unless the ablation shows it transfers.
CANDIDATE_GROUPS: dict[str, tuple[str, ...]] = {
    "gpu-mechanisms": (
        "log_sm_count", "log_boost_clock_hz", "log_l2_bytes", "tensor_core_generation", "fp32_lanes_per_sm",
        "fp32_accumulate_tensor_rate", "log_tdp_w",
    ),
    "identities": ("log_flops_per_sample", "log_param_count", "log_peak_flops_per_s", "device_release_year"),
}


#: Shipped features that name something rather than measure a mechanism, by group, for the ablation
#: to take out: which framework a job runs (an unseen framework lights none of the seen ones, so the
#: trees treat it as whichever framework their splits happen to leave).
REMOVABLE_GROUPS: dict[str, tuple[str, ...]] = {
    "framework identity": tuple(f"framework_{i}" for i in range(len(FRAMEWORKS))),
}


def candidate_columns(resolved: ResolvedJobs, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The named :data:`CANDIDATE_GROUPS` columns of every job (NaN where the catalogue has no figure).

    GPU mechanism figures come from ``catalog/gpu_mechanisms.json`` (a CPU host or a GPU without an
    entry has none), the TDP from ``hardware/gpus.json``.
    """
    from features.mechanisms import gpu_mechanisms  # noqa: PLC0415 (read only when an ablation asks)

    cat = resolved.catalogs
    devices = cat.hardware.devices if cat is not None else []
    mechanisms = gpu_mechanisms()

    def per_device(figure) -> np.ndarray:
        values = [figure(d, mechanisms.get(d.name)) for d in devices]
        table = np.array([np.nan if v is None else float(v) for v in values] + [np.nan], float)
        return table[resolved.device_index]  # -1 (a failed row) reads the trailing NaN

    def mechanism(field_name: str):
        return lambda d, m: None if m is None else getattr(m, field_name)

    builders = {
        "log_sm_count": lambda: np.log10(per_device(mechanism("sm_count"))),
        "log_boost_clock_hz": lambda: np.log10(per_device(mechanism("boost_clock_hz"))),
        "log_l2_bytes": lambda: np.log10(per_device(mechanism("l2_bytes"))),
        "tensor_core_generation": lambda: per_device(mechanism("tensor_core_generation")),
        "fp32_lanes_per_sm": lambda: per_device(mechanism("fp32_lanes_per_sm")),
        "fp32_accumulate_tensor_rate": lambda: per_device(mechanism("fp32_accumulate_tensor_rate")),
        "log_tdp_w": lambda: np.log10(per_device(lambda d, m: d.tdp_w)),
        "log_flops_per_sample": lambda: _log(resolved.flops_per_sample),
        "log_param_count": lambda: _log(resolved.param_count),
        "log_peak_flops_per_s": lambda: _log(resolved.peak_flops_per_s),
        "device_release_year": lambda: np.asarray(resolved.device_release_year, float),
    }
    unknown = [n for n in names if n not in builders]
    if unknown:
        raise ValueError(f"unknown candidate features {unknown}; known: {sorted(builders)}")
    return {name: builders[name]() for name in names}


#: Job sizes whose training range bounds a model's domain (log10 where the name says so).
RANGE_COLUMNS = (
    "log_total_gpus", "log_batch_size_per_gpu", "log_flops_per_sample", "log_peak_flops_per_s", "workers_per_server", "software_year",
)


def range_columns(resolved: ResolvedJobs, frame: FeatureFrame) -> dict[str, np.ndarray]:
    """:data:`RANGE_COLUMNS` of each job (NaN on failed rows); FLOPs per sample and peak are no features but bound the domain."""
    own = {"log_flops_per_sample": _log(resolved.flops_per_sample), "log_peak_flops_per_s": _log(resolved.peak_flops_per_s)}
    out = {name: np.asarray(own[name] if name in own else frame.column(name), float).copy() for name in RANGE_COLUMNS}
    for values in out.values():
        values[~resolved.ok] = np.nan
    return out


def roofline_columns(b: BreakdownArrays) -> dict[str, np.ndarray]:
    """The roofline physics by mechanism (log-seconds): every term falls, or stays, under any upgrade.

    The exposed communication is no feature: more peak FLOP/s shortens the
    backward pass that hides the all-reduce, so it rises under a compute
    upgrade (the step still falls), and a residual monotone in it could
    predict a faster GPU slower.
    """
    p = b.physics
    return {
        "log_roofline_s": _log_s(p.step_time_s),
        "log_matrix_s": _log_s(p.device.matrix_s),
        "log_memory_bound_s": _log_s(p.device.memory_bound_s),
        "log_launch_s": _log_s(p.device.launch_s),
        "log_host_s": _log_s(p.device.host_s),
    }


def monotone_constraints(names) -> tuple[int, ...]:
    """XGBoost's ``monotone_constraints`` for a feature list (0 where physics fixes no sign)."""
    return tuple(MONOTONE_SIGNS.get(name, 0) for name in names)


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
        "software_year": software_year(r),
    }
    return _frame(columns, resolved)


def _frame(columns: dict[str, np.ndarray], resolved: ResolvedJobs) -> FeatureFrame:
    values = np.column_stack([np.asarray(v, float) for v in columns.values()]) if columns else np.zeros((0, 0))
    values[~resolved.ok] = np.nan
    return FeatureFrame(tuple(columns), values, columns)


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
    "log_step_flops": "compute",
    "log_matrix_s": "compute",
    "log_memory_bound_s": "memory",
    "log_launch_s": "framework and other",
    "log_host_s": "framework and other",
    "log_arithmetic_intensity_flops_per_byte": "compute",
    "bytes_per_element": "compute",
    "log_traffic_bytes_per_step": "memory",
    "log_device_s": "compute",
    "log_memory_bw_bytes_per_s": "memory",
    "log_comm_intra_node_s": "intra-node communication",
    "log_intra_node_bw_bytes_per_s": "intra-node communication",
    "gpus_per_node_used": "intra-node communication",
    "log_comm_network_s": "network communication",
    "log_network_bw_bytes_per_s": "network communication",
    "log_comm_s": "network communication",
    "log_gradient_bytes": "network communication",
    "nodes": "network communication",
    "workers_per_server": "parameter-server fan-in",
    "architecture_3": "parameter-server fan-in",  # ps-worker
    "log_io_bytes_per_step": "input I/O",
    "log_host_link_bw_bytes_per_s": "input I/O",
}


def feature_family(name: str) -> str:
    """The bottleneck family a feature's attribution counts towards."""
    return _FAMILY_OF.get(name, "framework and other")
