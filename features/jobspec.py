"""The job spec: one training job as JSON, validated at the input edge.

A job names a workload (a catalogue model, or explicit figures), how it is
parallelised and the cluster it runs on. A fleet is a table with the same
fields flattened to their leaf names (``model``, ``workers``, ``gpu`` ...) and
``measured_step_time_s``; :data:`FLAT_FIELDS` lists them in order.

Defaults (also in the README):

* ``workload.batch_size_per_gpu``: the catalogue model's default batch;
  ``precision`` fp32; ``framework`` pytorch; ``software_stack`` stock.
* ``parallelism.architecture`` single; ``workers`` 1; ``gpus_per_worker`` 1;
  ``parameter_servers`` 1 for ps-worker; ``nodes`` for allreduce-cluster: the
  fewest nodes that hold all GPUs at ``gpus_per_node`` each.
* ``cluster.gpus_per_node`` 8; ``intra_node_link`` the GPU's own (NVLink or
  NVSwitch for SXM parts, its PCIe generation for cards); ``network``
  ethernet-25g; ``nics_per_node`` 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from features.errors import MISSING, SpecError

ARCHITECTURES = ("single", "allreduce-local", "allreduce-cluster", "ps-worker")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")
FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax", "paddle", "other")
SOFTWARE_STACKS = ("stock", "tuned")


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


# Choices are matched case-insensitively ("FP16" is fp16), in job files and fleets alike.
Architecture = Annotated[Literal["single", "allreduce-local", "allreduce-cluster", "ps-worker"], BeforeValidator(_lower)]
Precision = Annotated[Literal["fp32", "tf32", "fp16", "bf16", "fp8"], BeforeValidator(_lower)]
Framework = Annotated[Literal["pytorch", "tensorflow", "mxnet", "jax", "paddle", "other"], BeforeValidator(_lower)]
SoftwareStack = Annotated[Literal["stock", "tuned"], BeforeValidator(_lower)]

PositiveCount = Annotated[int, Field(ge=1, le=1_000_000)]
# Recommendation models train with per-GPU batches of millions of samples (NCF in the Lambda benchmark).
BatchSize = Annotated[int, Field(ge=1, le=100_000_000)]
PositiveFigure = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFigure = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class Workload(_Section):
    """What is trained: a catalogue model, or explicit figures for one that is not there."""

    model: str | None = Field(None, description="Catalogue model name or alias (see `predict workloads`).")
    batch_size_per_gpu: BatchSize | None = Field(None, description="Samples per GPU per step; default: the model's catalogue default.")
    precision: Precision = Field("fp32", description="Training precision; fp16/bf16 mean mixed precision on tensor cores.")
    framework: Framework = "pytorch"
    software_stack: SoftwareStack = Field(
        "stock",
        description="stock: released framework builds (the Lambda benchmark); tuned: vendor-tuned kernels and fusions, as in MLPerf submissions.",
    )
    flops_per_sample: PositiveFigure | None = Field(None, description="Training FLOPs (forward + backward) per sample.")
    param_count: PositiveFigure | None = Field(None, description="Parameters whose gradients are exchanged each step.")
    gradient_bytes: PositiveFigure | None = Field(None, description="Bytes of gradient exchanged per step (instead of param_count).")
    memory_bytes_per_sample: NonNegativeFigure | None = Field(None, description="DRAM traffic per sample per step, at this precision.")
    input_bytes_per_sample: NonNegativeFigure | None = Field(None, description="Bytes copied host to device per sample.")


class Parallelism(_Section):
    """How the job is spread over GPUs, workers and nodes."""

    architecture: Architecture = "single"
    workers: PositiveCount = 1
    gpus_per_worker: PositiveCount = 1
    parameter_servers: PositiveCount | None = Field(None, description="ps-worker only; default 1.")
    nodes: PositiveCount | None = Field(None, description="allreduce-cluster only; default: fewest nodes that hold the GPUs.")


class Cluster(_Section):
    """The hardware: GPU type, node size and links."""

    gpu: str = Field(description="GPU name or alias (see `predict devices`).")
    gpus_per_node: PositiveCount = 8
    intra_node_link: str | None = Field(None, description="Link joining a node's GPUs; default: the GPU's own.")
    network: str = Field("ethernet-25g", description="NIC type joining nodes.")
    nics_per_node: PositiveCount = 1


class Measured(_Section):
    step_time_s: PositiveFigure


class Job(_Section):
    """One training job."""

    name: str = "job"
    workload: Workload
    parallelism: Parallelism = Parallelism()
    cluster: Cluster
    measured: Measured | None = None


#: Leaf name -> (section, field) for the flattened form; order is the fleet column order.
FLAT_FIELDS: dict[str, tuple[str | None, str]] = {"name": (None, "name")}
for _section, _model in (("workload", Workload), ("parallelism", Parallelism), ("cluster", Cluster)):
    for _field in _model.model_fields:
        FLAT_FIELDS[_field] = (_section, _field)
FLAT_FIELDS["measured_step_time_s"] = ("measured", "step_time_s")


def field_path(leaf: str) -> str:
    """The dotted job-spec path of a flat field ("gpu" -> "cluster.gpu")."""
    section, name = FLAT_FIELDS[leaf]
    return name if section is None else f"{section}.{name}"


def _describe_error(error: dict[str, Any]) -> SpecError:
    path = ".".join(str(part) for part in error["loc"])
    kind = error["type"]
    value = error.get("input")
    if kind == "missing":
        return SpecError(path, MISSING, "this field is required")
    if kind == "extra_forbidden":
        section = ".".join(str(part) for part in error["loc"][:-1])
        known = _known_fields(section)
        return SpecError(path, value, f"unknown field; allowed here: {', '.join(known)}")
    if kind == "literal_error":
        allowed = error["ctx"]["expected"].replace("'", "")
        return SpecError(path, value, f"allowed: {allowed}")
    return SpecError(path, value, error["msg"].lower())


def _known_fields(section: str) -> list[str]:
    model = {"": Job, "workload": Workload, "parallelism": Parallelism, "cluster": Cluster, "measured": Measured}[section]
    return list(model.model_fields)


def job_from_dict(data: Any) -> Job:
    """Validate a parsed JSON object as a :class:`Job`; the first problem raises ``SpecError``."""
    if not isinstance(data, dict):
        raise SpecError("job", type(data).__name__, "a job is a JSON object with workload and cluster")
    try:
        return Job.model_validate(data)
    except ValidationError as exc:
        raise _describe_error(exc.errors()[0]) from None


def load_job(path: str | Path) -> Job:
    """Read and validate one job JSON file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError("--job", str(path), f"cannot read the file ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError("--job", str(path), f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return job_from_dict(data)


def flatten(job: Job) -> dict[str, Any]:
    """The job as one fleet row: leaf names to values (None where omitted)."""
    row: dict[str, Any] = {}
    for leaf, (section, name) in FLAT_FIELDS.items():
        holder = job if section is None else getattr(job, section)
        row[leaf] = None if holder is None else getattr(holder, name)
    return row


def json_schema() -> dict[str, Any]:
    """JSON Schema of the job file."""
    return Job.model_json_schema()
