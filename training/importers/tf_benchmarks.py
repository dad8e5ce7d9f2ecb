"""Measured TensorFlow 1.x training on GPUs, PS/Worker and replicated (``ps_worker_gpu_measured.csv``).

Three public sources typed in from their text tables: TensorFlow's 2017
performance benchmarks page (tf_cnn_benchmarks; May and April 2017 versions),
tensorpack/benchmarks (ResNet-50 on one 8-GPU server) and
e-bug/distributed-tensorflow-benchmarks (InceptionV3 on AWS and Piz Daint).
Each row's ``source`` is its repository (``tensorflow/tensorflow``,
``tensorpack/benchmarks``, ``e-bug/distributed-tensorflow-benchmarks``).

* Models: InceptionV3 -> inception-v3, ResNet-50 -> resnet50 (tf_cnn_benchmarks'
  ResNet-50 is v1, the catalogue's v1.5 differs by a stride), ResNet-152 ->
  resnet152, VGG16 -> vgg16; AlexNet is not in the workload catalogue.
* GPUs: "Tesla K80 (one GK210 die ...)" -> K80 (one die, the unit the
  sources count); "Tesla P100 (DGX-1 ...)" -> P100-SXM2-16GB (the DGX-1's
  part). A P100 or V100 whose variant the source does not state (tensorpack's
  server, Piz Daint's nodes, "8 V100s") is excluded.
* Architectures: one GPU -> single, whatever the variable update. Replicated
  variables inside one host (with or without NCCL, Horovod) ->
  allreduce-local over the GPU's own link (DGX-1: NVLink 1; K80 instances:
  PCIe gen3). Several instances with ``distributed_replicated`` ->
  ps-worker: workers = instances, gpus_per_worker = GPUs per instance,
  parameter_servers as stated (they run on the worker instances, which the
  job spec's PS model, with servers on NICs of their own, does not capture).
  A parameter server inside one host (variables on the CPU or one GPU, reached
  over PCIe, including distributed_replicated on one instance) is excluded:
  the job spec's PS/Worker puts its servers across a network.
* Networks: p2.8xlarge instances -> ethernet-10g, one NIC (AWS's instance
  specification; the sources do not state it: ``interconnect_inferred``).
  p2.xlarge ("High", no rate) and Piz Daint's Cray Aries are not in the link
  catalogue: excluded.
* Duplicates: a value the April 2017 page shares with the May 2017 page
  (``identical_in_other_version``) is excluded in its April copy.
* Step time ``total_gpus x batch_size_per_gpu / throughput`` (images/s, all
  GPUs). software_year the year of the test date (2017; tensorpack's V100
  rows 2019). framework tensorflow, software_stack stock, precision as stated
  (fp32 but for 3 fp16 rows); ``software`` holds the stated versions, the
  variable update and synthetic or real data.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd

from features.hardware import HardwareCatalog
from features.workloads import WorkloadCatalog
from training.importers.common import ImportResult, RowAccounting, catalogues, numbers, read_source, step_times, text

TF_BENCHMARK_COLUMNS = (
    "source", "system", "gpu", "gpus_per_node", "nodes", "total_gpus", "architecture", "parameter_servers",
    "interconnect", "interconnect_inferred", "framework", "model", "batch_size_per_gpu", "precision", "data",
    "throughput", "throughput_unit", "variable_update_as_stated", "test_date", "identical_in_other_version", "notes",
)  # fmt: skip
TF_BENCHMARK_MODELS = {"InceptionV3": "inception-v3", "ResNet-50": "resnet50", "ResNet-152": "resnet152", "VGG16": "vgg16"}
#: The GPU texts of the sources that name a catalogue part.
TF_BENCHMARK_GPUS = {"Tesla K80": "K80", "Tesla P100 (DGX-1": "P100-SXM2-16GB"}
#: The networks the sources' systems run on, where the link catalogue has them.
TF_BENCHMARK_NETWORKS = {"p2.8xlarge": "ethernet-10g"}


def source_repository(source: object) -> str:
    """The repository a row's ``source`` cell names (``tensorflow/tensorflow@6535ed7c270f:...`` -> ``tensorflow/tensorflow``)."""
    return re.split(r"[@:]", str(source), maxsplit=1)[0].strip()


def import_tf_benchmarks(path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None) -> ImportResult:
    """Map the measured TensorFlow PS/Worker and replicated table onto run rows (see the module docstring)."""
    hardware, workloads = catalogues(hardware, workloads)
    rows = RowAccounting(read_source(path, TF_BENCHMARK_COLUMNS, ("parameter_servers", "identical_in_other_version", "test_date")))
    src = rows.source
    n = len(src)
    repository = src["source"].map(source_repository).to_numpy(object)
    version = src["source"].str.extract(r"\((\w+ \d{4}) version", expand=False).fillna(src["test_date"].fillna(""))
    source_id = (
        version.astype(str) + "/" + src["system"].astype(str) + "/" + src["model"].astype(str) + "/" + src["total_gpus"].astype(str)
        + "gpu/bs" + src["batch_size_per_gpu"].astype(str) + "/" + src["variable_update_as_stated"].astype(str) + "/ps"
        + src["parameter_servers"].fillna("").astype(str) + "/" + src["data"].astype(str) + "/" + src["precision"].astype(str)
        + "/" + (src["framework"].astype(str) + src["notes"].fillna("").astype(str)).map(lambda words: hashlib.sha1(words.encode()).hexdigest()[:8])
    ).to_numpy(object)  # fmt: skip

    april_copy = src["identical_in_other_version"].fillna("").str.lower().eq("true").to_numpy() & version.str.startswith("April").to_numpy()
    rows.exclude(april_copy, "same value as the May 2017 version of the page", version.to_numpy(object))
    rows.exclude(pd.Series(source_id).duplicated().to_numpy(), "repeats a row of the source", "same configuration and version")
    model = src["model"].map(TF_BENCHMARK_MODELS).to_numpy(object)
    rows.exclude(pd.isna(model), "model not in the workload catalogue", src["model"].to_numpy(object))
    gpu = np.array([next((name for key, name in TF_BENCHMARK_GPUS.items() if str(g).startswith(key)), None) for g in src["gpu"]], object)
    rows.exclude(pd.isna(gpu), "gpu variant not stated", src["gpu"].to_numpy(object))

    total, per_node, nodes = numbers(src["total_gpus"]), numbers(src["gpus_per_node"]), numbers(src["nodes"])
    rows.exclude(~(total >= 1) | ~(per_node >= 1) | ~(nodes >= 1) | (per_node * nodes != total), "gpu count missing or inconsistent", text("", per_node, " per node x ", nodes, " nodes vs ", total))
    update = src["variable_update_as_stated"].fillna("").astype(str)
    single = total == 1
    replicated = update.str.startswith(("replicated", "horovod")).to_numpy()
    distributed = update.eq("distributed_replicated").to_numpy() & (nodes > 1)
    rows.exclude(
        ~single & ~replicated & ~distributed,
        "parameter server inside one host",
        "variables on the CPU or one GPU over PCIe: the job spec's PS/Worker puts its servers across a network",
    )
    network = np.array([next((name for key, name in TF_BENCHMARK_NETWORKS.items() if key in str(s)), None) for s in src["system"]], object)
    rows.exclude(distributed & pd.isna(network), "network not in the link catalogue", src["interconnect"].fillna(src["interconnect_inferred"]).to_numpy(object))
    servers = numbers(src["parameter_servers"])
    rows.exclude(distributed & ~(servers >= 1), "parameter-server count not stated", src["parameter_servers"].to_numpy(object))

    batch = numbers(src["batch_size_per_gpu"])
    throughput = numbers(src["throughput"])
    rows.exclude(~(batch >= 1) | ~(throughput > 0), "no throughput", "batch or throughput not given")
    rows.exclude(src["throughput_unit"].ne("images/sec").to_numpy(), "unknown throughput unit", src["throughput_unit"].to_numpy(object))

    architecture = np.select([single, distributed, replicated], ["single", "ps-worker", "allreduce-local"], "single").astype(object)
    software = (src["framework"].astype(str) + "; variable_update " + update + "; " + src["data"].astype(str) + " data").to_numpy(object)
    runs = {
        "name": source_id,
        "model": model,
        "batch_size_per_gpu": batch,
        "precision": src["precision"].to_numpy(object),
        "framework": np.full(n, "tensorflow", object),
        "software_stack": np.full(n, "stock", object),
        "software_year": _test_years(src["test_date"]),
        "architecture": architecture,
        "workers": np.where(distributed, nodes, 1.0),
        "gpus_per_worker": per_node,
        "parameter_servers": np.where(distributed, servers, np.nan),
        "nodes": np.where(distributed, nodes, np.nan),
        "gpu": gpu,
        "gpus_per_node": per_node,
        "network": np.where(distributed, network, None),
        "nics_per_node": np.where(distributed, 1.0, np.nan),
        "measured_step_time_s": step_times(total * batch, throughput),
        "source": repository,
        "source_id": source_id,
        "system": src["system"].to_numpy(object),
        "software": software,
    }
    return rows.result(runs, source_id, hardware, workloads)


def _test_years(test_date: pd.Series) -> np.ndarray:
    """The year of each row's test date ("May 2017", "not stated (April 2017 page)"): the TensorFlow build measured."""
    return test_date.fillna("").str.extract(r"(\d{4})", expand=False).astype(float).to_numpy()
