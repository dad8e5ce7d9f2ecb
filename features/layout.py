"""One step of a transformer trained with tensor, pipeline, context and (sharded) data parallelism.

A job with a transformer shape or layout fields (``layers``,
``tensor_parallel`` ...) is a *layout job*: it is validated here
(:func:`layout_job_from_row`) and timed by :func:`step_breakdown`, per GPU:

* compute: the heaviest pipeline stage's hardware FLOPs of one micro-batch
  (its blocks, and the logits, recomputation included) over the GPU's dense
  peak at the precision times :data:`MATMUL_EFFICIENCY`;
* memory-bound operators (norms, activations, dropout, residual adds and
  the casts around the matrix multiplications): every activation a block
  keeps for backward without recomputation (Korthikanti et al. 2022, Table
  2; no attention scores: flash attention keeps none) moves through DRAM
  :data:`ACTIVATION_PASSES` times per micro-batch (written forward, read
  backward, its gradient written and read; once more written when full
  recomputation replays the forward) at the bandwidth the roofline physics
  attains: the DRAM's times its fitted ``memory_efficiency``, combined with
  what the GPU's SMs sustain (``memory_bytes_per_s_per_sm``,
  ``catalog/physics_constants.json``): what a faster memory buys, as from
  an H100 to an H200;
* tensor-parallel communication, per layer 2 all-reduces forward and 2
  backward (reduce-scatter + all-gather pairs with sequence parallelism, the
  same bytes; 2 more with full recomputation) of micro-batch x sequence x
  hidden activations, not overlapped with compute;
* context parallelism: the ring exchange of K/V blocks, hidden behind the
  attention core where it is shorter;
* pipeline: m = global batch / (DP x micro-batch) micro-batches; the bubble
  is (p - 1) / v micro-batch times, i.e. a fraction (p - 1) / (v m) of the
  steady part; activations cross each stage boundary forward and backward
  (v times with v virtual stages), 1/TP of them per GPU (Megatron's
  scatter-gather), not overlapped;
* data parallel: the gradient reduction of the GPU's parameter shard, hidden
  behind the backward pass of the last micro-batch; full sharding's
  parameter all-gathers are prefetched behind the whole step's compute;
* the optimizer update, memory-bound: 28 bytes per trained parameter
  of the shard (Adam's FP32 state and the BF16 weight and gradient).

Units are in the names; times in seconds, sizes in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from features.catalog_base import CATALOG_DIR, NameIndex, read_json
from features.hardware import DeviceSpec
from features.mechanisms import attainable_memory_bw_bytes_per_s, gpu_mechanisms, physics_constants
from features.layout_collectives import (
    Links,
    context_parallel_ring_s,
    data_parallel_s,
    pipeline_transfer_s,
    tensor_parallel_s,
)
from features.transformer import (
    ACTIVATION_BYTES_PER_ELEMENT,
    GRADIENT_BYTES_PER_PARAM,
    WEIGHT_BYTES_PER_PARAM,
    MemoryPerGpu,
    TransformerShape,
    memory_per_gpu,
    stage_param_count,
)
from features.units import bytes_to_gib

PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved")

#: Fraction of the dense peak that a transformer's matrix multiplications attain, the one
#: fitted constant of this model (provenance: fitted). Fitted on all 13 measured MLPerf Training
#: v3.0/v3.1 GPT-3 175B runs on H100-SXM (FP8, NVIDIA NeMo/Megatron stacks of three submitters)
#: by grid search minimising the mean |log(predicted / measured)| step time, by
#: ``predict evaluate-llm`` (training/llm_evaluation.py); figures on those runs with this value are
#: in-sample. reports/llm/report.md gives the leave-one-submitter-out figures, which refit it
#: without the held-out submitter (0.465-0.5225) and do not use this value. Fitted with the
#: memory-bound term in the step, whose rate is the bandwidth the roofline physics attains (0.5075 before
#: that rate took the SMs' limit, 0.51 with the constants before the refit preceding it; 0.475 before the
#: term, which the matrix multiplications then carried).
MATMUL_EFFICIENCY = 0.5125

#: DRAM passes over a block's kept activations per micro-batch: written forward, read backward, and
#: their gradients written and read (provenance: estimated, from the order of operations; not fitted).
ACTIVATION_PASSES = 4.0
#: ...and one more write where full recomputation replays the forward pass.
RECOMPUTE_ACTIVATION_PASSES = 1.0

#: Bytes the optimizer step reads and writes per trained parameter of the shard:
#: FP32 master weight, momentum and variance read and written (24), BF16 gradient read and
#: BF16 weight written (4).
OPTIMIZER_STEP_BYTES_PER_PARAM = 28.0

#: The layout job's leaves, present in a job or fleet row: any of them given makes it a layout job.
SHAPE_LEAVES = ("layers", "hidden_size", "ffn_hidden_size", "attention_heads", "kv_heads", "vocab_size",
                "sequence_length", "global_batch_size", "micro_batch_size", "adapter", "adapter_rank")
LAYOUT_LEAVES = ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel", "pipeline_schedule",
                 "virtual_stages", "sequence_parallel", "activation_recompute", "sharding")

NO_INTERVAL_REASON = (
    "no interval: the layout model's only measured runs are 13 MLPerf GPT-3 175B runs of one software stack "
    "(NeMo/Megatron on H100), too few to calibrate one; reports/llm/report.md gives its errors there"
)


@dataclass(frozen=True)
class TransformerEntry:
    """A catalogue transformer: its shape, with provenance."""

    name: str
    shape: TransformerShape
    provenance: str
    source: str


@lru_cache(maxsize=1)
def transformer_catalog() -> NameIndex[TransformerEntry]:
    """``features/catalog/transformers.json``, by name and alias (read once per process)."""
    entries = []
    for e in read_json(CATALOG_DIR / "transformers.json")["transformers"]:
        shape = TransformerShape(
            e["family"], e["layers"], e["hidden_size"], e["ffn_hidden_size"], e["attention_heads"], e["kv_heads"],
            e["vocab_size"], e["sequence_length"], e.get("lora_rank"),
        )
        entries.append((e["name"], e.get("aliases", ()), TransformerEntry(e["name"], shape, e["provenance"], e["source"])))
    return NameIndex("transformer", entries)


@dataclass(frozen=True)
class Layout:
    """How one step is split over the GPUs."""

    tensor_parallel: int
    pipeline_parallel: int
    context_parallel: int
    data_parallel: int
    micro_batch_size: int
    global_batch_size: int
    pipeline_schedule: str = "1f1b"
    virtual_stages: int = 1
    sequence_parallel: bool = True
    activation_recompute: str = "none"
    sharding: str = "none"

    @property
    def gpus(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel * self.data_parallel

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step (gradient accumulation steps)."""
        return self.global_batch_size // (self.data_parallel * self.micro_batch_size)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the pipeline relative to its steady part: (p - 1) / (v m)."""
        return (self.pipeline_parallel - 1) / (self.virtual_stages * self.micro_batches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel": self.tensor_parallel,
            "pipeline_parallel": self.pipeline_parallel,
            "context_parallel": self.context_parallel,
            "data_parallel": self.data_parallel,
            "micro_batch_size": self.micro_batch_size,
            "global_batch_size": self.global_batch_size,
            "pipeline_schedule": self.pipeline_schedule,
            "virtual_stages": self.virtual_stages,
            "sequence_parallel": self.sequence_parallel,
            "activation_recompute": self.activation_recompute,
            "sharding": self.sharding,
        }


@dataclass(frozen=True)
class LayoutJob:
    """A validated layout job: shape, layout, GPU and links."""

    name: str
    shape: TransformerShape
    layout: Layout
    gpu: DeviceSpec
    precision: str
    links: Links
    network: str
    warnings: tuple[str, ...] = field(default=())

    @property
    def peak_flops_per_s(self) -> float:
        return self.gpu.peak_flops_per_s(self.precision)

    def with_layout(self, layout: Layout) -> "LayoutJob":
        return replace(self, layout=layout)


@dataclass(frozen=True)
class LayoutBreakdown:
    """Seconds of one step per component (they add up to the step time), memory and utilisation."""

    compute_s: float
    recompute_s: float
    memory_bound_s: float
    tp_comm_s: float
    cp_comm_exposed_s: float
    pipeline_bubble_s: float
    pipeline_transfer_s: float
    dp_comm_s: float
    dp_comm_exposed_s: float
    optimizer_s: float
    memory: MemoryPerGpu
    memory_capacity_bytes: float
    tokens_per_step: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    gpus: int
    peak_flops_per_s: float

    @property
    def components_s(self) -> dict[str, float]:
        """The additive components of the step, by name (the bottleneck families)."""
        return {
            "compute": self.compute_s,
            "memory": self.memory_bound_s,
            "tp_communication": self.tp_comm_s,
            "cp_communication": self.cp_comm_exposed_s,
            "pipeline_bubble": self.pipeline_bubble_s,
            "pipeline_transfers": self.pipeline_transfer_s,
            "dp_communication": self.dp_comm_exposed_s,
            "optimizer": self.optimizer_s,
        }

    @property
    def step_time_s(self) -> float:
        return sum(self.components_s.values())

    @property
    def bottleneck(self) -> str:
        components = self.components_s
        return max(components, key=components.get)

    @property
    def fits(self) -> bool:
        return self.memory.total_bytes <= self.memory_capacity_bytes

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s

    @property
    def mfu(self) -> float:
        """Model FLOPs (no recomputation) per second over the GPUs' dense peak."""
        return self.model_flops_per_step / (self.step_time_s * self.gpus * self.peak_flops_per_s)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs (recomputation included) per second over the GPUs' dense peak."""
        return self.hardware_flops_per_step / (self.step_time_s * self.gpus * self.peak_flops_per_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step_time_s,
            "components_s": self.components_s,
            "recompute_s": self.recompute_s,
            "dp_comm_total_s": self.dp_comm_s,
            "bottleneck": self.bottleneck,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory_per_gpu_bytes": self.memory.total_bytes,
            "memory": self.memory.to_dict(),
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "fits": self.fits,
        }


def does_not_fit_message(breakdown: LayoutBreakdown, gpu: str) -> str:
    return (
        f"does not fit: {bytes_to_gib(breakdown.memory.total_bytes):.1f} GB per GPU needed, "
        f"{gpu} has {bytes_to_gib(breakdown.memory_capacity_bytes):.0f} GB"
    )


# -- physics ----------------------------------------------------------------


def job_memory(job: LayoutJob) -> MemoryPerGpu:
    lay = job.layout
    return memory_per_gpu(
        job.shape,
        tensor_parallel=lay.tensor_parallel,
        pipeline_parallel=lay.pipeline_parallel,
        data_parallel=lay.data_parallel,
        context_parallel=lay.context_parallel,
        micro_batch_size=lay.micro_batch_size,
        micro_batches=lay.micro_batches,
        schedule=lay.pipeline_schedule,
        virtual_stages=lay.virtual_stages,
        sequence_parallel=lay.sequence_parallel,
        recompute=lay.activation_recompute,
        sharding=lay.sharding,
    )


def step_breakdown(job: LayoutJob, matmul_efficiency: float = MATMUL_EFFICIENCY, memory: MemoryPerGpu | None = None) -> LayoutBreakdown:
    """The step of a layout job, component by component (see the module docstring)."""
    shape, lay, links = job.shape, job.layout, job.links
    tp, pp, cp, dp, v = lay.tensor_parallel, lay.pipeline_parallel, lay.context_parallel, lay.data_parallel, lay.virtual_stages
    m = lay.micro_batches
    rate_flops_per_s = job.peak_flops_per_s * matmul_efficiency
    lora = shape.lora_rank is not None
    recompute = lay.activation_recompute

    # Compute of one micro-batch on the heaviest stage: its share of the blocks plus the logits.
    head_flops = shape.logits_flops_per_token() * (2.0 if lora else 3.0)
    block_flops = shape.hardware_flops_per_token(recompute) - head_flops
    stage_flops_per_token = block_flops / pp + head_flops
    tokens_per_micro_batch = lay.micro_batch_size * shape.sequence_length
    gpu_share = 1.0 / (tp * cp)
    compute_mb_s = stage_flops_per_token * tokens_per_micro_batch * gpu_share / rate_flops_per_s
    recompute_mb_s = shape.recompute_flops_per_token(recompute) / pp * tokens_per_micro_batch * gpu_share / rate_flops_per_s
    layers_per_stage = shape.layers / pp
    attention_passes = 3.0 + (1.0 if recompute != "none" else 0.0)
    attention_mb_s = (layers_per_stage * attention_passes * shape.layer_attention_flops_per_token()
                      * tokens_per_micro_batch * gpu_share / rate_flops_per_s)

    # Every activation a block keeps without recomputation, attention scores aside (flash attention).
    kept_bytes = shape.layer_activation_bytes(lay.micro_batch_size, tp, lay.sequence_parallel, "selective", cp)
    passes = ACTIVATION_PASSES + (RECOMPUTE_ACTIVATION_PASSES if recompute == "full" else 0.0)
    k = physics_constants()
    mechanisms = gpu_mechanisms().get(job.gpu.name)
    memory_bw_bytes_per_s = float(attainable_memory_bw_bytes_per_s(
        job.gpu.memory_bw_bytes_per_s * k.memory_efficiency, np.nan if mechanisms is None else mechanisms.sm_count, k))
    memory_mb_s = layers_per_stage * passes * kept_bytes / memory_bw_bytes_per_s

    local_tokens = tokens_per_micro_batch / cp
    activation_bytes = local_tokens * shape.hidden_size * ACTIVATION_BYTES_PER_ELEMENT
    tp_collectives = 4 + (2 if recompute == "full" else 0)
    tp_mb_s = layers_per_stage * tensor_parallel_s(activation_bytes, tp, tp_collectives, links)
    kv_block_bytes = local_tokens * 2.0 * shape.kv_hidden_size / tp * ACTIVATION_BYTES_PER_ELEMENT
    cp_passes = 3.0 + (1.0 if recompute == "full" else 0.0)  # K/V forward; K/V and dK/dV backward
    cp_mb_s = layers_per_stage * context_parallel_ring_s(kv_block_bytes, cp, tp, cp_passes, links)
    cp_exposed_mb_s = max(0.0, cp_mb_s - attention_mb_s)

    micro_batch_s = compute_mb_s + memory_mb_s + tp_mb_s + cp_exposed_mb_s
    bubble_s = (pp - 1) / v * micro_batch_s
    if pp > 1:
        boundary_bytes = activation_bytes / tp
        transfers_s = pipeline_transfer_s(boundary_bytes, 2.0 * v * m, tp * cp * dp, links)
    else:
        transfers_s = 0.0

    stage_params = stage_param_count(shape, tp, pp)
    trained_params = shape.adapter_param_count() / (tp * pp) if lora else stage_params
    dp_times = data_parallel_s(
        gradient_bytes=trained_params * GRADIENT_BYTES_PER_PARAM,
        parameter_bytes=stage_params * WEIGHT_BYTES_PER_PARAM,
        group_size=dp * cp,
        stride_gpus=tp,
        sharding=lay.sharding,
        micro_batches=m,
        links=links,
    )
    backward_window_s = (2.0 / 3.0) * compute_mb_s
    gather_window_s = m * compute_mb_s
    dp_exposed_s = max(0.0, dp_times.gradient_s - backward_window_s) + max(0.0, dp_times.parameter_gather_s - gather_window_s)
    optimizer_shard = dp * cp if lay.sharding != "none" else 1
    optimizer_s = trained_params / optimizer_shard * OPTIMIZER_STEP_BYTES_PER_PARAM / job.gpu.memory_bw_bytes_per_s

    tokens_per_step = float(lay.global_batch_size * shape.sequence_length)
    return LayoutBreakdown(
        compute_s=m * compute_mb_s,
        recompute_s=m * recompute_mb_s,
        memory_bound_s=m * memory_mb_s,
        tp_comm_s=m * tp_mb_s,
        cp_comm_exposed_s=m * cp_exposed_mb_s,
        pipeline_bubble_s=bubble_s,
        pipeline_transfer_s=transfers_s,
        dp_comm_s=dp_times.total_s,
        dp_comm_exposed_s=dp_exposed_s,
        optimizer_s=optimizer_s,
        memory=memory if memory is not None else job_memory(job),
        memory_capacity_bytes=float(job.gpu.memory_bytes),
        tokens_per_step=tokens_per_step,
        model_flops_per_step=shape.model_flops_per_token() * tokens_per_step,
        hardware_flops_per_step=shape.hardware_flops_per_token(recompute) * tokens_per_step,
        gpus=lay.gpus,
        peak_flops_per_s=job.peak_flops_per_s,
    )
