"""Oneflow-Inc/DLPerf: one cluster of 4 nodes x 8 V100-SXM2-16GB, several frameworks on the same models.

NVLink inside a node (DGX-1-style hybrid cube mesh), 100 Gb/s EDR InfiniBand
between nodes (one adapter per node), as the suite's report states for the
whole cluster; 1 to 32 GPUs.

* Models: ResNet50 v1.5 -> resnet50; BERT-base pretrain -> bert-base
  (sequence 128, as the catalogue's entry); InsightFace is not in the
  workload catalogue.
* Frameworks: MXNet and NGC MXNet -> mxnet, PyTorch and NGC PyTorch ->
  pytorch, NGC TensorFlow 1.x and TensorFlow 2.x -> tensorflow,
  PaddlePaddle -> paddle, OneFlow and MindSpore -> other (the name stays in
  ``software``, with "W/O clip", DALI and XLA where the table says so).
  software_year 2020 (:data:`DLPERF_SOFTWARE_YEAR`);
  software_stack stock (released framework builds and the public
  DeepLearningExamples code), compiled where the table says XLA.
* Precision: fp32 (V100 has no TF32), amp -> fp16; a row without one is
  excluded.
* mixed_precision: half where the suite's script holds the whole model at
  FP16 with FP32 master weights (:func:`dlperf_mixed_precision`):
  DeepLearningExamples' PyTorch BERT (``--fp16``: apex ``opt_level="O2"``),
  MXNet's BERT and ResNet50 v1b (``--dtype float16``: ``net.cast``), NGC
  MXNet's ResNet50 "without amp" (``--dtype float16``; its "with amp" table
  is ``mx.contrib.amp``), MindSpore's ResNet50 (``amp_level="O2"``,
  ``keep_batchnorm_fp32=False``) and BERT (``compute_type`` float16, layer
  norm included); autocast for the rest (TensorFlow's AMP rewrite and Keras
  policy, PaddlePaddle's ``mixed_precision.decorate``, OneFlow's AMP pass,
  DeepLearningExamples' PyTorch ResNet50 at apex ``opt_level="O1"``).
* Rows: the authors' reported values (medians) are mapped; their individual
  repeats are excluded (the median stands for them), and so are summary rows
  that repeat a value reported in another file (``duplicate_of``).
* Step time ``gpus x batch_size_per_gpu / throughput`` (samples, images or
  sentences per second).
* Parallelism: 1 GPU -> single; one node -> allreduce-local; several ->
  allreduce-cluster over infiniband-edr, one NIC per node.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from features.hardware import HardwareCatalog
from features.workloads import WorkloadCatalog
from training.importers.common import ImportResult, RowAccounting, attribute, catalogues, given, map_unique, numbers, read_source, step_times, text

DLPERF_SOURCE = "Oneflow-Inc/DLPerf"
DLPERF_COLUMNS = (
    "source", "file_line", "model", "framework", "implementation_column", "section_heading", "precision", "xla", "gpu", "gpus_total",
    "gpus_per_node", "nodes", "batch_size_per_gpu", "throughput", "throughput_unit", "row_kind", "raw_row", "duplicate_of",
)  # fmt: skip
DLPERF_MODELS = {"ResNet50 v1.5": "resnet50", "BERT-base pretrain": "bert-base"}
DLPERF_PRECISIONS = {"fp32": "fp32", "amp": "fp16"}
DLPERF_SAMPLE_UNITS = ("samples/s", "images/s", "sentences/s")
#: Result files whose FP16 runs train a half-precision model (see the module docstring), by their path in the suite.
DLPERF_HALF_FILES = frozenset({
    "NVIDIADeepLearningExamples/PyTorch/BERT/README.md", "MxNet/BERT/README.md", "MxNet/Classification/RN50v1b/README.md",
    "MindSpore/resnet50v1.5/README.md", "MindSpore/bert/README.md",
})  # fmt: skip
#: NGC MXNet's ResNet50 README: its "without amp" table casts the network (--dtype float16), the "with amp" one autocasts.
DLPERF_NGC_MXNET_RN50 = "NVIDIADeepLearningExamples/MxNet/Classification/RN50v1.5/README.md"
#: The cluster's network, as the suite's report states it: 100 Gb/s EDR InfiniBand, one adapter per node.
DLPERF_NETWORK = "infiniband-edr"
#: The suite's releases, as a year: its Test Report v1.0 and per-framework reports date from 2020 (reports of
#: August 2020; TensorFlow models r2.3.0, PaddlePaddle release 1.8, the README's pinned sources).
DLPERF_SOFTWARE_YEAR = 2020.0


def dlperf_framework(name: object) -> str | None:
    """The job spec's framework of a DLPerf framework name (None where it names none)."""
    lowered = "" if pd.isna(name) else str(name).lower()
    for key, framework in (("mxnet", "mxnet"), ("pytorch", "pytorch"), ("tensorflow", "tensorflow"), ("paddle", "paddle"), ("oneflow", "other"), ("mindspore", "other")):
        if key in lowered:
            return framework
    return None


def dlperf_mixed_precision(source: pd.Series, heading: pd.Series) -> np.ndarray:
    """half or autocast for each row, by the result file it was read from (and NGC MXNet's table heading)."""
    path = source.fillna("").astype(str).str.extract(r"^[^:]*:([^@]*)", expand=False).fillna("")
    cast = path.isin(DLPERF_HALF_FILES) | (path.eq(DLPERF_NGC_MXNET_RN50) & heading.fillna("").str.contains("without amp"))
    return np.where(cast.to_numpy(), "half", "autocast").astype(object)


def import_dlperf(path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None) -> ImportResult:
    """Map DLPerf's V100 cluster table onto run rows (see the module docstring for the rules)."""
    hardware, workloads = catalogues(hardware, workloads)
    rows = RowAccounting(read_source(path, DLPERF_COLUMNS, ("xla", "raw_row", "file_line", "precision")))
    src = rows.source
    n = len(src)
    digest = src["raw_row"].fillna("").map(lambda raw: hashlib.sha1(raw.encode()).hexdigest()[:10])
    source_id = (
        src["source"].astype(str) + ":" + src["file_line"].astype(str) + ":" + digest + ":" + src["precision"].fillna("").astype(str)
        + ":" + src["implementation_column"].fillna("").astype(str)
    ).to_numpy(object)  # fmt: skip

    rows.exclude(src["row_kind"].ne("reported value").to_numpy(), "individual repeat (the reported median is mapped)", src["row_kind"].to_numpy(object))
    rows.exclude(given(src["duplicate_of"]), "repeats a value reported elsewhere in the source", src["duplicate_of"].to_numpy(object))
    rows.exclude(pd.Series(source_id).duplicated().to_numpy(), "repeats a row of the source", "same file line, cell and precision")
    model = src["model"].map(DLPERF_MODELS).to_numpy(object)
    rows.exclude(pd.isna(model), "model not in the workload catalogue", src["model"].to_numpy(object))
    framework = np.array([dlperf_framework(f) for f in src["framework"]], object)
    rows.exclude(pd.isna(framework), "unmapped framework", src["framework"].to_numpy(object))
    precision = src["precision"].map(DLPERF_PRECISIONS).to_numpy(object)
    rows.exclude(pd.isna(precision), "precision not stated", src["precision"].to_numpy(object))
    devices = map_unique(src["gpu"], hardware.devices.find)
    rows.exclude(pd.isna(devices), "unknown gpu", src["gpu"].to_numpy(object))

    total, per_node, nodes = numbers(src["gpus_total"]), numbers(src["gpus_per_node"]), numbers(src["nodes"])
    batch = numbers(src["batch_size_per_gpu"])
    throughput = numbers(src["throughput"])
    rows.exclude(~(total >= 1) | ~(per_node >= 1) | ~(nodes >= 1) | (per_node * nodes != total), "gpu count missing or inconsistent", text("", per_node, " per node x ", nodes, " nodes vs ", total))
    rows.exclude(~(batch >= 1) | (batch != np.round(batch)), "batch size missing or ambiguous", src["batch_size_per_gpu"].to_numpy(object))
    rows.exclude(~(throughput > 0), "no throughput", "throughput not given")
    unit = src["throughput_unit"].fillna("").astype(str)
    rows.exclude(~unit.str.startswith(DLPERF_SAMPLE_UNITS).to_numpy(), "unknown throughput unit", unit.to_numpy(object))

    multi_node = nodes > 1
    software = src["framework"].fillna("").astype(str)
    xla = src["xla"].fillna("").str.lower().eq("yes").to_numpy()
    software = software.where(~xla, software + "; XLA")
    runs = {
        "name": source_id,
        "model": model,
        "batch_size_per_gpu": batch,
        "precision": precision,
        "framework": framework,
        "software_stack": np.where(xla, "compiled", "stock").astype(object),
        "software_year": np.full(n, DLPERF_SOFTWARE_YEAR, float),
        "mixed_precision": dlperf_mixed_precision(src["source"], src["section_heading"]),
        "architecture": np.select([multi_node, total > 1], ["allreduce-cluster", "allreduce-local"], "single").astype(object),
        "workers": np.where(multi_node, nodes, 1.0),
        "gpus_per_worker": per_node,
        "nodes": np.where(multi_node, nodes, np.nan),
        "gpu": attribute(devices, "name"),
        "gpus_per_node": per_node,
        "network": np.where(multi_node, DLPERF_NETWORK, None).astype(object),
        "nics_per_node": np.where(multi_node, 1.0, np.nan),
        "measured_step_time_s": step_times(total * batch, throughput),
        "source": np.full(n, DLPERF_SOURCE, object),
        "source_id": source_id,
        "system": np.full(n, "DLPerf 4 x 8 V100-SXM2-16GB cluster", object),
        "software": software.to_numpy(object),
    }
    return rows.result(runs, source_id, hardware, workloads)
