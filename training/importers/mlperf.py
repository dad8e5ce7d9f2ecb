"""MLPerf Training results (``mlcommons/training_results_v0.7`` ... ``_v3.1``), one row per submission and benchmark.

Two tables share these rules: ``mlperf_training_v3.1.csv`` (:func:`import_mlperf`)
and ``mlperf_training_v0.7-v3.0.csv`` (:func:`import_mlperf_rounds`).

* Benchmarks: resnet -> resnet50, bert -> bert-large-unpadded (every GPU
  submission removes the padding: NVIDIA's code runs ``--unpad`` from v0.7
  on), ssd -> retinanet-fused-loss (v2.0
  on; before it, ssd was SSD-ResNet34, which the catalogue lacks; every
  configuration of NVIDIA's implementation passes ``--apex-focal-loss``, the
  one-kernel focal loss), unet3d,
  dlrm_dcnv2 -> dlrm-dcnv2, dlrm (v0.7-v2.1, the original DLRM: one-hot
  Criteo 1TB, dot interaction) -> dlrm-dot, rnnt, maskrcnn -> mask-rcnn,
  gnmt (v0.7), stable_diffusion -> stable-diffusion,
  gnn -> rgat. Not mapped, with the reason: minigo (reinforcement
  learning), transformer (v0.7, Transformer-big); gpt3 and llama2_70b_lora
  rows are large-model layout jobs (tensor and pipeline parallel), described
  from their own configurations (``mlperf_llm_configs.csv``) rather than as
  data-parallel runs.
* Precision: fp8 for bert, gpt3 and llama2_70b_lora on GPUs with an FP8
  tensor path (NVIDIA's implementations run Transformer Engine FP8 layers:
  BERT's ``--use_transformer_engine2`` "Enable FP8 layers" in every H100
  config, NeMo FP8 for the LLMs); fp16 otherwise (mixed precision, as every
  other reference implementation trains).
* Framework: the one NVIDIA's implementation of the benchmark uses (resnet,
  unet3d: mxnet; dlrm and dlrm_dcnv2: other (HugeCTR); the rest: pytorch, NeMo
  included; the original DLRM also had NVIDIA's PyTorch implementation in
  v0.7, which a text naming PyTorch and no other framework picks). The free text is the submitter's container list, often for the
  whole system ("NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", or
  "MxNet NVIDIA Release 22.04" beside BERT); it decides only when it names
  nothing but TensorFlow, JAX/PAX or Paddle.
* Accelerator names: a power or cooling qualifier ("(400W)", "(500W)",
  "CTS") is dropped, so the part maps to its datasheet entry (the peak
  figures are the datasheet's at any of these power limits); a bare family
  name ("NVIDIA A100", "Nvidia Tesla V100") whose family has several
  variants is excluded: the variant is not stated.
* Mask R-CNN throughput is rescaled to COCO epochs. NVIDIA's implementation
  logs ``train_samples`` as the length of its iteration-based batch sampler,
  which is ``SOLVER.MAX_ITER`` (40000; 20000, 42000, 80000 or 360000 in some
  configurations), not a count of images, while its evaluation events count
  true epochs of COCO (``tools/train_mlperf.py`` and
  ``data/samplers/iteration_based_batch_sampler.py`` in
  mlcommons/training_results_v3.1, NVIDIA/benchmarks/maskrcnn). Progress read
  as epochs x ``train_samples`` is low by ``train_samples`` / 117,266 (the
  train2017 images with annotations that it trains on, the count TPU-v4 rows
  log): Dell's A100-SXM-40GB systems of v2.1 log 80000 at 4 GPUs and 40000
  at 8, 56.8 and 28.4 images/s per GPU as read, 83.2 and 83.1 once rescaled.
  Rows that log a COCO image count (117,266 or 118,287) keep their value.
* Step time ``global_batch_size / train_throughput_samples_per_s``;
  ``repeats`` = n_runs_with_throughput, ``spread_rel`` =
  throughput_rel_spread, ``collected_at`` the round's publication date,
  ``software_year`` its year (submissions name that year's NGC releases),
  ``software`` the framework text, software_stack tuned.
* Parallelism: 1 node -> single or allreduce-local; n_nodes > 1 ->
  allreduce-cluster, workers = nodes = n_nodes, gpus_per_worker =
  gpus_per_node = accelerators_per_node, network and nics_per_node from
  ``host_networking`` (:func:`training.importers.networking.parse_host_networking`).
  A step with fewer samples than accelerators (GPT-3, large-scale
  UNet3D/Mask R-CNN: tensor, pipeline or spatial parallelism) or a fractional
  per-GPU batch is excluded: the run table describes data-parallel jobs.
* intra_node_link from ``accelerator_interconnect``
  (:func:`training.importers.networking.interconnect_links`).
* Excluded: a system whose name counts its nodes ("2xC4140": two Dell
  C4140 servers) where its description gives another count (v0.7's
  2xC4140 and 4xC4140 describe one node of 4 V100s, so their per-GPU
  throughput read 2 and 4 times the one-node C4140's); no accelerator
  (CPU-only submissions), non-NVIDIA accelerators
  (Gaudi, TPU, IPU, Ascend), rows flagged ``suspect`` (no derivable
  throughput, unknown accelerator count, open division, implausible
  per-accelerator throughput), and a row whose throughput repeats an earlier
  round's row of the same system and benchmark exactly (reused logs).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from features.hardware import HardwareCatalog
from features.workloads import WorkloadCatalog
from training.importers.common import (
    ImportResult, RowAccounting, attribute, catalogues, given, has_precision, joined, map_unique, numbers,
    read_source, step_times, text,
)  # fmt: skip
from training.importers.networking import interconnect_links, parse_host_networking

MLPERF_SOURCE = "mlcommons/training_results_v3.1"
#: Every MLPerf Training round's results repository starts so.
MLPERF_SOURCE_PREFIX = "mlcommons/training_results"
#: Publication date of the MLPerf Training v3.1 results.
MLPERF_V31_DATE = "2023-11-08"
#: Publication dates of the MLPerf Training rounds (MLCommons result announcements).
MLPERF_ROUND_DATES = {
    "v0.7": "2020-07-29",
    "v1.0": "2021-06-30",
    "v1.1": "2021-12-01",
    "v2.0": "2022-06-29",
    "v2.1": "2022-11-09",
    "v3.0": "2023-06-27",
    "v3.1": MLPERF_V31_DATE,
}

MLPERF_BENCHMARKS = {
    "resnet": "resnet50",
    "bert": "bert-large-unpadded",
    "ssd": "retinanet-fused-loss",
    "unet3d": "unet3d",
    "dlrm_dcnv2": "dlrm-dcnv2",
    "dlrm": "dlrm-dot",
    "rnnt": "rnnt",
    "maskrcnn": "mask-rcnn",
    "llama2_70b_lora": "llama2-70b-lora",
    "gpt3": "gpt3-175b",
    "stable_diffusion": "stable-diffusion",
    "gnn": "rgat",
    "gnmt": "gnmt",
}
#: Benchmarks of the earlier rounds left out, and why.
MLPERF_UNMAPPED_BENCHMARKS = {
    "minigo": "reinforcement learning (self-play): not a fixed-batch training step",
    "transformer": "Transformer-big (WMT17): not in the workload catalogue",
}
#: Benchmarks trained with tensor and pipeline parallelism: described from their layouts, not as data-parallel runs.
MLPERF_LARGE_MODEL_BENCHMARKS = {
    "gpt3": "GPT-3 175B: a tensor/pipeline-parallel layout (mlperf_llm_configs.csv), not a data-parallel run",
    "llama2_70b_lora": "Llama 2 70B LoRA: a tensor/pipeline-parallel layout, not a data-parallel run",
}
#: Rounds whose "ssd" is SSD-ResNet34 (300x300), before RetinaNet replaced it in v2.0.
SSD_RESNET34_ROUNDS = frozenset({"v0.7", "v1.0", "v1.1"})
#: Benchmarks whose NVIDIA implementations train with FP8 layers where the GPU has FP8.
MLPERF_FP8_BENCHMARKS = frozenset({"bert", "gpt3", "llama2_70b_lora"})
#: The framework of NVIDIA's implementation, for texts that name several.
MLPERF_NVIDIA_FRAMEWORK = {"resnet": "mxnet", "unet3d": "mxnet", "dlrm_dcnv2": "other", "dlrm": "other"}
#: Benchmarks NVIDIA implemented twice: the second framework, taken where the text names it and no other.
MLPERF_NVIDIA_SECOND_FRAMEWORK = {"dlrm": "pytorch"}

MLPERF_COLUMNS = (
    "round", "submitter", "system", "benchmark", "accelerator", "accelerators_per_node", "n_nodes",
    "n_accelerators", "accelerator_interconnect", "host_networking", "framework", "global_batch_size",
    "n_runs_with_throughput", "train_throughput_samples_per_s", "throughput_rel_spread", "suspect",
    "train_samples_per_epoch",
)  # fmt: skip
#: Images in one Mask R-CNN training epoch: COCO train2017 images with annotations.
MASKRCNN_EPOCH_IMAGES = 117_266
#: ``train_samples`` values of Mask R-CNN logs that count images (the rest count iterations).
COCO_IMAGE_COUNTS = frozenset({117_266, 118_287})

_QUALIFIER = re.compile(r"\s*\(\s*\d+\s*W\s*\)|\s+CTS\b", re.IGNORECASE)
_VARIANT = re.compile(r"\d+\s*G|pcie|sxm", re.IGNORECASE)


def import_mlperf(
    path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None
) -> ImportResult:
    """Map the MLPerf Training v3.1 table onto run rows (see the module docstring for the rules)."""
    return _import(path, hardware, workloads, MLPERF_SOURCE, earlier_rounds=False)


def import_mlperf_rounds(
    path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None
) -> ImportResult:
    """Map the MLPerf Training v0.7-v3.0 table onto run rows (see the module docstring for the rules)."""
    return _import(path, hardware, workloads, None, earlier_rounds=True)


_NODES_IN_NAME = re.compile(r"^(\d+)x(.+)$", re.IGNORECASE)
_PART_NUMBER = re.compile(r"[A-Z]+\d+", re.IGNORECASE)


def named_nodes(systems: pd.Series, accelerators: pd.Series) -> np.ndarray:
    """The node count a system's name states ("2xXE8545x4A100-SXM-80GB": 2), NaN where it states none.

    A leading ``<k>x`` counts nodes when a server's name follows it and
    accelerators when the accelerator's own part number does
    ("8xA100_80GB-baseline", "2xa30_ngc22.04_mxnet": no node count).
    """
    out = np.full(len(systems), np.nan)
    for i, (system, accelerator) in enumerate(zip(systems.fillna(""), accelerators.fillna(""))):
        match = _NODES_IN_NAME.match(str(system))
        part = _PART_NUMBER.search(str(accelerator).upper().replace("NVIDIA", "").replace("TESLA", ""))
        if match and part and not match.group(2).upper().startswith(part.group(0)):
            out[i] = float(match.group(1))
    return out


def _import(path, hardware, workloads, source: str | None, earlier_rounds: bool) -> ImportResult:
    hardware, workloads = catalogues(hardware, workloads)
    rows = RowAccounting(read_source(path, MLPERF_COLUMNS, ("round", "accelerator", "accelerator_interconnect")))
    src = rows.source
    n = len(src)
    source_id = joined(src, ["round", "submitter", "system", "benchmark"])
    # One source per round (its results repository), so ids need only be unique within a round.
    sources = np.full(n, source, object) if source else (MLPERF_SOURCE_PREFIX + "_" + src["round"].astype(str)).to_numpy(object)
    accelerator = src["accelerator"]
    names = accelerator.fillna("").str.replace(_QUALIFIER, "", regex=True).str.strip() if earlier_rounds else accelerator

    rows.exclude(~given(accelerator), "no accelerator (CPU-only submission)", src["system"].to_numpy(object))
    devices = map_unique(names, hardware.devices.find)
    nvidia = accelerator.fillna("").str.upper().str.startswith("NVIDIA").to_numpy()
    rows.exclude(pd.isna(devices) & ~nvidia, "non-NVIDIA accelerator", accelerator.to_numpy(object))
    rows.exclude(given(src["suspect"]), "suspect in source", src["suspect"].to_numpy(object))
    rows.exclude(pd.isna(devices), "unknown gpu", accelerator.to_numpy(object))
    if earlier_rounds:
        rows.exclude(_variant_unstated(names, devices, hardware), "gpu variant not stated", accelerator.to_numpy(object))
    benchmark = src["benchmark"].to_numpy(object)
    if earlier_rounds:
        unmapped = src["benchmark"].map(MLPERF_UNMAPPED_BENCHMARKS).to_numpy(object)
        rows.exclude(pd.notna(unmapped), "benchmark not in the workload catalogue", unmapped)
        ssd34 = (src["benchmark"] == "ssd").to_numpy() & src["round"].isin(SSD_RESNET34_ROUNDS).to_numpy()
        rows.exclude(ssd34, "benchmark not in the workload catalogue", "ssd before v2.0 is SSD-ResNet34 (300x300)")
    large = src["benchmark"].map(MLPERF_LARGE_MODEL_BENCHMARKS).to_numpy(object)
    rows.exclude(pd.notna(large), "large-model layout job (tensor/pipeline parallel)", large)
    model = src["benchmark"].map(MLPERF_BENCHMARKS).to_numpy(object)
    rows.exclude(pd.isna(model), "unmapped benchmark", benchmark)

    per_node = numbers(src["accelerators_per_node"])
    nodes = numbers(src["n_nodes"])
    total = numbers(src["n_accelerators"])
    rows.exclude(~(per_node >= 1) | ~(nodes >= 1) | (per_node * nodes != total), "accelerator count missing or inconsistent", text("", per_node, " per node x ", nodes, " nodes vs ", total))
    named = named_nodes(src["system"], names)
    rows.exclude(~np.isnan(named) & (named != nodes), "node count contradicts the system's name",
                 text("system ", src["system"].to_numpy(object), " describes ", nodes, " node(s)"))
    global_batch = numbers(src["global_batch_size"])
    throughput = maskrcnn_throughput(src["benchmark"].to_numpy(object), numbers(src["train_throughput_samples_per_s"]), numbers(src["train_samples_per_epoch"]))
    rows.exclude(~(throughput > 0) | ~(global_batch > 0), "no throughput", "throughput or global batch not given")
    with np.errstate(invalid="ignore", divide="ignore"):
        batch = global_batch / total
    rows.exclude(batch < 1, "fewer samples than accelerators per step", text("global batch ", global_batch, " on ", total, " accelerators (model or spatial parallelism)"))
    rows.exclude(batch != np.round(batch), "fractional per-GPU batch", text("global batch ", global_batch, " on ", total, " accelerators"))
    if earlier_rounds:
        repeated = pd.DataFrame({"s": src["system"], "b": src["benchmark"], "t": throughput}).duplicated(keep="first").to_numpy()
        rows.exclude(repeated & ~np.isnan(throughput), "repeats an earlier round's value (reused logs)", src["round"].to_numpy(object))

    multi_node = nodes > 1
    parsed = src["host_networking"].map(lambda words: parse_host_networking(words)[:2], na_action=None)
    network = np.array([p[0] for p in parsed], object)
    nics = np.array([np.nan if p[1] is None else p[1] for p in parsed], float)
    rows.exclude(multi_node & pd.isna(network), "multi-node row without a network", src["host_networking"].fillna("").to_numpy(object))

    intra = interconnect_links(src["accelerator_interconnect"], devices, per_node)
    precision = np.where(np.isin(benchmark, list(MLPERF_FP8_BENCHMARKS)) & has_precision(devices, "fp8"), "fp8", "fp16").astype(object)
    framework = np.array([mlperf_framework(t, b) for t, b in zip(src["framework"], benchmark)], object)
    dates = src["round"].map(MLPERF_ROUND_DATES).to_numpy(object) if earlier_rounds else np.full(n, MLPERF_V31_DATE, object)

    runs = {
        "name": source_id,
        "model": model,
        "batch_size_per_gpu": batch,
        "precision": precision,
        "framework": framework,
        "software_stack": np.full(n, "tuned", object),
        # Submissions run the NGC release of the months before the round (v0.7: 20.06, v3.1: 23.09).
        "software_year": np.array([float(str(d)[:4]) for d in dates], float),
        "architecture": np.select([multi_node, per_node > 1], ["allreduce-cluster", "allreduce-local"], "single").astype(object),
        "workers": np.where(multi_node, nodes, 1.0),
        "gpus_per_worker": per_node,
        "nodes": np.where(multi_node, nodes, np.nan),
        "gpu": attribute(devices, "name"),
        "gpus_per_node": per_node,
        "intra_node_link": intra,
        "network": np.where(multi_node, network, None),
        "nics_per_node": np.where(multi_node, nics, np.nan),
        "measured_step_time_s": step_times(global_batch, throughput),
        "source": sources,
        "source_id": source_id,
        "system": src["system"].to_numpy(object),
        "collected_at": dates,
        "software": src["framework"].to_numpy(object),
        "repeats": numbers(src["n_runs_with_throughput"]),
        "spread_rel": numbers(src["throughput_rel_spread"]),
    }
    return rows.result(runs, source_id, hardware, workloads)


def maskrcnn_throughput(benchmark: np.ndarray, throughput: np.ndarray, logged_epoch_samples: np.ndarray) -> np.ndarray:
    """Throughput in images/s, Mask R-CNN rows rescaled from logged iterations to COCO epochs (module docstring)."""
    counts_iterations = (benchmark == "maskrcnn") & (logged_epoch_samples > 0) & ~np.isin(logged_epoch_samples, list(COCO_IMAGE_COUNTS))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts_iterations, throughput * MASKRCNN_EPOCH_IMAGES / logged_epoch_samples, throughput)


def _variant_unstated(names: pd.Series, devices: np.ndarray, hardware: HardwareCatalog) -> np.ndarray:
    """True where the name gives no memory size or form factor and the device's family has several variants."""
    families: dict[str, int] = {}
    for device in hardware.devices:
        families[device.family] = families.get(device.family, 0) + 1
    stated = names.fillna("").str.contains(_VARIANT).to_numpy()
    several = np.array([d is not None and families.get(d.family, 0) > 1 for d in devices], bool)
    return ~stated & several


def mlperf_framework(words: object, benchmark: str) -> str:
    """The framework of an MLPerf row (see the module docstring).

    Closed-division submissions on NVIDIA GPUs run NVIDIA's implementation of
    the benchmark, whatever container list the submitter typed ("MxNet NVIDIA
    Release 22.04" beside BERT, which NVIDIA implements in PyTorch only), so
    the benchmark decides; only a text naming nothing but frameworks NVIDIA
    does not implement in (TensorFlow, JAX/PAX, Paddle) overrides it, or,
    for a benchmark NVIDIA implemented twice, nothing but the second one.
    """
    lowered = "" if words is None or (isinstance(words, float) and np.isnan(words)) else str(words).lower()
    others = [name for pattern, name in ((r"tensorflow", "tensorflow"), (r"\bpax\b|\bjax\b", "jax"), (r"paddle", "paddle")) if re.search(pattern, lowered)]
    nvidia_named = re.search(r"pytorch|nemo|mxnet|hugectr|merlin", lowered) is not None
    if others and not nvidia_named:
        return others[0]
    named = set(re.findall(r"pytorch|nemo|mxnet|hugectr|merlin|tensorflow", lowered))
    if benchmark in MLPERF_NVIDIA_SECOND_FRAMEWORK and named == {MLPERF_NVIDIA_SECOND_FRAMEWORK[benchmark]}:
        return MLPERF_NVIDIA_SECOND_FRAMEWORK[benchmark]
    return MLPERF_NVIDIA_FRAMEWORK.get(benchmark, "pytorch")


def is_mlperf(sources: np.ndarray) -> np.ndarray:
    """True for rows from any MLPerf Training round."""
    return np.char.startswith(np.asarray(sources, dtype=str), MLPERF_SOURCE_PREFIX)
