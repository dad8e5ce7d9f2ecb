"""The hardware catalogue: datasheet figures, names, family defaults and links."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from features.catalog_base import normalize_name
from features.errors import UnknownNameError
from features.hardware import HARDWARE_DIR, hardware_catalog

FIXED_LINK_NAMES = (
    "pcie-gen3", "pcie-gen4", "pcie-gen5",
    "nvlink-bridge-turing", "nvlink-bridge-ampere",
    "nvlink-gen2", "nvlink-gen3", "nvlink-gen4", "nvlink-gen5",
    "nvswitch-gen2", "nvswitch-gen3", "nvswitch-gen4", "nvlink-c2c",
    "ethernet-1g", "ethernet-10g", "ethernet-25g", "ethernet-40g",
    "ethernet-100g", "ethernet-200g", "ethernet-400g",
    "infiniband-edr", "infiniband-hdr100", "infiniband-hdr", "infiniband-ndr",
)  # fmt: skip

# Golden datasheet values (dense, no sparsity), FLOP/s and bytes/s; relative tolerance 1e-3.
GOLDEN_DEVICES = {
    # NVIDIA Tesla V100 datasheet (1165301-r5), SXM2 column: 15.7 TFLOPS FP32, 125 TFLOPS tensor, 900 GB/s.
    "V100-SXM2-16GB": {"peak_fp32_flops_per_s": 15.7e12, "peak_fp16_flops_per_s": 125e12, "memory_bw_bytes_per_s": 900e9},
    # Same datasheet, PCIe column: 14 TFLOPS FP32, 112 TFLOPS tensor.
    "V100-PCIE-16GB": {"peak_fp32_flops_per_s": 14e12, "peak_fp16_flops_per_s": 112e12, "memory_bw_bytes_per_s": 900e9},
    # NVIDIA A100 datasheet, 80GB SXM column: TF32 156 (312 sparse), BF16 312 (624 sparse), 2,039 GB/s.
    "A100-SXM4-80GB": {
        "peak_fp32_flops_per_s": 19.5e12,
        "peak_tf32_flops_per_s": 156e12,
        "peak_bf16_flops_per_s": 312e12,
        "memory_bw_bytes_per_s": 2039e9,
    },
    # NVIDIA H100 datasheet, SXM column: BF16 1,979 and FP8 3,958 TFLOPS with sparsity, 3.35 TB/s.
    "H100-SXM5-80GB": {
        "peak_fp32_flops_per_s": 67e12,
        "peak_bf16_flops_per_s": 1979e12 / 2,
        "peak_fp8_flops_per_s": 3958e12 / 2,
        "memory_bw_bytes_per_s": 3.35e12,
    },
    # NVIDIA T4 datasheet: 8.1 TFLOPS FP32, 65 TFLOPS mixed precision, 320 GB/s.
    "T4": {"peak_fp32_flops_per_s": 8.1e12, "peak_fp16_flops_per_s": 65e12, "memory_bw_bytes_per_s": 320e9},
    # GA102 whitepaper, RTX 3090: FP16 tensor with FP32 accumulate 71 TFLOPS (half the FP16-accumulate 142).
    "RTX-3090": {"peak_fp32_flops_per_s": 35.6e12, "peak_fp16_flops_per_s": 71e12, "memory_bw_bytes_per_s": 936e9},
    # NVIDIA H200 datasheet, SXM column: 4.8 TB/s, 141 GB.
    "H200-SXM-141GB": {"memory_bw_bytes_per_s": 4.8e12, "memory_bytes": 141 * 2**30},
}

GOLDEN_LINKS = {
    # PCIe 3.0: 8 GT/s x 16 lanes x 128/130 / 8 bits = 15.754 GB/s per direction.
    "pcie-gen3": 8e9 * 16 * 128 / 130 / 8,
    # PCIe 5.0: 32 GT/s x 16 x 128/130 / 8 = 63.02 GB/s per direction.
    "pcie-gen5": 32e9 * 16 * 128 / 130 / 8,
    # V100 datasheet: NVLink 300 GB/s total = 6 links x 25 GB/s per direction.
    "nvlink-gen2": 150e9,
    # H100 datasheet: NVLink 900 GB/s total, per direction through the NVSwitch 450 GB/s.
    "nvswitch-gen3": 450e9,
    # RTX A6000 datasheet: NVLink bridge 112.5 GB/s bidirectional.
    "nvlink-bridge-ampere": 112.5e9 / 2,
    # Turing whitepaper: TU102 NVLink 100 GB/s total, two links.
    "nvlink-bridge-turing": 50e9,
    # GH200 datasheet: NVLink-C2C 900 GB/s bidirectional.
    "nvlink-c2c": 450e9,
    # 25 Gbit/s / 8 bits; NDR 400 Gbit/s / 8.
    "ethernet-25g": 3.125e9,
    "infiniband-ndr": 50e9,
    "infiniband-hdr100": 12.5e9,
}

# Every NVIDIA name in lambda_throughput.csv (gpu) and mlperf_training_v3.1.csv (accelerator).
CSV_NAMES = {
    "V100 16GB": "V100-SXM2-16GB",
    "V100 SXM2 32GB": "V100-SXM2-32GB",
    "A10": "A10",
    "A100 PCIe 40GB": "A100-PCIE-40GB",
    "A100 PCIe 80GB": "A100-PCIE-80GB",
    "A100 SXM4 40GB": "A100-SXM4-40GB",
    "A100 SXM4 80GB": "A100-SXM4-80GB",
    "H100 PCIe 80GB": "H100-PCIE-80GB",
    "H100 SXM5 80GB": "H100-SXM5-80GB",
    "H200 141GB": "H200-SXM-141GB",
    "GH200 80GB": "GH200-80GB",
    "GH200 96GB": "GH200-96GB",
    "B200": "B200",
    "GTX 1080 Ti": "GTX-1080-Ti",
    "RTX 2080 Ti": "RTX-2080-Ti",
    "RTX 2080 Super Max-Q": "RTX-2080-Super-Max-Q",
    "RTX 2080 Max-Q": "RTX-2080-Max-Q",
    "RTX 2070 Max-Q": "RTX-2070-Max-Q",
    "RTX 3080": "RTX-3080",
    "RTX 3090": "RTX-3090",
    "RTX 4090": "RTX-4090",
    "RTX A6000": "RTX-A6000",
    "RTX 6000 Ada": "RTX-6000-Ada",
    "Titan RTX": "Titan-RTX",
    "Quadro RTX 5000": "Quadro-RTX-5000",
    "Quadro RTX 6000": "Quadro-RTX-6000",
    "Quadro RTX 8000": "Quadro-RTX-8000",
    "NVIDIA H100-SXM5-80GB": "H100-SXM5-80GB",
    "NVIDIA H100-SXM-80GB": "H100-SXM5-80GB",
    "NVIDIA H100-SXM5-96GB": "H100-SXM5-96GB",
    "NVIDIA H100-PCIe-80GB": "H100-PCIE-80GB",
    "NVIDIA A100-PCIe-80GB": "A100-PCIE-80GB",
    "NVIDIA A100 - PCIe - 80 GB": "A100-PCIE-80GB",
    "NVIDIA A100-SXM-40GB": "A100-SXM4-40GB",
    "NVIDIA A10G": "A10G",
    "NVIDIA A30": "A30",
    "NVIDIA L4": "L4",
    "NVIDIA L40": "L40",
    "NVIDIA L40S": "L40S",
    "NVIDIA RTX A5000": "RTX-A5000",
}

# Other names users write.
EXTRA_ALIASES = {
    "Tesla V100-SXM2-16GB": "V100-SXM2-16GB",
    "h100 sxm": "H100-SXM5-80GB",
    "h100 pcie": "H100-PCIE-80GB",
    "P100": "P100-SXM2-16GB",
    "T4": "T4",
    "P4": "P4",
    "Tesla T4": "T4",
    "geforce rtx 3090": "RTX-3090",
    "NVIDIA Quadro RTX 8000": "Quadro-RTX-8000",
}

FAMILY_DEFAULTS = {
    "V100": "V100-SXM2-16GB",
    "A100": "A100-SXM4-80GB",
    "H100": "H100-SXM5-80GB",
    "A800": "A800-SXM4-80GB",
    "H800": "H800-SXM5-80GB",
    "P100": "P100-SXM2-16GB",
    "GH200": "GH200-96GB",
    "H200": "H200-SXM-141GB",
}


@pytest.fixture(scope="module")
def catalog():
    return hardware_catalog()


@pytest.mark.parametrize("name,expected", sorted(GOLDEN_DEVICES.items()))
def test_golden_datasheet_values(catalog, name, expected):
    device = catalog.device(name)
    for attribute, value in expected.items():
        assert getattr(device, attribute) == pytest.approx(value, rel=1e-3), attribute


@pytest.mark.parametrize("name,bw", sorted(GOLDEN_LINKS.items()))
def test_golden_link_bandwidths(catalog, name, bw):
    assert catalog.links.get(name, "link").bw_bytes_per_s == pytest.approx(bw, rel=1e-3)


@pytest.mark.parametrize("alias,expected", sorted({**CSV_NAMES, **EXTRA_ALIASES}.items()))
def test_aliases_resolve(catalog, alias, expected):
    assert catalog.device(alias).name == expected


def _csv_column(path: Path, column: str) -> set[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row[column] for row in csv.DictReader(handle) if row[column]}


def test_every_nvidia_name_in_the_public_tables_resolves(catalog, shared_data):
    lambda_names = _csv_column(shared_data / "lambda_throughput.csv", "gpu")
    mlperf_names = {n for n in _csv_column(shared_data / "mlperf_training_v3.1.csv", "accelerator") if n.startswith("NVIDIA")}
    names = lambda_names | mlperf_names
    assert names <= set(CSV_NAMES), f"names not covered by this test: {sorted(names - set(CSV_NAMES))}"
    for name in names:
        assert catalog.device(name).name == CSV_NAMES[name]


def test_non_nvidia_accelerators_do_not_resolve(catalog):
    assert catalog.devices.find("Intel Gaudi2") is None
    assert catalog.devices.find("TPU-v5e") is None


@pytest.mark.parametrize("family,default", sorted(FAMILY_DEFAULTS.items()))
def test_family_defaults(catalog, family, default):
    assert catalog.device(family).name == default
    assert catalog.device(default).family_default


def test_exactly_one_default_per_family(catalog):
    gpus = [d for d in catalog.devices if d.kind == "gpu"]
    defaults = Counter(d.family for d in gpus if d.family_default)
    families = {d.family for d in gpus}
    assert set(defaults) == families
    assert all(count == 1 for count in defaults.values()), defaults


def test_no_two_names_collide_after_normalization():
    data = json.loads((HARDWARE_DIR / "gpus.json").read_text())
    owner: dict[str, str] = {}
    for entry in data["devices"]:
        for name in [entry["name"], *entry.get("aliases", [])]:
            key = normalize_name(name)
            assert owner.setdefault(key, entry["name"]) == entry["name"], f"{name!r} collides with {owner[key]}"


def test_bf16_on_v100_falls_back_to_fp32(catalog):
    v100 = catalog.device("V100")
    assert v100.peak_bf16_flops_per_s is None
    assert v100.peak_flops_per_s("bf16") == pytest.approx(15.7e12)
    assert v100.peak_flops_per_s("tf32") == pytest.approx(15.7e12)
    # FP8 falls back to the FP16 tensor rate, not to FP32.
    assert v100.peak_flops_per_s("fp8") == pytest.approx(125e12)


def test_fp16_without_a_fast_path_falls_back_to_fp32(catalog):
    # GTX 1080 Ti and P4 run FP16 at 1/64 rate: the catalogue leaves it null.
    for name in ("GTX 1080 Ti", "P4"):
        device = catalog.device(name)
        assert device.peak_flops_per_s("fp16") == device.peak_fp32_flops_per_s


def test_did_you_mean_for_a_truncated_name(catalog):
    with pytest.raises(UnknownNameError) as info:
        catalog.device("V10")
    message = str(info.value)
    assert "V100-SXM2-16GB" in message and "V100-PCIE-16GB" in message
    assert "cluster.gpu" in message


def test_every_gpu_is_documented_and_consistent(catalog):
    for device in (d for d in catalog.devices if d.kind == "gpu"):
        assert device.provenance in ("datasheet", "published"), device.name
        assert len(device.source) > 30, device.name
        assert device.peak_fp32_flops_per_s > 0 and device.memory_bw_bytes_per_s > 0 and device.memory_bytes > 0
        for precision in ("tf32", "fp16", "bf16", "fp8"):
            peak = getattr(device, f"peak_{precision}_flops_per_s")
            assert peak is None or peak >= device.peak_fp32_flops_per_s, (device.name, precision)
        if device.nvlink_link is not None:
            assert catalog.links.get(device.nvlink_link, "nvlink_link").kind == "nvlink"
        if device.form_factor.startswith("SXM"):
            assert device.default_intra_node_link == device.nvlink_link, device.name
        elif device.form_factor in ("PCIe", "laptop"):
            assert device.default_intra_node_link == device.host_link, device.name


def test_only_cpu_devices_record_the_cores_their_processes_share(catalog):
    for device in catalog.devices:
        if device.kind == "gpu":
            assert device.cores is None, device.name
        else:
            assert isinstance(device.cores, int) and device.cores >= 1, device.name
            assert "cores" in device.notes, device.name


def test_fixed_link_names_are_present_and_typed(catalog):
    for name in FIXED_LINK_NAMES:
        link = catalog.links.get(name, "link")
        assert link.latency_s > 0 and link.bw_bytes_per_s > 0
        assert link.source and link.provenance in ("datasheet", "published")
        expected_kind = (
            "pcie" if name.startswith("pcie")
            else "chip-to-chip" if name == "nvlink-c2c"
            else "nvlink" if name.startswith("nv")
            else "network"
        )  # fmt: skip
        assert link.kind == expected_kind, name


def test_links_file_holds_no_testbed_links():
    names = {entry["name"] for entry in json.loads((HARDWARE_DIR / "links.json").read_text())["links"]}
    assert not {n for n in names if n == "shared-memory" or n.startswith("emulated-") or n == "cpu-host"}


@pytest.mark.parametrize(
    "alias,expected",
    [
        ("PCIe", "pcie-gen3"),
        ("PCIe 4.0", "pcie-gen4"),
        ("100GbE", "ethernet-100g"),
        ("Gig Ethernet", "ethernet-1g"),
        ("IB NDR", "infiniband-ndr"),
        ("ndr", "infiniband-ndr"),
        ("HDR100", "infiniband-hdr100"),
        ("IB EDR", "infiniband-edr"),
        ("nvlink4", "nvlink-gen4"),
        ("NVLink-C2C", "nvlink-c2c"),
    ],
)
def test_link_aliases(catalog, alias, expected):
    assert catalog.links.get(alias, "link").name == expected


def test_nvlink_nvswitch_is_not_a_link_name(catalog):
    # Which NVLink "NVLink/NVSwitch" means depends on the GPU; importers decide per GPU.
    assert catalog.links.find("NVLink/NVSwitch") is None


def test_nvswitch_gives_each_gpu_its_full_nvlink_bandwidth(catalog):
    for switch, direct in (("nvswitch-gen3", "nvlink-gen4"), ("nvswitch-gen4", "nvlink-gen5"), ("nvswitch-gen2", "nvlink-gen3")):
        assert catalog.links.get(switch, "l").bw_bytes_per_s == catalog.links.get(direct, "l").bw_bytes_per_s


@pytest.mark.parametrize("part, base, base_link", [
    ("A800-SXM4-80GB", "A100-SXM4-80GB", "nvswitch-gen2"), ("H800-SXM5-80GB", "H100-SXM5-80GB", "nvswitch-gen3"),
    ("A800-PCIE-80GB", "A100-PCIE-80GB", None), ("H800-PCIE-80GB", "H100-PCIE-80GB", None),
])
def test_the_china_market_parts_are_their_base_parts_with_400_GBps_of_nvlink(catalog, part, base, base_link):
    """A800/H800: the A100's/H100's published FLOPS and bandwidth, NVLink cut to 400 GB/s (200 GB/s per direction)."""
    from features.mechanisms import gpu_mechanisms

    d, b = catalog.device(part), catalog.device(base)
    same = ("peak_fp32_flops_per_s", "peak_tf32_flops_per_s", "peak_fp16_flops_per_s", "peak_bf16_flops_per_s",
            "peak_fp8_flops_per_s", "memory_bw_bytes_per_s", "memory_bytes", "host_link", "architecture")
    assert {f: getattr(d, f) for f in same} == {f: getattr(b, f) for f in same}
    mechanisms = gpu_mechanisms()
    assert (mechanisms[part].sm_count, mechanisms[part].boost_clock_hz) == (mechanisms[base].sm_count, mechanisms[base].boost_clock_hz)
    assert d.provenance == "published"
    assert d.same_silicon_as == base and catalog.domain_device(d) is b and catalog.domain_device(b) is b
    if base_link is None:  # PCIe cards: the 400 GB/s bridge has no entry, as the H100 PCIe's has none
        assert d.nvlink_link is None and d.default_intra_node_link == b.default_intra_node_link
    else:
        link = catalog.links.get(d.default_intra_node_link, "link")
        assert link.bw_bytes_per_s == 200e9 and link.latency_s == catalog.links.get(base_link, "link").latency_s
        assert catalog.links.get(base_link, "link").bw_bytes_per_s in (300e9, 450e9)


def test_only_the_bridges_join_a_limited_number_of_gpus(catalog):
    joined = {link.name: link.max_gpus for link in catalog.links if link.max_gpus is not None}
    assert joined == {"nvlink-bridge-turing": 2, "nvlink-bridge-ampere": 2}


@pytest.mark.parametrize("max_gpus", [1, 2.5, "two", True])
def test_a_link_that_joins_fewer_than_two_gpus_or_a_fraction_is_refused(tmp_path, max_gpus):
    from features.hardware import HardwareCatalog

    links = json.loads((HARDWARE_DIR / "links.json").read_text())
    links["links"][0]["max_gpus"] = max_gpus
    (tmp_path / "links.json").write_text(json.dumps(links))
    with pytest.raises(ValueError, match="max_gpus"):
        HardwareCatalog.from_files([tmp_path / "links.json"])
