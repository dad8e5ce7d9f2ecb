"""Per-sample op-class volumes and per-step kernels of resolved jobs (the roofline physics' inputs).

A job's own op-class fields win; a catalogue model's counted split scales
with the job's totals; a custom model gets the documented default split
(:mod:`features.workloads`).
"""

from __future__ import annotations

import numpy as np

from features.catalog_arrays import CatalogArrays
from features.workloads import (
    DEFAULT_BYTES_PER_OTHER_FLOP,
    DEFAULT_KERNELS_BACKWARD,
    DEFAULT_KERNELS_FORWARD,
    DEFAULT_KERNELS_OPTIMIZER_FOREACH,
    DEFAULT_MATRIX_KERNELS,
    DEFAULT_MEMORY_BOUND_BYTE_SHARE,
)


def first_given(*candidates: np.ndarray) -> np.ndarray:
    out = np.asarray(candidates[0], float)
    for candidate in candidates[1:]:
        out = np.where(np.isnan(out), candidate, out)
    return out


def op_classes(
    cols, cat: CatalogArrays, has_model, safe_model, flops, memory, per_tensor_optimizer=False, passes=1.0
) -> dict[str, np.ndarray]:
    """Per-sample op-class volumes and per-step kernels of every job.

    A job's own op-class fields win. Otherwise a catalogue model's counted
    split (ratios of its op classes to its totals) is applied to the job's
    totals, so a job that overrides ``flops_per_sample`` scales its classes;
    a custom model gets the documented default split (features/workloads.py).
    Winograd-eligible FLOPs, and those of matrix multiplies with a model
    dimension no multiple of 8, keep the catalogue model's share of the
    matrix FLOPs (none for a custom model). Where ``per_tensor_optimizer`` (jobs on
    a CPU, where PyTorch's optimizers default to one kernel per tensor), a
    catalogue model's step counts its per-tensor optimizer kernels instead
    of the multi-tensor ``foreach`` ones. A step of ``passes`` forward and
    backward passes (gradient accumulation) launches their kernels once per
    pass, the optimizer's once; its matrix operators are each a pass's size
    (``passes`` times as many); the backward kernels counted are one pass's,
    the one the gradient exchange can overlap. A job's own ``kernels_per_step``
    counts the whole step as given.
    """

    def catalogue_or(values: np.ndarray, default: float) -> np.ndarray:
        return np.where(has_model, values[safe_model], default)

    matrix_ratio = catalogue_or(cat.workload_matrix_flop_ratio, 1.0)
    bound_share = catalogue_or(cat.workload_memory_bound_share, DEFAULT_MEMORY_BOUND_BYTE_SHARE)
    default_other = memory * DEFAULT_MEMORY_BOUND_BYTE_SHARE / DEFAULT_BYTES_PER_OTHER_FLOP
    other_flops = np.where(has_model, flops * catalogue_or(cat.workload_other_flop_ratio, 0.0), default_other)
    matrix_flops = first_given(cols["matrix_flops_per_sample"], flops * matrix_ratio)
    bound_bytes = first_given(cols["memory_bound_bytes_per_sample"], memory * bound_share)
    default_kernels = DEFAULT_KERNELS_FORWARD + DEFAULT_KERNELS_BACKWARD + DEFAULT_KERNELS_OPTIMIZER_FOREACH
    counted = np.where(
        np.asarray(per_tensor_optimizer, bool) & np.isfinite(cat.workload_kernels_per_tensor[safe_model]),
        cat.workload_kernels_per_tensor[safe_model],
        cat.workload_kernels[safe_model],
    )
    catalogue_kernels = np.where(has_model, counted, default_kernels)
    pass_kernels = catalogue_or(cat.workload_pass_kernels, DEFAULT_KERNELS_FORWARD + DEFAULT_KERNELS_BACKWARD)
    step_kernels = catalogue_kernels + (passes - 1.0) * pass_kernels
    kernels = first_given(cols["kernels_per_step"], step_kernels)
    # A job's own kernel count keeps the catalogue's (or the default's) backward and matrix shares.
    kernel_scale = kernels / step_kernels
    return {
        "matrix_flops_per_sample": matrix_flops,
        "other_flops_per_sample": other_flops,
        "matrix_bytes_per_sample": np.maximum(memory - bound_bytes, 0.0),
        "memory_bound_bytes_per_sample": bound_bytes,
        "kernels_per_step": kernels,
        "backward_kernels_per_step": catalogue_or(cat.workload_backward_kernels, DEFAULT_KERNELS_BACKWARD) * kernel_scale,
        "matrix_kernels_per_step": catalogue_or(cat.workload_matrix_kernels, DEFAULT_MATRIX_KERNELS) * passes * kernel_scale,
        "winograd_flops_per_sample": matrix_flops * catalogue_or(cat.workload_winograd_share, 0.0),
        "unaligned_gemm_flops_per_sample": matrix_flops * catalogue_or(cat.workload_unaligned_gemm_share, 0.0),
    }
