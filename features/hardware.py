"""The hardware catalogue: devices (GPUs and the testbed's CPU host) and links.

Data lives in ``features/catalog/hardware/*.json``; every file holds
``{"devices": [...], "links": [...]}`` and each entry maps one-to-one onto
:class:`DeviceSpec` or :class:`LinkSpec`. Adding a GPU is adding an entry.

Conventions (also in the README):

* peak FLOP/s are dense (no structured sparsity), at boost clock;
  ``peak_fp16_flops_per_s`` is the tensor-core rate with FP32 accumulate where the
  device has tensor cores, the plain FP16 rate where it has none.
* link bandwidths are per direction: per GPU for PCIe, NVLink and chip-to-chip
  links (all of a GPU's NVLink lanes together), per NIC for network links.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from features.errors import SpecError
from features.catalog_base import CATALOG_DIR, PROVENANCE_KINDS, NameIndex, normalize_name, read_json

HARDWARE_DIR = CATALOG_DIR / "hardware"

DEVICE_KINDS = ("gpu", "cpu")
#: ``pcie`` and ``chip-to-chip`` links carry host-to-device input; ``pcie``,
#: ``nvlink`` and ``shared-memory`` can join the GPUs of one node; ``network``
#: links join nodes (NICs).
LINK_KINDS = ("pcie", "nvlink", "chip-to-chip", "shared-memory", "network")
INTRA_NODE_LINK_KINDS = ("pcie", "nvlink", "shared-memory")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator (or the testbed host's CPU) as its datasheet or a microbenchmark gives it."""

    name: str
    kind: str
    family: str
    vendor: str
    architecture: str
    form_factor: str
    peak_fp32_flops_per_s: float
    memory_bw_bytes_per_s: float
    memory_bytes: float
    host_link: str
    default_intra_node_link: str
    provenance: str
    source: str
    peak_tf32_flops_per_s: float | None = None
    peak_fp16_flops_per_s: float | None = None
    peak_bf16_flops_per_s: float | None = None
    peak_fp8_flops_per_s: float | None = None
    nvlink_generation: int | None = None
    nvlink_link: str | None = None
    pcie_generation: int | None = None
    tdp_w: float | None = None
    release_year: int | None = None
    #: CPU devices: the cores that all of a job's processes share (the testbed runs every emulated
    #: host on one machine). A job with more computing ranks than cores time-slices them.
    cores: int | None = None
    #: CPU devices: the eager framework's cost of one operator (dispatch and autograd bookkeeping on
    #: the host) and of one training step outside its operators, measured on the host with the
    #: framework its jobs run (``python -m training.testbed calibrate``). Where given they replace the
    #: software catalogue's kernel-launch latency and per-step host overhead, which are GPU figures
    #: (a CUDA launch, a device synchronisation).
    kernel_launch_latency_s: float | None = None
    host_overhead_s: float | None = None
    family_default: bool = False
    aliases: tuple[str, ...] = ()
    notes: str = ""
    #: A part that is another's silicon with only its links cut (the China-market A800 and H800: the A100's
    #: and H100's dies, clocks and memory): the learned layer counts it as that part for what its training
    #: data covers (:mod:`predictor.domain`), since every figure the residual sees but the links is the same.
    same_silicon_as: str | None = None

    def peak_flops_per_s(self, precision: str) -> float:
        """Peak dense FLOP/s at ``precision`` (at :meth:`compute_precision` where it has no path for it)."""
        return getattr(self, f"peak_{self.compute_precision(precision)}_flops_per_s")

    def compute_precision(self, precision: str) -> str:
        """The precision the device computes ``precision`` at.

        A precision the device has no fast path for runs at the next slower one
        it has: TF32 and BF16 fall back to FP32 (V100 has neither), FP8 falls
        back to FP16, FP16 to FP32.
        """
        fallbacks = {
            "fp32": ("fp32",),
            "tf32": ("tf32", "fp32"),
            "fp16": ("fp16", "fp32"),
            "bf16": ("bf16", "fp32"),
            "fp8": ("fp8", "fp16", "fp32"),
        }
        for candidate in fallbacks[precision]:
            if getattr(self, f"peak_{candidate}_flops_per_s"):
                return candidate
        raise AssertionError("every device has an FP32 peak")

    @property
    def ridge_point_flops_per_byte(self) -> float:
        """Arithmetic intensity where the FP32 compute roof meets the memory roof."""
        return self.peak_fp32_flops_per_s / self.memory_bw_bytes_per_s


@dataclass(frozen=True)
class LinkSpec:
    """A PCIe, NVLink, chip-to-chip, shared-memory or network link; bandwidth per direction."""

    name: str
    kind: str
    bw_bytes_per_s: float
    latency_s: float
    provenance: str
    source: str
    aliases: tuple[str, ...] = ()
    notes: str = ""
    #: GPUs the link joins directly (an NVLink bridge: 2); None: every GPU of the node. A ring over
    #: more GPUs crosses the GPUs' host link between the joined groups.
    max_gpus: int | None = None


def _build(cls, entry: dict, where: str):
    known = {f.name for f in fields(cls)}
    unknown = set(entry) - known
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} for {cls.__name__}")
    values = dict(entry)
    if "aliases" in values:
        values["aliases"] = tuple(values["aliases"])
    spec = cls(**values)
    if spec.provenance not in PROVENANCE_KINDS:
        raise ValueError(f"{where}: provenance {spec.provenance!r} not in {PROVENANCE_KINDS}")
    kinds = DEVICE_KINDS if cls is DeviceSpec else LINK_KINDS
    if spec.kind not in kinds:
        raise ValueError(f"{where}: kind {spec.kind!r} not in {kinds}")
    for attr in ("kernel_launch_latency_s", "host_overhead_s"):
        value = getattr(spec, attr, None)
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1):
            raise ValueError(f"{where}: {attr} {value!r} must be a number of seconds above 0 and below 1 (or absent)")
    max_gpus = getattr(spec, "max_gpus", None)
    if max_gpus is not None and not (isinstance(max_gpus, int) and not isinstance(max_gpus, bool) and max_gpus >= 2):
        raise ValueError(f"{where}: max_gpus {max_gpus!r} must be a whole number of GPUs, 2 or more (or absent: every GPU)")
    return spec


@dataclass(frozen=True)
class HardwareCatalog:
    """All devices and links, resolvable by name or alias."""

    devices: NameIndex[DeviceSpec]
    links: NameIndex[LinkSpec]
    sources: tuple[Path, ...] = field(default=())

    @classmethod
    def from_files(cls, paths: list[Path]) -> "HardwareCatalog":
        devices: list[DeviceSpec] = []
        links: list[LinkSpec] = []
        for path in paths:
            data = read_json(path)
            devices += [_build(DeviceSpec, e, f"{path.name} device {e.get('name')}") for e in data.get("devices", [])]
            links += [_build(LinkSpec, e, f"{path.name} link {e.get('name')}") for e in data.get("links", [])]
        # A bare family name ("V100") resolves to the family's documented default variant.
        family_aliases: dict[str, tuple[str, ...]] = {}
        for device in devices:
            if device.family_default:
                family_aliases[device.name] = (device.family,)
        device_index = NameIndex(
            "gpu", ((d.name, d.aliases + family_aliases.get(d.name, ()), d) for d in devices), preferred=family_aliases
        )
        link_index = NameIndex("link", ((link.name, link.aliases, link) for link in links))
        catalog = cls(device_index, link_index, tuple(paths))
        catalog._check_references()
        return catalog

    def _check_references(self) -> None:
        for device in self.devices:
            for attr in ("host_link", "default_intra_node_link", "nvlink_link"):
                name = getattr(device, attr)
                if name is not None and self.links.find(name) is None:
                    raise ValueError(f"device {device.name}: {attr} {name!r} is not in the link catalogue")
            twin = None if device.same_silicon_as is None else self.devices.find(device.same_silicon_as)
            if device.same_silicon_as is not None and (twin is None or twin.name != device.same_silicon_as or twin.same_silicon_as):
                raise ValueError(f"device {device.name}: same_silicon_as {device.same_silicon_as!r} must name a catalogue device that has no twin itself")

    def domain_device(self, device: DeviceSpec) -> DeviceSpec:
        """The device the learned layer's training domain counts ``device`` as (its silicon twin, else itself)."""
        return device if device.same_silicon_as is None else self.devices.get(device.same_silicon_as, "same_silicon_as")

    def device(self, name: str, field: str = "cluster.gpu") -> DeviceSpec:
        return self.devices.get(name, field)

    def link(self, name: str, field: str, kinds: tuple[str, ...] | None = None) -> LinkSpec:
        """The link called ``name``; when ``kinds`` is given it must be of one of them."""
        link = self.links.get(name, field)
        if kinds is not None and link.kind not in kinds:
            allowed = ", ".join(x.name for x in self.links_of_kind(*kinds))
            raise SpecError(field, name, f"allowed here: {allowed}")
        return link

    def links_of_kind(self, *kinds: str) -> list[LinkSpec]:
        return [link for link in self.links if link.kind in kinds]


@lru_cache(maxsize=1)
def hardware_catalog() -> HardwareCatalog:
    """The catalogue shipped in ``features/catalog/hardware`` (read once per process)."""
    return HardwareCatalog.from_files(sorted(HARDWARE_DIR.glob("*.json")))


__all__ = [
    "DeviceSpec",
    "LinkSpec",
    "HardwareCatalog",
    "hardware_catalog",
    "normalize_name",
    "DEVICE_KINDS",
    "LINK_KINDS",
    "INTRA_NODE_LINK_KINDS",
    "PRECISIONS",
]
