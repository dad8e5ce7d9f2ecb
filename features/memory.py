"""What a data-parallel training step holds in each GPU's memory: an estimate for "does it fit?".

Every data-parallel rank holds the whole model. Per GPU, at the step's peak
(the end of the forward pass, with the last step's optimizer state kept):

* the weights: trained parameters in FP32 (the master copy mixed precision
  keeps too); parameters the step does not train (frozen layers, LoRA's base
  model) at the precision the job computes in;
* their gradients, FP32, one per trained parameter;
* the optimizer's state: :data:`OPTIMIZER_STATE_BYTES_PER_PARAM` per trained
  parameter, Adam's (or LAMB's) two FP32 moments. The job spec does not name
  the optimizer; SGD with momentum keeps half, so the estimate is high there
  by 4 bytes per parameter (0.1 GB for ResNet-50);
* under FP16 or BF16, autocast's cached half-precision copy of each trained
  weight for the forward pass;
* on more than one GPU, the all-reduce buckets: a gradient-sized flat buffer
  (PyTorch's ``DistributedDataParallel`` without ``gradient_as_bucket_view``,
  Horovod's fusion buffer alike);
* the activations the forward pass saves for the backward one: the
  catalogue's counted ``activation_bytes_per_sample_fp32`` (the distinct
  storages autograd saves, :mod:`features.workload_counting`) times the batch,
  scaled by the precision's element size (mixed precision keeps some saved
  tensors, normalisation statistics among them, in FP32: an estimate);
* :data:`RUNTIME_RESERVE_BYTES` for the CUDA context, the libraries'
  workspaces and the caching allocator's fragmentation.

The fleet carries the estimate as each row's share of its GPU's memory
(``memory_share_of_gpu``; above 1: may not fit). Embedding tables updated sparsely (the recommendation models') are sharded
across the job's GPUs, as every large-scale implementation of them does
(TorchRec, HugeCTR), and held in FP32 without optimizer state.

A step of several passes (``gradient_accumulation_steps``) holds one pass's
activations: the batch per GPU over the passes. The parts are estimates from counted figures; the memory check on every
measured data-parallel run (``tests/test_memory.py``) says how close they
come to the GPU's capacity. A custom model without an activation count gets
no estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from features.units import BYTES_PER_ELEMENT
from features.workloads import WorkloadSpec

#: FP32 bytes per trained parameter for the weights, their gradients and the master copy.
FP32_BYTES = 4.0
#: Adam's (LAMB's) two FP32 moments per trained parameter.
OPTIMIZER_STATE_BYTES_PER_PARAM = 8.0
#: Autocast's cached half-precision copy of a trained weight, per parameter.
HALF_COPY_BYTES_PER_PARAM = 2.0
#: CUDA context (about 0.3-0.5 GiB on current drivers), cuBLAS/cuDNN workspaces and allocator slack.
RUNTIME_RESERVE_BYTES = 1.0 * 2**30
#: Catalogue domains whose non-dense parameters are sparsely updated embedding tables (else: frozen).
SPARSE_EMBEDDING_DOMAINS = ("recommendation",)


@dataclass(frozen=True)
class DataParallelMemory:
    """Bytes one GPU holds at the step's peak, by part, against the GPU's capacity (floats, or arrays of jobs)."""

    weights_bytes: Any
    gradients_bytes: Any
    optimizer_bytes: Any
    half_copy_bytes: Any
    bucket_bytes: Any
    activations_bytes: Any
    reserve_bytes: Any
    capacity_bytes: Any

    @property
    def total_bytes(self):
        return (
            self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.half_copy_bytes
            + self.bucket_bytes + self.activations_bytes + self.reserve_bytes
        )

    @property
    def fits(self):
        return self.total_bytes <= self.capacity_bytes

    def row(self, i: int) -> "DataParallelMemory | None":
        """Job ``i`` of an array of jobs (None where it has no estimate)."""
        values = {k: float(v[i]) for k, v in self.__dict__.items()}
        return None if not all(np.isfinite(list(values.values()))) else DataParallelMemory(**values)

    def to_dict(self) -> dict[str, Any]:
        parts = {k: float(v) for k, v in self.__dict__.items() if k != "capacity_bytes"}
        return {"total_bytes": float(self.total_bytes), "capacity_bytes": float(self.capacity_bytes), "fits": bool(self.fits), "parts": parts}


def _parts(trained, other, sparse_tables, activation_per_sample, batch, element_bytes, total_gpus, capacity) -> DataParallelMemory:
    """The parts (module docstring) from per-job figures: floats or arrays alike."""
    element_scale = element_bytes / BYTES_PER_ELEMENT["fp32"]
    other_bytes = np.where(sparse_tables, other * FP32_BYTES / np.maximum(total_gpus, 1.0), other * element_bytes)
    return DataParallelMemory(
        weights_bytes=trained * FP32_BYTES + other_bytes,
        gradients_bytes=trained * FP32_BYTES,
        optimizer_bytes=trained * OPTIMIZER_STATE_BYTES_PER_PARAM,
        half_copy_bytes=np.where(element_scale < 1, trained * HALF_COPY_BYTES_PER_PARAM, 0.0),
        bucket_bytes=np.where(total_gpus > 1, trained * FP32_BYTES, 0.0),
        activations_bytes=activation_per_sample * element_scale * batch,
        reserve_bytes=np.full(np.shape(trained), RUNTIME_RESERVE_BYTES),
        capacity_bytes=capacity,
    )


def data_parallel_memory(
    workload: WorkloadSpec, batch_size_per_gpu: float, element_bytes: float, total_gpus: float, capacity_bytes: float
) -> DataParallelMemory | None:
    """Per-GPU memory of a data-parallel step of ``workload`` computing with ``element_bytes``-byte elements
    (None without a counted activation figure)."""
    if workload.activation_bytes_per_sample_fp32 is None:
        return None
    memory = _parts(
        np.float64(workload.dense_param_count), np.float64(workload.param_count - workload.dense_param_count),
        workload.domain in SPARSE_EMBEDDING_DOMAINS, workload.activation_bytes_per_sample_fp32,
        batch_size_per_gpu, element_bytes, total_gpus, capacity_bytes,
    )
    return DataParallelMemory(**{k: float(v) for k, v in memory.__dict__.items()})


def jobs_memory(resolved) -> DataParallelMemory:
    """:func:`data_parallel_memory` of every job of a :class:`features.resolve.ResolvedJobs`, as arrays.

    NaN where a job has no estimate: no catalogue model (explicit figures),
    a model without an activation count, a CPU device, or a failed row.
    """
    n = len(resolved.workload_index)
    catalogs = resolved.catalogs
    if catalogs is None:
        return _parts(*(np.full(n, np.nan) for _ in range(8)))
    specs = list(catalogs.workloads.workloads)
    other = np.array([w.param_count - w.dense_param_count for w in specs], float)
    sparse = np.array([w.domain in SPARSE_EMBEDDING_DOMAINS for w in specs], bool)
    activation = np.array([np.nan if w.activation_bytes_per_sample_fp32 is None else w.activation_bytes_per_sample_fp32 for w in specs])
    capacity = np.array([d.memory_bytes if d.kind == "gpu" else np.nan for d in catalogs.hardware.devices], float)
    passes = 1.0 if resolved.passes_per_step is None else resolved.passes_per_step
    w, d = resolved.workload_index, resolved.device_index
    known = (w >= 0) & (d >= 0)
    w, d = np.where(known, w, 0), np.where(known, d, 0)
    activation_per_sample = np.where(known, activation[w], np.nan)
    # The trained parameters the physics exchanges (a job's explicit param_count wins over the catalogue's).
    return _parts(
        resolved.param_count, other[w], sparse[w], activation_per_sample, resolved.batch_size_per_gpu / passes,
        resolved.bytes_per_element, resolved.total_gpus, np.where(known, capacity[d], np.nan),
    )


def job_memory(resolved, row: int) -> DataParallelMemory | None:
    """One job's estimate (None where it has none, see :func:`jobs_memory`)."""
    return jobs_memory(resolved).row(row)


def samples_that_fit(memory: DataParallelMemory, samples_per_pass: float) -> int:
    """The most samples per pass whose step fits the GPU (0 where the rest of the step alone does not)."""
    per_sample = memory.activations_bytes / samples_per_pass
    room = memory.capacity_bytes - (memory.total_bytes - memory.activations_bytes)
    if room < per_sample:
        return 0
    return int(room // per_sample) if per_sample > 0 else int(samples_per_pass)


def passes_that_fit(memory: DataParallelMemory, batch_size_per_gpu: float, passes: float) -> int | None:
    """For a step over its GPU's memory, the fewest passes, each an equal whole share of
    ``batch_size_per_gpu``, whose step fits (None where not even one sample per pass does: only a
    sharded layout would; None too where the step already fits)."""
    needed = jobs_passes_to_fit(memory, np.array([batch_size_per_gpu]), np.array([passes]))[0]
    return None if np.isnan(needed) else int(needed)


def jobs_passes_to_fit(memory: DataParallelMemory, batch_size_per_gpu: np.ndarray, passes: np.ndarray) -> np.ndarray:
    """:func:`passes_that_fit` for arrays of jobs over their GPU's memory: NaN where the step fits, where
    one sample per pass does not, where the batch is not whole or there is no estimate."""
    batch = np.asarray(batch_size_per_gpu, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_sample = memory.activations_bytes / (batch / np.asarray(passes, float))
        room = memory.capacity_bytes - (memory.total_bytes - memory.activations_bytes)
        most = np.where(room < per_sample, 0.0, np.where(per_sample > 0, np.floor(room / per_sample), batch))
        fewest = np.ceil(batch / most)
    usable = (memory.total_bytes > memory.capacity_bytes) & (most >= 1) & (batch == np.round(batch)) & np.isfinite(fewest)
    out = np.full(batch.shape, np.nan)
    rows = np.flatnonzero(usable)
    if not len(rows):
        return out
    # The divisor search runs once per distinct (batch, fewest) pair: a fleet repeats a few of them.
    b, f = batch[rows].astype(np.int64), np.maximum(fewest[rows], 1).astype(np.int64)
    keys, inverse = np.unique(b * (1 << 32) + f, return_inverse=True)
    found = np.array([next(k for k in range(int(key & 0xFFFFFFFF), int(key >> 32) + 1) if (key >> 32) % k == 0) for key in keys], float)
    out[rows] = found[inverse]
    return out


def may_not_fit_message(memory: DataParallelMemory, batch_size_per_gpu: float, passes: float = 1.0) -> str:
    """The warning for a step whose estimate exceeds its GPU's memory, with what would fit."""
    gib = 2.0**30
    samples_per_pass = batch_size_per_gpu / passes
    most = samples_that_fit(memory, samples_per_pass)
    needed = passes_that_fit(memory, batch_size_per_gpu, passes)
    if needed is not None:
        advice = (f"about {most:,} samples per pass fit: gradient_accumulation_steps={needed} "
                  f"({needed} passes of {batch_size_per_gpu / needed:g}) would, or a smaller batch per GPU or a sharded layout")
    elif most:
        advice = (f"about {most:,} samples per pass fit: try a smaller batch per GPU, gradient_accumulation_steps "
                  "or a sharded layout")
    else:
        rest = (memory.total_bytes - memory.activations_bytes) / gib
        advice = f"without its activations the step needs {rest:.1f} GB: try a sharded layout"
    return (
        f"memory: about {memory.total_bytes / gib:.1f} GB per GPU needed (activations {memory.activations_bytes / gib:.1f} GB "
        f"at {samples_per_pass:g} samples per pass), the GPU has {memory.capacity_bytes / gib:.0f} GB; the step may not run: "
        + advice
    )
