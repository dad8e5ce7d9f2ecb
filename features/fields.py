"""The job spec's fields: :data:`FIELDS` is the one description of every field of a job.

Where each field sits, what it may hold and its default. The table checks of
:mod:`features.table` read their rules from it, and :func:`json_schema` builds
the JSON Schema from it (with pydantic, loaded only for that), so a job file
and a fleet row are judged by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ARCHITECTURES = ("single", "allreduce-local", "allreduce-cluster", "ps-worker")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax", "paddle", "other")
SOFTWARE_STACKS = ("stock", "tuned", "compiled")
#: How a reduced precision is applied: autocast casts operator by operator and keeps reductions,
#: softmax, normalisation and losses in FP32; half holds the whole model at the reduced precision
#: with FP32 master weights (apex AMP O2, ``model.half()``).
MIXED_PRECISION_MODES = ("autocast", "half")
PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved")
ACTIVATION_RECOMPUTE = ("none", "selective", "full")
SHARDING = ("none", "optimizer", "gradients", "full")
ADAPTERS = ("none", "lora")

#: The release year a job without one runs: the newest among the measured runs (Lambda's suite v2,
#: NGC PyTorch 24.10). A job states its own where it runs an older or newer stack.
DEFAULT_SOFTWARE_YEAR = 2024

SECTIONS = ("workload", "parallelism", "cluster", "measured")
REQUIRED_SECTIONS = ("workload", "cluster")

_COUNT = {"kind": "int", "lower": 1.0, "upper": 1_000_000.0}


@dataclass(frozen=True)
class Field:
    """One job field: where it sits, what it may hold and its default.

    Text choices (``allowed``) match case-insensitively. Numbers must lie in
    ``[lower, upper]`` (``lower`` exclusive where ``lower_inclusive`` is
    false); ``int`` fields must be whole.
    """

    section: str | None
    name: str
    kind: str  # "str", "int", "float" or "bool"
    description: str
    default: Any = None
    required: bool = False
    allowed: tuple[str, ...] | None = None
    lower: float | None = None
    lower_inclusive: bool = True
    upper: float | None = None
    leaf: str = field(default="")

    def __post_init__(self) -> None:
        if not self.leaf:
            object.__setattr__(self, "leaf", "measured_step_time_s" if self.section == "measured" else self.name)

    @property
    def path(self) -> str:
        return self.name if self.section is None else f"{self.section}.{self.name}"


FIELDS: tuple[Field, ...] = (
    Field(None, "name", "str", "A name for the job.", default="job"),
    Field("workload", "model", "str", "Catalogue model name or alias (see `predict workloads`)."),
    Field("workload", "batch_size_per_gpu", "int", "Samples per GPU per step; default: the model's catalogue default.",
          # Recommendation models train with per-GPU batches of millions of samples (NCF in the Lambda benchmark).
          lower=1.0, upper=100_000_000.0),
    Field("workload", "precision", "str", "Training precision; fp16/bf16/fp8 mean mixed precision on tensor cores.",
          default="fp32", allowed=PRECISIONS),
    Field("workload", "framework", "str", "Training framework.", default="pytorch", allowed=FRAMEWORKS),
    Field("workload", "software_stack", "str",
          "stock: released framework builds run eagerly (the Lambda benchmark); tuned: vendor-tuned kernels and fusions, "
          "as in MLPerf submissions; compiled: a released build under a graph compiler that fuses element-wise operators "
          "(TensorFlow's XLA, torch.compile).",
          default="stock", allowed=SOFTWARE_STACKS),
    Field("workload", "software_year", "int",
          "Release year of the framework build or container the job runs (NGC PyTorch 22.09 -> 2022): kernel libraries get "
          "faster release by release, and the learned correction reads it; the physics keeps multiplies of model widths "
          "no multiple of 8 off Volta's and Turing's tensor cores before 2021 (cuBLAS before 11); default "
          f"{DEFAULT_SOFTWARE_YEAR}, the newest "
          "release among the measured runs.",
          default=DEFAULT_SOFTWARE_YEAR, lower=2012.0, upper=2100.0),
    Field("workload", "mixed_precision", "str",
          "How fp16/bf16 is applied: autocast casts operator by operator, keeping softmax, normalisation, reductions "
          "and losses in FP32 (torch.autocast, apex AMP O1, TensorFlow's AMP); half holds the whole model at the "
          "reduced precision with FP32 master weights (apex AMP O2, model.half()). Ignored at fp32 and tf32.",
          default="autocast", allowed=MIXED_PRECISION_MODES),
    # Upper bounds on explicit figures are physical sanity limits (a trillion-parameter model over a
    # million-token sample is about 1e19 FLOPs), so every product of them stays finite.
    # Lower bounds likewise: a sample takes at least one FLOP, a model has at least one parameter, and
    # a gradient at least one byte (a denormal such as 5e-324 would overflow every ratio taken of it).
    Field("workload", "flops_per_sample", "float", "Training FLOPs (forward + backward) per sample.", lower=1.0, upper=1e21),
    Field("workload", "param_count", "float", "Parameters whose gradients are exchanged each step.", lower=1.0, upper=1e14),
    Field("workload", "gradient_bytes", "float", "Bytes of gradient exchanged per step (instead of param_count).", lower=1.0,
          upper=1e15),
    Field("workload", "memory_bytes_per_sample", "float", "DRAM traffic per sample per step, at this precision.", lower=0.0, upper=1e16),
    Field("workload", "input_bytes_per_sample", "float", "Bytes copied host to device per sample.", lower=0.0, upper=1e13),
    Field("workload", "matrix_flops_per_sample", "float",
          "FLOPs per sample of matrix operators (matmul, convolution, attention); default: the model's counted op-class split, else flops_per_sample.",
          lower=0.0, upper=1e21),
    Field("workload", "memory_bound_bytes_per_sample", "float",
          "DRAM bytes per sample of memory-bound operators at this precision; default: the counted split, else the default split (features/workloads.py).",
          lower=0.0, upper=1e16),
    Field("workload", "kernels_per_step", "int",
          "Kernels one training step launches (forward, backward, optimizer); default: the counted figure, else the default split (features/workloads.py).",
          lower=1.0, upper=100_000_000.0),
    Field("workload", "gradient_accumulation_steps",
          description="Forward and backward passes per step, batch_size_per_gpu split evenly among them (gradients are "
                      "exchanged and the optimizer runs once per step); default 1.",
          **_COUNT),
    Field("parallelism", "architecture", "str", "How gradients are exchanged.", default="single", allowed=ARCHITECTURES),
    Field("parallelism", "workers", description="Worker processes (hosts for ps-worker).", default=1, **_COUNT),
    Field("parallelism", "gpus_per_worker", description="GPUs each worker drives.", default=1, **_COUNT),
    Field("parallelism", "parameter_servers", description="ps-worker only; default 1.", **_COUNT),
    Field("parallelism", "nodes", description="allreduce-cluster only; default: fewest nodes that hold the GPUs.", **_COUNT),
    Field("cluster", "gpu", "str", "GPU name or alias (see `predict devices`).", required=True),
    Field("cluster", "gpus_per_node", description="GPUs in one node.", default=8, **_COUNT),
    Field("cluster", "intra_node_link", "str", "Link joining a node's GPUs; default: the GPU's own."),
    Field("cluster", "network", "str", "NIC type joining nodes.", default="ethernet-25g"),
    Field("cluster", "nics_per_node", description="NICs each node uses for training traffic.", default=1, **_COUNT),
    Field("measured", "step_time_s", "float", "Measured seconds per training step.", lower=0.0, lower_inclusive=False, upper=1e6),
    # A transformer by its shape, trained with tensor, pipeline, context and sharded data parallelism
    # (a layout job, see features.layout): any of these fields given makes a job one.
    Field("workload", "layers", description="Transformer blocks; default: the catalogue transformer's.", **_COUNT),
    Field("workload", "hidden_size", description="Model width h; default: the catalogue transformer's.", **_COUNT),
    Field("workload", "ffn_hidden_size", description="MLP width; default 4h for gpt, 256 x ceil(8h/3/256) for llama.", **_COUNT),
    Field("workload", "attention_heads", description="Attention heads; default: the catalogue transformer's.", **_COUNT),
    Field("workload", "kv_heads", description="Key/value heads (grouped-query attention, llama); default: attention_heads.", **_COUNT),
    Field("workload", "vocab_size", description="Vocabulary size; default: the catalogue transformer's.", **_COUNT),
    Field("workload", "sequence_length", description="Tokens per sequence; default: the catalogue transformer's.", **_COUNT),
    Field("workload", "global_batch_size", description="Sequences per optimizer step; default: data_parallel x micro_batch_size.", **_COUNT),
    Field("workload", "micro_batch_size", description="Sequences per micro-batch per pipeline; default 1.", **_COUNT),
    Field("workload", "adapter", "str", "Fine-tuning adapter: lora trains only rank-r adapters on frozen weights "
          "(also as {\"kind\": \"lora\", \"rank\": 16}); default none.", allowed=ADAPTERS),
    Field("workload", "adapter_rank", description="LoRA rank.", **_COUNT),
    Field("parallelism", "tensor_parallel", description="Tensor-parallel GPUs per layer; default 1.", **_COUNT),
    Field("parallelism", "pipeline_parallel", description="Pipeline stages; default 1.", **_COUNT),
    Field("parallelism", "context_parallel", description="GPUs splitting each sequence (K/V ring); default 1.", **_COUNT),
    Field("parallelism", "data_parallel", description="Model replicas; default: what fills parallelism.nodes, else 1.", **_COUNT),
    Field("parallelism", "pipeline_schedule", "str", "gpipe, 1f1b or interleaved (with virtual_stages); default 1f1b.",
          allowed=PIPELINE_SCHEDULES),
    Field("parallelism", "virtual_stages", description="Model chunks per pipeline stage (interleaved schedule); default 1.", **_COUNT),
    Field("parallelism", "sequence_parallel", "bool", "Sequence parallelism alongside tensor parallelism; default true."),
    Field("parallelism", "activation_recompute", "str", "Activation recomputation; default none.", allowed=ACTIVATION_RECOMPUTE),
    Field("parallelism", "sharding", "str", "Data-parallel sharding: optimizer (ZeRO-1), gradients (ZeRO-2), "
          "full (ZeRO-3, FSDP full shard); default none.", allowed=SHARDING),
)

#: Leaf name -> (section, field) for the flattened form; order is the fleet column order.
FLAT_FIELDS: dict[str, tuple[str | None, str]] = {f.leaf: (f.section, f.name) for f in FIELDS}
FIELDS_BY_LEAF: dict[str, Field] = {f.leaf: f for f in FIELDS}


def field_path(leaf: str) -> str:
    """The dotted job-spec path of a flat field ("gpu" -> "cluster.gpu")."""
    return FIELDS_BY_LEAF[leaf].path


def json_schema() -> dict[str, Any]:
    """JSON Schema of the job file, built from :data:`FIELDS` with pydantic."""
    from typing import Literal, Optional

    from pydantic import ConfigDict, create_model
    from pydantic import Field as Described

    config = ConfigDict(extra="forbid")
    kinds = {"str": str, "int": int, "float": float, "bool": bool}

    def model_of(section: str):
        fields = {}
        for f in FIELDS:
            if f.section != section:
                continue
            annotation = Literal[f.allowed] if f.allowed else kinds[f.kind]
            bounds = {}
            if f.lower is not None:
                bounds["ge" if f.lower_inclusive else "gt"] = f.lower
            if f.upper is not None:
                bounds["le"] = f.upper
            required = f.required or section == "measured"
            default = ... if required else f.default
            fields[f.name] = (annotation if required or f.default is not None else Optional[annotation],
                              Described(default, description=f.description, **bounds))
        return create_model(section.capitalize(), __config__=config, **fields)

    sections = {section: model_of(section) for section in SECTIONS}
    job = create_model(
        "Job",
        __config__=config,
        name=(str, Described("job", description=FIELDS_BY_LEAF["name"].description)),
        workload=(sections["workload"], ...),
        parallelism=(Optional[sections["parallelism"]], None),
        cluster=(sections["cluster"], ...),
        measured=(Optional[sections["measured"]], None),
    )
    return job.model_json_schema()
