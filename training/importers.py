"""Importers: public benchmark tables to run tables, every source row accounted for.

Each importer reads a table by path (the data is never copied into the
project) and returns ``(runs, excluded)``: a run table (:mod:`training.runs`)
and, for every source row that did not become a run, the row with a
``reason`` (a fixed category, counted by the CLI) and a ``detail``. Mapped
rows are checked with the run-table rules except that a model may still be
missing from the workload catalogue (:func:`training.runs.load_runs` then
rejects those until the catalogue has them).

Lambda (``lambdal/deeplearning-benchmark``, one machine, 1-8 GPUs, PyTorch NGC)
-------------------------------------------------------------------------------
* Models: resnet50, ssd -> ssd300-resnet50, maskrcnn -> mask-rcnn,
  bert_base_squad -> bert-base-squad, bert_large_squad -> bert-large-squad,
  gnmt, ncf, transformerxlbase -> transformer-xl-base, transformerxllarge ->
  transformer-xl-large, tacotron2, waveglow.
* Step time: where batch and throughput count the same thing (images/s,
  sequences/s, samples/s) ``global_batch_size / throughput``; for tokens/s,
  mel-frames/s and audio-samples/s ``global_batch_size * tokens_per_sample /
  throughput`` with the workload catalogue's ``tokens_per_sample`` (throughput
  units per sample); without it the row is excluded.
* Precision: amp_fp16 -> fp16. fp32 -> tf32 on GPUs with a TF32 tensor-core
  path (Ampere and later), fp32 elsewhere: NGC PyTorch containers run
  convolutions (cuDNN default) and matmuls (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1)
  in TF32, so "fp32" there is TF32 arithmetic.
* Parallelism: 1 GPU -> single; n > 1 -> allreduce-local (workers 1,
  gpus_per_worker n, gpus_per_node n).
* intra_node_link: "NVLink/NVSwitch" -> the GPU's ``nvlink_link`` (A100 ->
  nvswitch-gen2, H100/H200 -> nvswitch-gen3, B200 -> nvswitch-gen4); "NVLink
  (SXM2 hybrid cube mesh)" -> nvlink-gen2; "NVLink bridge" -> the card's bridge
  link; "PCIe" -> the GPU's host PCIe link; empty -> empty (the GPU's default).
* framework pytorch, software_stack stock; collected_at empty (the source
  gives suite versions v0-v2, not dates); rows flagged ``suspect`` excluded.

MLPerf Training v3.1 (``mlcommons/training_results_v3.1``)
----------------------------------------------------------
* Benchmarks: resnet -> resnet50, bert -> bert-large, ssd -> retinanet,
  unet3d, dlrm_dcnv2 -> dlrm-dcnv2, rnnt, maskrcnn -> mask-rcnn,
  llama2_70b_lora -> llama2-70b-lora, gpt3 -> gpt3-175b, stable_diffusion ->
  stable-diffusion, gnn -> rgat.
* Precision: fp8 for bert, gpt3 and llama2_70b_lora on GPUs with an FP8
  tensor path (NVIDIA's implementations run Transformer Engine FP8 layers:
  BERT's ``--use_transformer_engine2`` "Enable FP8 layers" in every H100
  config, NeMo FP8 for the LLMs); fp16 otherwise (mixed precision, as every
  other reference implementation trains).
* Framework: the one NVIDIA's implementation of the benchmark uses (resnet,
  unet3d: mxnet; dlrm_dcnv2: other (HugeCTR); the rest: pytorch, NeMo
  included). The free text is the submitter's container list, often for the
  whole system ("NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", or
  "MxNet NVIDIA Release 22.04" beside BERT); it decides only when it names
  nothing but TensorFlow, JAX/PAX or Paddle.
* Step time ``global_batch_size / train_throughput_samples_per_s``;
  ``repeats`` = n_runs_with_throughput, ``spread_rel`` =
  throughput_rel_spread, ``collected_at`` 2023-11-08 (publication of the
  v3.1 results), ``software`` the framework text, software_stack tuned.
* Parallelism: 1 node -> single or allreduce-local; n_nodes > 1 ->
  allreduce-cluster, workers = nodes = n_nodes, gpus_per_worker =
  gpus_per_node = accelerators_per_node, network and nics_per_node from
  ``host_networking`` (:func:`parse_host_networking`). A step with fewer
  samples than accelerators (GPT-3, large-scale UNet3D/Mask R-CNN: tensor,
  pipeline or spatial parallelism) or a fractional per-GPU batch is excluded:
  the run table describes data-parallel jobs.
* intra_node_link from ``accelerator_interconnect``: mentions NVLink or
  NVSwitch -> the GPU's ``nvlink_link``, except a switch-connected GPU on a
  4-GPU board whose text names no NVSwitch (HGX H100 4-GPU) -> its direct
  nvlink-genN; mentions PCIe -> the GPU's host PCIe link; empty, or NVLink
  on a GPU without one (A10G) -> empty (the GPU's default).
* Excluded: no accelerator (CPU-only submissions), non-NVIDIA accelerators
  (Gaudi2, TPU), rows flagged ``suspect``.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import typer

from features.errors import SpecError
from features.hardware import DeviceSpec, HardwareCatalog, hardware_catalog
from features.workloads import WorkloadCatalog, workload_catalog
from training.runs import RUN_COLUMNS, empty_run_table, reason_field, save_runs, validate_runs

LAMBDA_SOURCE = "lambdal/deeplearning-benchmark"
MLPERF_SOURCE = "mlcommons/training_results_v3.1"
#: Publication date of the MLPerf Training v3.1 results.
MLPERF_V31_DATE = "2023-11-08"

LAMBDA_MODELS = {
    "resnet50": "resnet50",
    "ssd": "ssd300-resnet50",
    "maskrcnn": "mask-rcnn",
    "bert_base_squad": "bert-base-squad",
    "bert_large_squad": "bert-large-squad",
    "gnmt": "gnmt",
    "ncf": "ncf",
    "transformerxlbase": "transformer-xl-base",
    "transformerxllarge": "transformer-xl-large",
    "tacotron2": "tacotron2",
    "waveglow": "waveglow",
}
MLPERF_BENCHMARKS = {
    "resnet": "resnet50",
    "bert": "bert-large",
    "ssd": "retinanet",
    "unet3d": "unet3d",
    "dlrm_dcnv2": "dlrm-dcnv2",
    "rnnt": "rnnt",
    "maskrcnn": "mask-rcnn",
    "llama2_70b_lora": "llama2-70b-lora",
    "gpt3": "gpt3-175b",
    "stable_diffusion": "stable-diffusion",
    "gnn": "rgat",
}
#: Benchmarks whose NVIDIA implementations train with FP8 layers where the GPU has FP8.
MLPERF_FP8_BENCHMARKS = frozenset({"bert", "gpt3", "llama2_70b_lora"})
#: The framework of NVIDIA's implementation, for texts that name several.
MLPERF_NVIDIA_FRAMEWORK = {"resnet": "mxnet", "unet3d": "mxnet", "dlrm_dcnv2": "other"}

#: Throughput units that count the samples a batch counts.
SAMPLE_UNITS = frozenset({"images/s", "sequences/s", "samples/s"})
#: Units that need the workload's tokens_per_sample (units per sample) to become a step time.
PER_SAMPLE_UNITS = frozenset({"tokens/s", "mel-frames/s", "audio-samples/s"})

LAMBDA_COLUMNS = (
    "suite_version", "system_name", "gpu", "n_gpus", "n_nodes", "intra_node_link", "framework", "model",
    "precision", "global_batch_size", "per_gpu_batch_size", "throughput", "throughput_unit", "suspect",
)  # fmt: skip
MLPERF_COLUMNS = (
    "round", "submitter", "system", "benchmark", "accelerator", "accelerators_per_node", "n_nodes",
    "n_accelerators", "accelerator_interconnect", "host_networking", "framework", "global_batch_size",
    "n_runs_with_throughput", "train_throughput_samples_per_s", "throughput_rel_spread", "suspect",
)  # fmt: skip


class ImportResult(NamedTuple):
    """Mapped runs and the source rows that were not mapped, each with a reason."""

    runs: pd.DataFrame
    excluded: pd.DataFrame

    def counts(self) -> dict[str, object]:
        return {
            "rows": len(self.runs) + len(self.excluded),
            "mapped": len(self.runs),
            "excluded": len(self.excluded),
            "excluded_by_reason": self.excluded["reason"].value_counts().to_dict(),
        }


class _Rows:
    """A source table being mapped: one reason slot per row, the first reason kept."""

    def __init__(self, source: pd.DataFrame):
        self.source = source.reset_index(drop=True)
        n = len(self.source)
        self.reason = np.full(n, None, object)
        self.detail = np.full(n, None, object)

    @property
    def ok(self) -> np.ndarray:
        return pd.isna(pd.Series(self.reason, dtype=object)).to_numpy()

    def exclude(self, mask, reason: str, detail) -> None:
        mask = np.asarray(mask, bool) & self.ok
        self.reason[mask] = reason
        self.detail[mask] = np.asarray(detail, object)[mask] if isinstance(detail, (np.ndarray, pd.Series)) else detail

    def result(self, runs: dict[str, np.ndarray], source_id: np.ndarray, hardware, workloads) -> ImportResult:
        """Assemble the run table for the rows still standing and check it against the run rules."""
        ok = self.ok
        table = empty_run_table() if not ok.any() else pd.DataFrame({c: runs.get(c, np.full(len(ok), None, object))[ok] for c in RUN_COLUMNS})
        rows = np.flatnonzero(ok)
        checked = validate_runs(table, hardware=hardware, workloads=workloads, require_known_models=False)
        if len(checked.rejected):
            failed = rows[checked.rejected["source_row"].to_numpy()]
            self.reason[failed] = ["fails run-table rules: " + reason_field(r) for r in checked.rejected["reason"]]
            self.detail[failed] = checked.rejected["reason"].to_numpy()
        excluded = self.source.loc[~self.ok].copy()
        excluded.insert(0, "source_row", np.flatnonzero(~self.ok))
        excluded.insert(1, "source_id", source_id[~self.ok])
        excluded.insert(2, "reason", self.reason[~self.ok])
        excluded.insert(3, "detail", self.detail[~self.ok])
        return ImportResult(checked.accepted, excluded.reset_index(drop=True))


def import_lambda(
    path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None
) -> ImportResult:
    """Map Lambda's throughput table onto run rows (see the module docstring for the rules)."""
    hardware = hardware or hardware_catalog()
    workloads = workloads or workload_catalog()
    rows = _Rows(_read_source(path, LAMBDA_COLUMNS))
    src = rows.source
    n_gpus = pd.to_numeric(src["n_gpus"], errors="coerce").to_numpy(float)
    source_id = (src["suite_version"].astype(str) + "/" + src["system_name"].astype(str) + "/" + src["model"].astype(str) + "/" + src["precision"].astype(str)).to_numpy()

    rows.exclude(_given(src["suspect"]), "suspect in source", src["suspect"].to_numpy(object))
    rows.exclude(pd.to_numeric(src["n_nodes"], errors="coerce").to_numpy(float) != 1, "multi-node row without a network", "n_nodes != 1")
    devices = _map_unique(src["gpu"], hardware.devices.find)
    rows.exclude(pd.isna(devices), "unknown gpu", src["gpu"].to_numpy(object))
    model = src["model"].map(LAMBDA_MODELS).to_numpy(object)
    rows.exclude(pd.isna(model), "unmapped model", src["model"].to_numpy(object))
    rows.exclude(~src["precision"].isin(["amp_fp16", "fp32"]).to_numpy(), "unmapped precision", src["precision"].to_numpy(object))

    global_batch = pd.to_numeric(src["global_batch_size"], errors="coerce").to_numpy(float)
    batch = pd.to_numeric(src["per_gpu_batch_size"], errors="coerce").to_numpy(float)
    batch = np.where(np.isnan(batch), global_batch / n_gpus, batch)
    throughput = pd.to_numeric(src["throughput"], errors="coerce").to_numpy(float)
    rows.exclude(~(batch > 0) | ~(global_batch > 0), "batch size missing", "global or per-GPU batch not given")
    rows.exclude(batch != np.round(batch), "fractional per-GPU batch", _text("global batch ", global_batch, " over ", n_gpus, " GPUs"))
    rows.exclude(~(throughput > 0), "no throughput", "throughput not given")

    unit = src["throughput_unit"].to_numpy(object)
    units_per_sample = _units_per_sample(src["model"].map(LAMBDA_MODELS), workloads)
    per_sample = np.isin(unit, list(PER_SAMPLE_UNITS))
    rows.exclude(~np.isin(unit, list(SAMPLE_UNITS | PER_SAMPLE_UNITS)), "unknown throughput unit", unit)
    rows.exclude(
        per_sample & np.isnan(units_per_sample),
        "per-sample unit needs tokens_per_sample",
        _text("", unit, " for workload ", model, ": no tokens_per_sample in the workload catalogue"),
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        step_time_s = np.where(per_sample, global_batch * units_per_sample, global_batch) / throughput

    intra, intra_problem = _lambda_intra_links(src["intra_node_link"], devices, hardware)
    rows.exclude(pd.notna(intra_problem), "intra-node link not available for the gpu", intra_problem)

    gpu_name = _attribute(devices, "name")
    has_tf32 = ~pd.isna(_attribute(devices, "peak_tf32_flops_per_s"))
    precision = np.where(src["precision"].to_numpy(object) == "amp_fp16", "fp16", np.where(has_tf32, "tf32", "fp32"))
    single = n_gpus == 1
    runs = {
        "name": source_id,
        "model": model,
        "batch_size_per_gpu": batch,
        "precision": precision,
        "framework": np.full(len(src), "pytorch", object),
        "software_stack": np.full(len(src), "stock", object),
        "architecture": np.where(single, "single", "allreduce-local").astype(object),
        "workers": np.ones(len(src)),
        "gpus_per_worker": n_gpus,
        "gpu": gpu_name,
        "gpus_per_node": n_gpus,
        "intra_node_link": intra,
        "measured_step_time_s": step_time_s,
        "source": np.full(len(src), LAMBDA_SOURCE, object),
        "source_id": source_id,
        "system": src["system_name"].to_numpy(object),
        "software": (src["framework"].astype(str) + "; benchmark suite " + src["suite_version"].astype(str)).to_numpy(object),
    }
    return rows.result(runs, source_id, hardware, workloads)


def import_mlperf(
    path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None
) -> ImportResult:
    """Map the MLPerf Training v3.1 table onto run rows (see the module docstring for the rules)."""
    hardware = hardware or hardware_catalog()
    workloads = workloads or workload_catalog()
    rows = _Rows(_read_source(path, MLPERF_COLUMNS))
    src = rows.source
    source_id = (src["round"].astype(str) + "/" + src["submitter"].astype(str) + "/" + src["system"].astype(str) + "/" + src["benchmark"].astype(str)).to_numpy()
    accelerator = src["accelerator"]

    rows.exclude(~_given(accelerator), "no accelerator (CPU-only submission)", src["system"].to_numpy(object))
    devices = _map_unique(accelerator, hardware.devices.find)
    nvidia = accelerator.fillna("").str.upper().str.startswith("NVIDIA").to_numpy()
    rows.exclude(pd.isna(devices) & ~nvidia, "non-NVIDIA accelerator", accelerator.to_numpy(object))
    rows.exclude(_given(src["suspect"]), "suspect in source", src["suspect"].to_numpy(object))
    rows.exclude(pd.isna(devices), "unknown gpu", accelerator.to_numpy(object))
    benchmark = src["benchmark"].to_numpy(object)
    model = src["benchmark"].map(MLPERF_BENCHMARKS).to_numpy(object)
    rows.exclude(pd.isna(model), "unmapped benchmark", benchmark)

    per_node = pd.to_numeric(src["accelerators_per_node"], errors="coerce").to_numpy(float)
    nodes = pd.to_numeric(src["n_nodes"], errors="coerce").to_numpy(float)
    total = pd.to_numeric(src["n_accelerators"], errors="coerce").to_numpy(float)
    rows.exclude(~(per_node >= 1) | ~(nodes >= 1) | (per_node * nodes != total), "accelerator count missing or inconsistent", _text("", per_node, " per node x ", nodes, " nodes vs ", total))
    global_batch = pd.to_numeric(src["global_batch_size"], errors="coerce").to_numpy(float)
    throughput = pd.to_numeric(src["train_throughput_samples_per_s"], errors="coerce").to_numpy(float)
    rows.exclude(~(throughput > 0) | ~(global_batch > 0), "no throughput", "throughput or global batch not given")
    with np.errstate(invalid="ignore", divide="ignore"):
        batch = global_batch / total
    rows.exclude(batch < 1, "fewer samples than accelerators per step", _text("global batch ", global_batch, " on ", total, " accelerators (model or spatial parallelism)"))
    rows.exclude(batch != np.round(batch), "fractional per-GPU batch", _text("global batch ", global_batch, " on ", total, " accelerators"))

    multi_node = nodes > 1
    parsed = src["host_networking"].map(lambda text: parse_host_networking(text)[:2], na_action=None)
    network = np.array([p[0] for p in parsed], object)
    nics = np.array([np.nan if p[1] is None else p[1] for p in parsed], float)
    rows.exclude(multi_node & pd.isna(network), "multi-node row without a network", src["host_networking"].fillna("").to_numpy(object))

    intra = _mlperf_intra_links(src["accelerator_interconnect"], devices, per_node)
    has_fp8 = ~pd.isna(_attribute(devices, "peak_fp8_flops_per_s"))
    precision = np.where(np.isin(benchmark, list(MLPERF_FP8_BENCHMARKS)) & has_fp8, "fp8", "fp16").astype(object)
    framework = np.array([mlperf_framework(t, b) for t, b in zip(src["framework"], benchmark)], object)

    runs = {
        "name": source_id,
        "model": model,
        "batch_size_per_gpu": batch,
        "precision": precision,
        "framework": framework,
        "software_stack": np.full(len(src), "tuned", object),
        "architecture": np.select([multi_node, per_node > 1], ["allreduce-cluster", "allreduce-local"], "single").astype(object),
        "workers": np.where(multi_node, nodes, 1.0),
        "gpus_per_worker": per_node,
        "nodes": np.where(multi_node, nodes, np.nan),
        "gpu": _attribute(devices, "name"),
        "gpus_per_node": per_node,
        "intra_node_link": intra,
        "network": np.where(multi_node, network, None),
        "nics_per_node": np.where(multi_node, nics, np.nan),
        "measured_step_time_s": global_batch / throughput,
        "source": np.full(len(src), MLPERF_SOURCE, object),
        "source_id": source_id,
        "system": src["system"].to_numpy(object),
        "collected_at": np.full(len(src), MLPERF_V31_DATE, object),
        "software": src["framework"].to_numpy(object),
        "repeats": pd.to_numeric(src["n_runs_with_throughput"], errors="coerce").to_numpy(float),
        "spread_rel": pd.to_numeric(src["throughput_rel_spread"], errors="coerce").to_numpy(float),
    }
    return rows.result(runs, source_id, hardware, workloads)


# --- host networking -------------------------------------------------------------------------

_LABEL = re.compile(r"^\s*([A-Za-z+ ]+):\s*(.*)$")
_COUNT = re.compile(r"^\s*(\d+)\s*x\b", re.IGNORECASE)
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*g(?:b|bit)?\s*(?:/\s*s(?:ec)?\b|ps\b)", re.IGNORECASE)
_IB_GENERATIONS = (("hdr100", "infiniband-hdr100"), ("ndr", "infiniband-ndr"), ("hdr", "infiniband-hdr"), ("edr", "infiniband-edr"))
_IB_BY_RATE = {400.0: "infiniband-ndr", 200.0: "infiniband-hdr", 100.0: "infiniband-edr"}
_ETHERNET_RATES = (1.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0)
#: NICs named without a rate: Intel E810-C QSFP controllers are 100GbE parts.
_NIC_RATES = {"e810": 100.0}


def parse_host_networking(text: object) -> tuple[str | None, int | None, str]:
    """The inter-node network link, NICs per node and the rule applied, from MLPerf's free text.

    Rules, in order:

    1. The text is split at commas; a segment labelled "Compute:" is the
       training fabric. Segments labelled only Storage or Management are not;
       a text with nothing else gives no network.
    2. Each remaining segment is read for a NIC count ("8x"), a technology
       (InfiniBand: "IB", "InfiniBand", NDR/HDR/HDR100/EDR; else Ethernet:
       "Ethernet", "GbE", "Gigabit", "Gig") and a rate ("400Gb/s", "100 Gb /
       Sec"; "10GB/Sec" is read as 10 Gb/s, the 10GbE tier). The segment with
       the largest count x rate is the fabric.
    3. InfiniBand: the named generation, else the generation of the rate
       (400 NDR, 200 HDR, 100 EDR). Ethernet: the tier of the rate.
    4. A technology without a rate ("Infiniband", "Ethernet") gives no
       network: guessing a generation would invent the bandwidth the model is
       meant to learn from.
    """
    if text is None or (isinstance(text, float) and np.isnan(text)) or not str(text).strip():
        return None, None, "empty"
    segments = []
    for part in str(text).split(","):
        match = _LABEL.match(part)
        label = match.group(1).strip().lower() if match else ""
        body = match.group(2) if match else part
        segments.append((label, body))
    compute = [body for label, body in segments if "compute" in label]
    if compute:
        candidates = compute
    else:
        candidates = [body for label, body in segments if not label or not re.search(r"storage|management", label)]
    if not candidates:
        return None, None, "only a management or storage network"
    best: tuple[float, str, int] | None = None
    for body in candidates:
        parsed = _parse_segment(body)
        if parsed is None:
            continue
        link, count, rate = parsed
        if best is None or count * rate > best[0]:
            best = (count * rate, link, count)
    if best is None:
        return None, None, "no rate given"
    return best[1], best[2], "parsed"


def _parse_segment(body: str) -> tuple[str, int, float] | None:
    lowered = body.lower()
    count_match = _COUNT.match(body)
    count = int(count_match.group(1)) if count_match else 1
    rate_match = _RATE.search(body)
    rate = float(rate_match.group(1)) if rate_match else None
    if rate is None and re.search(r"\bgig(abit)?\b", lowered):
        rate = 1.0
    if rate is None:
        rate = next((r for nic, r in _NIC_RATES.items() if nic in lowered), None)
    infiniband = re.search(r"\bib\b|infiniband|\b(ndr|hdr|edr)\d*\b", lowered) is not None
    if infiniband:
        link = next((name for key, name in _IB_GENERATIONS if re.search(rf"\b{key}\b", lowered)), None)
        if link is None and rate is not None:
            link = _IB_BY_RATE.get(rate)
        return None if link is None or rate is None else (link, count, rate)
    if rate is not None and rate in _ETHERNET_RATES and re.search(r"ethernet|gbe|gig|\be810", lowered):
        return f"ethernet-{rate:g}g", count, rate
    return None


def mlperf_framework(text: object, benchmark: str) -> str:
    """The framework of an MLPerf row (see the module docstring).

    Closed-division submissions on NVIDIA GPUs run NVIDIA's implementation of
    the benchmark, whatever container list the submitter typed ("MxNet NVIDIA
    Release 22.04" beside BERT, which NVIDIA implements in PyTorch only), so
    the benchmark decides; only a text naming nothing but frameworks NVIDIA
    does not implement in (TensorFlow, JAX/PAX, Paddle) overrides it.
    """
    lowered = "" if text is None or (isinstance(text, float) and np.isnan(text)) else str(text).lower()
    others = [name for pattern, name in ((r"tensorflow", "tensorflow"), (r"\bpax\b|\bjax\b", "jax"), (r"paddle", "paddle")) if re.search(pattern, lowered)]
    nvidia_named = re.search(r"pytorch|nemo|mxnet|hugectr|merlin", lowered) is not None
    if others and not nvidia_named:
        return others[0]
    return MLPERF_NVIDIA_FRAMEWORK.get(benchmark, "pytorch")


# --- links ------------------------------------------------------------------------------------


def _lambda_intra_links(labels: pd.Series, devices: np.ndarray, hardware: HardwareCatalog) -> tuple[np.ndarray, np.ndarray]:
    """Lambda's intra_node_link label for each row's GPU, and a problem text where it does not fit."""
    keys = pd.DataFrame({"label": labels.fillna("").astype(str), "gpu": _attribute(devices, "name")}).astype(object)
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(keys.fillna("")))
    links, problems = [], []
    for label, gpu in uniques:
        device = hardware.devices.find(gpu) if gpu else None
        link, problem = _lambda_link(label, device)
        links.append(link)
        problems.append(problem)
    return np.array(links, object)[codes], np.array(problems, object)[codes]


def _lambda_link(label: str, device: DeviceSpec | None) -> tuple[str | None, str | None]:
    if not label:
        return None, None
    if device is None:
        return None, None  # the row is already excluded for its GPU
    nvlink = device.nvlink_link
    if label == "NVLink/NVSwitch":
        return (nvlink, None) if nvlink else (None, f"{device.name} has no NVLink")
    if label == "NVLink (SXM2 hybrid cube mesh)":
        return ("nvlink-gen2", None) if device.nvlink_generation == 2 and nvlink else (None, f"{device.name} is no SXM2 part")
    if label == "NVLink bridge":
        return (nvlink, None) if nvlink and nvlink.startswith("nvlink-bridge") else (None, f"{device.name} takes no NVLink bridge")
    if label == "PCIe":
        return _pcie_link(device), None
    return None, f"unknown label {label!r}"


def _pcie_link(device: DeviceSpec) -> str:
    return device.host_link if device.host_link.startswith("pcie") else f"pcie-gen{device.pcie_generation}"


def _mlperf_intra_links(texts: pd.Series, devices: np.ndarray, per_node: np.ndarray) -> np.ndarray:
    """The intra-node link each MLPerf row's accelerator_interconnect text names for its GPU (None: the GPU's default)."""
    out = np.full(len(texts), None, object)
    for i, (text, device) in enumerate(zip(texts.fillna("").astype(str).str.lower(), devices)):
        if device is None or (isinstance(device, float) and np.isnan(device)):
            continue
        if "nvlink" in text or "nvswitch" in text:
            nvlink = device.nvlink_link
            if nvlink and nvlink.startswith("nvswitch") and "nvswitch" not in text and per_node[i] <= 4:
                nvlink = f"nvlink-gen{device.nvlink_generation}"
            out[i] = nvlink
        elif "pcie" in text:
            out[i] = _pcie_link(device)
    return out


# --- helpers ----------------------------------------------------------------------------------


def _read_source(path: str | Path, columns: tuple[str, ...]) -> pd.DataFrame:
    path = Path(path)
    try:
        frame = pd.read_csv(path, dtype={"suspect": str, "intra_node_link": str, "host_networking": str, "framework": str})
    except (OSError, ValueError) as exc:
        raise SpecError("path", str(path), f"cannot read it as CSV ({exc})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SpecError("path", str(path), f"the table lacks columns {', '.join(missing)}")
    return frame


def _given(series: pd.Series) -> np.ndarray:
    return (series.notna() & (series.astype(str).str.strip() != "")).to_numpy()


def _map_unique(series: pd.Series, lookup) -> np.ndarray:
    """``lookup(value)`` for every row, called once per distinct value (None where missing)."""
    codes, uniques = pd.factorize(series.astype(object), use_na_sentinel=True)
    found = [lookup(str(u)) for u in uniques]
    return np.array(found + [None], object)[codes]


def _attribute(devices: np.ndarray, attribute: str) -> np.ndarray:
    return np.array([None if d is None else getattr(d, attribute) for d in devices], object)


def _text(*parts) -> np.ndarray:
    """Row-wise concatenation of strings and arrays, for detail messages."""
    n = max(len(p) for p in parts if isinstance(p, np.ndarray))
    out = pd.Series([""] * n, dtype=object)
    for part in parts:
        if isinstance(part, np.ndarray):
            series = pd.Series(part, dtype=object)
            out = out + series.map(lambda v: f"{v:g}" if isinstance(v, float) else str(v))
        else:
            out = out + part
    return out.to_numpy(object)


def _units_per_sample(models: pd.Series, workloads: WorkloadCatalog) -> np.ndarray:
    def lookup(name: str):
        spec = workloads.workloads.find(name)
        return None if spec is None else spec.tokens_per_sample

    values = _map_unique(models, lookup)
    return np.array([np.nan if v is None else float(v) for v in values], float)


# --- command line -----------------------------------------------------------------------------


class Source(str, Enum):
    lambda_ = "lambda"
    mlperf = "mlperf"


app = typer.Typer(add_completion=False)


@app.command()
def main(
    source: Source = typer.Argument(..., help="Which table: lambda or mlperf."),
    path: Path = typer.Argument(..., help="The source CSV (e.g. ../shared/data/lambda_throughput.csv)."),
    out: Path = typer.Option(None, "--out", help="Write the mapped runs here (.csv or .parquet)."),
    excluded: Path = typer.Option(None, "--excluded", help="Write the excluded rows, with reasons, here (.csv)."),
) -> None:
    """Map a public benchmark table onto run rows and print what was mapped and why the rest was not.

    Example: python -m training.importers lambda ../shared/data/lambda_throughput.csv --out runs_lambda.csv
    """
    try:
        importer = import_lambda if source is Source.lambda_ else import_mlperf
        result = importer(path)
        if out is not None:
            save_runs(result.runs, out)
        if excluded is not None:
            result.excluded.to_csv(excluded, index=False)
    except SpecError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    counts = result.counts()
    typer.echo(f"{counts['rows']} rows: {counts['mapped']} mapped, {counts['excluded']} excluded")
    for reason, count in counts["excluded_by_reason"].items():
        typer.echo(f"  excluded {count:5d}  {reason}")
    catalogue = workload_catalog()
    absent = sorted({m for m in result.runs["model"] if catalogue.workloads.find(m) is None})
    if absent:
        n_absent = int(result.runs["model"].isin(absent).sum())
        typer.echo(f"  note: {n_absent} mapped rows name models not yet in the workload catalogue ({', '.join(absent)}); load_runs rejects them until they are added")
    if out is not None:
        typer.echo(f"wrote {out}")


if __name__ == "__main__":
    app()
