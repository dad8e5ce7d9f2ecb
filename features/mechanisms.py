"""Catalogues of mechanisms: GPU internals, software stacks, collectives and the physics' fitted constants.

* ``catalog/gpu_mechanisms.json``: per GPU (by its name in
  ``hardware/gpus.json``) SM count, boost clock, L2 size, tensor-core
  generation, FP32 lanes per SM and the tensor cores' FP32-accumulate rate
  as a share of their hardware rate, each with provenance and source.
* ``catalog/software.json``: per framework and software stack, the cost of
  one kernel launch and the per-step host overhead.
* ``catalog/collectives.json``: per link kind (or link), the bus-bandwidth
  efficiency of NCCL's ring and tree all-reduce and the fixed cost of a call.
* ``catalog/physics_constants.json``: the few constants of the roofline
  physics (:mod:`features.physics`), fitted on measured runs.

Each loader reads its file once per process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from features.catalog_base import CATALOG_DIR, PROVENANCE_KINDS, read_json

MECHANISM_FIELDS = (
    "sm_count", "boost_clock_hz", "l2_bytes", "tensor_core_generation", "fp32_lanes_per_sm", "fp32_accumulate_tensor_rate",
)


def _check_provenance(where: str, provenance: dict | str, source: dict | str, names: tuple[str, ...]) -> None:
    for name in names:
        kind = provenance if isinstance(provenance, str) else provenance.get(name)
        text = source if isinstance(source, str) else source.get(name)
        if kind not in PROVENANCE_KINDS or not text:
            raise ValueError(f"{where}: {name} needs a provenance in {PROVENANCE_KINDS} and a source")


@dataclass(frozen=True)
class GpuMechanisms:
    """What a GPU is made of, beyond its peak rates."""

    name: str
    sm_count: int
    boost_clock_hz: float
    l2_bytes: float
    tensor_core_generation: int
    fp32_lanes_per_sm: int
    #: The tensor cores' rate with FP32 accumulation (what mixed-precision training uses, and the catalogue's
    #: peak) over their hardware rate: 0.5 on GeForce parts, whose firmware halves it; 1 elsewhere.
    fp32_accumulate_tensor_rate: float
    provenance: dict
    source: dict


@lru_cache(maxsize=1)
def gpu_mechanisms() -> dict[str, GpuMechanisms]:
    """GPU name (as in ``hardware/gpus.json``) -> its mechanism figures."""
    out = {}
    for entry in read_json(CATALOG_DIR / "gpu_mechanisms.json")["gpus"]:
        spec = GpuMechanisms(**entry)
        _check_provenance(f"gpu_mechanisms {spec.name}", spec.provenance, spec.source, MECHANISM_FIELDS)
        out[spec.name] = spec
    return out


@dataclass(frozen=True)
class SoftwareSpec:
    """One framework and software stack: seconds per kernel launch and per step outside the kernels."""

    framework: str
    software_stack: str
    kernel_launch_latency_s: float
    host_overhead_s: float
    provenance: dict
    source: dict


@lru_cache(maxsize=1)
def software_specs() -> dict[tuple[str, str], SoftwareSpec]:
    """(framework, software stack) -> its launch latency and host overhead."""
    out = {}
    for entry in read_json(CATALOG_DIR / "software.json")["stacks"]:
        spec = SoftwareSpec(**entry)
        _check_provenance(
            f"software {spec.framework}/{spec.software_stack}", spec.provenance, spec.source,
            ("kernel_launch_latency_s", "host_overhead_s"),
        )
        out[(spec.framework, spec.software_stack)] = spec
    return out


@dataclass(frozen=True)
class CollectiveSpec:
    """How well NCCL's all-reduce algorithms use a link: bus bandwidth over link bandwidth, and a call's fixed cost."""

    ring_bus_bw_efficiency: float
    tree_bus_bw_efficiency: float
    call_latency_s: float
    provenance: str
    source: str


@dataclass(frozen=True)
class CollectiveCatalog:
    by_kind: dict[str, CollectiveSpec]
    by_link: dict[str, CollectiveSpec]

    def for_link(self, name: str, kind: str) -> CollectiveSpec:
        """A link's own figures where the catalogue has them, else its kind's."""
        return self.by_link.get(name, self.by_kind[kind])


@lru_cache(maxsize=1)
def collective_catalog() -> CollectiveCatalog:
    data = read_json(CATALOG_DIR / "collectives.json")
    by_kind = {}
    for entry in data["link_kinds"]:
        values = dict(entry)
        kind = values.pop("kind")
        by_kind[kind] = CollectiveSpec(**values)
        _check_provenance(f"collectives {kind}", by_kind[kind].provenance, by_kind[kind].source, ("efficiency",))
    by_link = {}
    for entry in data["links"]:
        values = dict(entry)
        name = values.pop("name")
        values.setdefault("call_latency_s", by_kind["network"].call_latency_s)
        by_link[name] = CollectiveSpec(**values)
        _check_provenance(f"collectives {name}", by_link[name].provenance, by_link[name].source, ("efficiency",))
    return CollectiveCatalog(by_kind, by_link)


#: The fitted constants of the roofline physics, with their meaning (see :mod:`features.physics`).
PHYSICS_CONSTANTS = {
    "matrix_efficiency_tensor": "attainable fraction of the tensor-core peak for matrix operators at reduced precision (TF32, FP16, BF16, FP8) on large operators",
    "matrix_efficiency_fp32": "attainable fraction of the FP32 peak for matrix operators at FP32 on large operators",
    "memory_efficiency": "attainable fraction of DRAM bandwidth for memory-bound operators",
    "memory_bytes_per_s_per_sm": "DRAM traffic one SM sustains (Little's law: the bytes its outstanding loads and stores hold, over the memory latency); a GPU's attainable bandwidth is the harmonic combination of its DRAM's attainable share and its SMs' total, so a part with much bandwidth per SM cannot use all of it",
    "half_efficiency_flops_per_sm": "matrix FLOPs per SM of one operator at which it reaches half its attainable fraction (a wave-quantisation curve: small operators leave SMs idle)",
    "launch_scale": "multiplier on the software catalogue's kernel-launch latency",
    "host_scale": "multiplier on the software catalogue's per-step host overhead",
    "tuned_efficiency_gain": "multiplier on the attainable fractions for a vendor-tuned stack (hand-tuned kernels; capped at 1)",
    "tuned_memory_bound_fraction": "share of the memory-bound operators' traffic a vendor-tuned stack's kernel fusion leaves",
    "mixed_precision_fp32_share": "share of the memory-bound operators' traffic that stays at FP32 under autocast mixed precision (softmax, normalisation, losses and reductions run in FP32), moving 4 bytes per element where the training precision moves 2; none for a model held whole at the reduced precision (mixed_precision half)",
    "compiled_memory_bound_fraction": "share of the memory-bound operators' traffic a graph compiler's fusion of element-wise operators leaves (software_stack compiled: XLA, torch.compile)",
    "tuned_overhead_scale": "multiplier on a vendor-tuned stack's kernel-launch latency and per-step host overhead, on top of the two scales (its catalogue entries take CUDA graphs replaying every counted kernel; how many kernels a tuned implementation fuses away is not counted)",
    "overlap_interference": "share of the hidden all-reduce time a GPU's step still pays (NCCL's kernels take SMs and memory bandwidth from the backward pass they overlap; at 1 the overlap gains nothing)",
    "winograd_speedup": "how many times faster 3x3 stride-1 convolutions run on the FP32 path than their direct FLOPs at the attainable FP32 rate (cuDNN's Winograd algorithms: 2.25x to 4x fewer multiplies, less their transforms)",
}


@dataclass(frozen=True)
class PhysicsConstants:
    matrix_efficiency_tensor: float
    matrix_efficiency_fp32: float
    memory_efficiency: float
    half_efficiency_flops_per_sm: float
    launch_scale: float
    host_scale: float
    tuned_efficiency_gain: float = 1.0
    tuned_memory_bound_fraction: float = 1.0
    mixed_precision_fp32_share: float = 0.0
    winograd_speedup: float = 1.0
    compiled_memory_bound_fraction: float = 1.0
    overlap_interference: float = 0.0
    tuned_overhead_scale: float = 1.0
    #: None: the SMs set no limit.
    memory_bytes_per_s_per_sm: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in PHYSICS_CONSTANTS}


def attainable_memory_bw_bytes_per_s(dram_bw_bytes_per_s, sm_count, k: PhysicsConstants):
    """Bytes per second memory-bound operators reach on a GPU whose DRAM attains ``dram_bw_bytes_per_s``:
    that combined harmonically with what its ``sm_count`` SMs sustain, ``1 / (1 / B + 1 / (c x SMs))`` for
    ``c = k.memory_bytes_per_s_per_sm``; never above either, and ``B`` itself where the SM count is unknown
    (NaN) or ``c`` is None. Works elementwise on arrays."""
    if k.memory_bytes_per_s_per_sm is None:
        return dram_bw_bytes_per_s
    sm_count = np.asarray(sm_count, float)
    sms_bw = np.where(np.isfinite(sm_count), k.memory_bytes_per_s_per_sm * np.nan_to_num(sm_count, nan=1.0), np.inf)
    with np.errstate(divide="ignore"):
        return 1.0 / (1.0 / np.asarray(dram_bw_bytes_per_s, float) + 1.0 / sms_bw)


@lru_cache(maxsize=1)
def physics_constants() -> PhysicsConstants:
    """The shipped constants (``catalog/physics_constants.json``)."""
    data = read_json(CATALOG_DIR / "physics_constants.json")
    _check_provenance("physics_constants", data["provenance"], data["source"], ("constants",))
    return PhysicsConstants(**{name: float(data["constants"][name]) for name in PHYSICS_CONSTANTS})
