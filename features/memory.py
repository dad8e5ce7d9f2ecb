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

Embedding tables updated sparsely (the recommendation models') are sharded
across the job's GPUs, as every large-scale implementation of them does
(TorchRec, HugeCTR), and held in FP32 without optimizer state.

The batch per GPU is taken as one pass: a job whose batch accumulates
gradients over several passes (BERT pre-training's tables count up to
32,768 samples per GPU per optimizer step) holds one pass's activations, and
its estimate is high. The parts are estimates from counted figures; the memory check on every
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
    """Bytes one GPU holds at the step's peak, by part, against the GPU's capacity."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    half_copy_bytes: float
    bucket_bytes: float
    activations_bytes: float
    reserve_bytes: float
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.half_copy_bytes
            + self.bucket_bytes + self.activations_bytes + self.reserve_bytes
        )

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict[str, Any]:
        parts = {k: v for k, v in self.__dict__.items() if k != "capacity_bytes"}
        return {"total_bytes": self.total_bytes, "capacity_bytes": self.capacity_bytes, "fits": self.fits, "parts": parts}


def data_parallel_memory(
    workload: WorkloadSpec, batch_size_per_gpu: float, element_bytes: float, total_gpus: float, capacity_bytes: float
) -> DataParallelMemory | None:
    """Per-GPU memory of a data-parallel step of ``workload`` computing with ``element_bytes``-byte elements
    (None without a counted activation figure)."""
    if workload.activation_bytes_per_sample_fp32 is None:
        return None
    element_scale = element_bytes / BYTES_PER_ELEMENT["fp32"]
    trained = workload.dense_param_count
    other = workload.param_count - trained
    if workload.domain in SPARSE_EMBEDDING_DOMAINS:
        other_bytes = other * FP32_BYTES / max(total_gpus, 1.0)
    else:
        other_bytes = other * element_bytes
    return DataParallelMemory(
        weights_bytes=trained * FP32_BYTES + other_bytes,
        gradients_bytes=trained * FP32_BYTES,
        optimizer_bytes=trained * OPTIMIZER_STATE_BYTES_PER_PARAM,
        half_copy_bytes=trained * HALF_COPY_BYTES_PER_PARAM if element_scale < 1 else 0.0,
        bucket_bytes=trained * FP32_BYTES if total_gpus > 1 else 0.0,
        activations_bytes=workload.activation_bytes_per_sample_fp32 * element_scale * batch_size_per_gpu,
        reserve_bytes=RUNTIME_RESERVE_BYTES,
        capacity_bytes=capacity_bytes,
    )


def job_memory(resolved, row: int) -> DataParallelMemory | None:
    """:func:`data_parallel_memory` of one resolved job (a :class:`features.resolve.ResolvedJobs` row).

    None for a job without a catalogue model, on a CPU device, or whose model
    has no activation count.
    """
    if resolved.catalogs is None:
        return None
    workload_index, device_index = int(resolved.workload_index[row]), int(resolved.device_index[row])
    if workload_index < 0 or device_index < 0 or not bool(resolved.catalogs.device_is_gpu[device_index]):
        return None
    catalogs = resolved.catalogs
    workload = catalogs.workloads.workloads.get(catalogs.workload_names[workload_index], "workload.model")
    device = catalogs.hardware.device(catalogs.device_names[device_index])
    values = (resolved.batch_size_per_gpu[row], resolved.bytes_per_element[row], resolved.total_gpus[row])
    if not all(np.isfinite(values)):
        return None
    return data_parallel_memory(workload, *(float(v) for v in values), float(device.memory_bytes))


def may_not_fit_message(memory: DataParallelMemory, batch_size_per_gpu: float) -> str:
    """The warning for a step whose estimate exceeds its GPU's memory."""
    gib = 2.0**30
    return (
        f"memory: about {memory.total_bytes / gib:.1f} GB per GPU needed (activations {memory.activations_bytes / gib:.1f} GB "
        f"at batch {batch_size_per_gpu:g} in one pass), the GPU has {memory.capacity_bytes / gib:.0f} GB; the step may not run: "
        "try a smaller batch per GPU or a sharded layout (a batch accumulated over several passes needs less)"
    )
