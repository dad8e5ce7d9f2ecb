"""Lambda's PyTorch GPU benchmark (``lambdal/deeplearning-benchmark``): one machine, 1-8 GPUs, NGC PyTorch.

* Models: resnet50, ssd -> ssd300-resnet50, maskrcnn -> mask-rcnn,
  bert_base_squad -> bert-base-squad, bert_large_squad -> bert-large-squad,
  gnmt, ncf, transformerxlbase -> transformer-xl-base-full-softmax,
  transformerxllarge -> transformer-xl-large-256-full-softmax (the large
  network on the 256-token segments and memory every config file passes,
  ``--tgt_len 256 --mem_len 256``; DeepLearningExamples' large configuration
  is 384), tacotron2, waveglow.
* Transformer-XL as the suite runs it (``benchmark_pytorch.sh``:
  ``torch.distributed.launch train.py`` with the config's arguments, which
  name neither ``--adaptive`` nor ``--multi_gpu`` nor a ``--config_file``):
  train.py's adaptive softmax is off, so both models train a full softmax
  over the 267,735-word vocabulary; and it wraps the model in
  DistributedDataParallel only under ``--multi_gpu ddp``, so on n GPUs the
  launcher's n processes train n replicas that exchange no gradients. Such
  a row is one replica's step: architecture single, one GPU, the per-GPU
  batch, and the step time ``global_batch_size * tokens_per_sample /
  throughput`` (the tok/s summed over the n processes).
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
* mixed_precision: half for BERT (both SQuAD models), GNMT and
  Transformer-XL (base and large), whose DeepLearningExamples scripts hold
  the whole model at FP16 with FP32 master weights (apex AMP
  ``opt_level="O2"``: ``run_squad.py --fp16`` and the suite's BERT logs;
  GNMT's ``--math fp16``, ``seq2seq/train/trainer.py``; Transformer-XL's
  ``--fp16``, which every version of ``train.py`` hands to apex at O2: hard-
  coded at first, then ``--amp apex`` and ``--apex_amp_opt_level O2`` by
  default). In suite version v0 (the DeepLearningExamples copy inside NGC's
  20.01 and 20.10 containers, ``config_v0``) also ResNet-50, whose FP16 task
  passes ``--fp16`` (``network_to_half`` with an FP32 master copy, where
  ``--amp`` is the other task), and NCF, whose FP16 task passes
  ``--opt_level "O2"`` (:data:`LAMBDA_V0_HALF_MODELS`). Autocast (per-operator
  casts) for the rest: from v1 on (Lambda's DeepLearningExamples fork in NGC
  22.09 and later) ConvNets, SSD and NCF at ``--amp`` run
  ``torch.cuda.amp.autocast``; Tacotron 2 and WaveGlow call apex O1, Mask
  R-CNN apex O1; v0's SSD ``--amp`` is left autocast (which container's SSD
  ran which AMP is not established). Set on every precision of those
  models (it changes nothing at FP32 and TF32).
* software_year the suite version's NGC release (:data:`LAMBDA_SOFTWARE_YEARS`):
  v0 2020, v1 2022, v2 2024.
* framework pytorch, software_stack stock; collected_at empty (the source
  gives suite versions v0-v2, not dates); rows flagged ``suspect`` excluded.
* A multi-GPU row whose step is shorter than the one-GPU step of the same
  suite version, GPU, model, precision and per-GPU batch by more than the
  spread between hosts (:func:`training.runs.faster_than_one_gpu`)
  is excluded: data parallelism cannot do a GPU's work faster than one GPU
  does it. BERT-base SQuAD at FP16 on 8 H100s (1.38x), H200s (2.5x) and B200s
  (2.1x), and NCF on 2 and 8 GPUs are such rows; the BERT-base excess grows
  as the run's steps per epoch fall (SQuAD's 88,641 features over 2,560 to
  6,144 sequences per step), as a throughput would that counts about 20
  untimed steps' samples.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from features.hardware import DeviceSpec, HardwareCatalog
from features.workloads import WorkloadCatalog
from training.importers.common import (
    PER_SAMPLE_UNITS, SAMPLE_UNITS, ImportResult, RowAccounting, attribute, catalogues, given,
    has_precision, map_unique, numbers, one_gpu_detail, pcie_link, read_source, step_times, text, units_per_sample,
)  # fmt: skip
from training.runs import faster_than_one_gpu

LAMBDA_SOURCE = "lambdal/deeplearning-benchmark"

#: The NGC PyTorch release each suite version ran, as a year: v0 the 20.01 container (the compile scripts:
#: "version: 0 for pytorch:20.01-py3"), v1 22.09 (the README's "latest tested", "1 for pytorch:22.09-py3
#: and later"), v2 24.10 (the v2 runs' sys_pytorch.txt: PyTorch 2.5.0a0 nv24.10).
LAMBDA_SOFTWARE_YEARS = {"v0": 2020, "v1": 2022, "v2": 2024}
#: Models whose scripts in the suite train at FP16 as a half-precision model with FP32 master weights (apex O2).
LAMBDA_HALF_MODELS = frozenset({"bert-base-squad", "bert-large-squad", "gnmt", "transformer-xl-base-full-softmax", "transformer-xl-large-256-full-softmax"})
#: Models whose suite-v0 FP16 task trains a half-precision model (ResNet-50 --fp16, NCF --opt_level O2).
LAMBDA_V0_HALF_MODELS = frozenset({"resnet50", "ncf"})
#: Models the suite launches on n GPUs as n replicas without a gradient exchange (see the module docstring).
LAMBDA_REPLICA_MODELS = frozenset({"transformer-xl-base-full-softmax", "transformer-xl-large-256-full-softmax"})

LAMBDA_MODELS = {
    "resnet50": "resnet50",
    "ssd": "ssd300-resnet50",
    "maskrcnn": "mask-rcnn",
    "bert_base_squad": "bert-base-squad",
    "bert_large_squad": "bert-large-squad",
    "gnmt": "gnmt",
    "ncf": "ncf",
    "transformerxlbase": "transformer-xl-base-full-softmax",
    "transformerxllarge": "transformer-xl-large-256-full-softmax",
    "tacotron2": "tacotron2",
    "waveglow": "waveglow",
}
LAMBDA_COLUMNS = (
    "suite_version", "system_name", "gpu", "n_gpus", "n_nodes", "intra_node_link", "framework", "model",
    "precision", "global_batch_size", "per_gpu_batch_size", "throughput", "throughput_unit", "suspect",
)  # fmt: skip


def import_lambda(
    path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None
) -> ImportResult:
    """Map Lambda's throughput table onto run rows (see the module docstring for the rules)."""
    hardware, workloads = catalogues(hardware, workloads)
    rows = RowAccounting(read_source(path, LAMBDA_COLUMNS))
    src = rows.source
    n_gpus = numbers(src["n_gpus"])
    source_id = (src["suite_version"].astype(str) + "/" + src["system_name"].astype(str) + "/" + src["model"].astype(str) + "/" + src["precision"].astype(str)).to_numpy()

    rows.exclude(given(src["suspect"]), "suspect in source", src["suspect"].to_numpy(object))
    rows.exclude(numbers(src["n_nodes"]) != 1, "multi-node row without a network", "n_nodes != 1")
    devices = map_unique(src["gpu"], hardware.devices.find)
    rows.exclude(pd.isna(devices), "unknown gpu", src["gpu"].to_numpy(object))
    model = src["model"].map(LAMBDA_MODELS).to_numpy(object)
    rows.exclude(pd.isna(model), "unmapped model", src["model"].to_numpy(object))
    rows.exclude(~src["precision"].isin(["amp_fp16", "fp32"]).to_numpy(), "unmapped precision", src["precision"].to_numpy(object))

    global_batch = numbers(src["global_batch_size"])
    batch = numbers(src["per_gpu_batch_size"])
    batch = np.where(np.isnan(batch), global_batch / n_gpus, batch)
    throughput = numbers(src["throughput"])
    rows.exclude(~(batch > 0) | ~(global_batch > 0), "batch size missing", "global or per-GPU batch not given")
    rows.exclude(batch != np.round(batch), "fractional per-GPU batch", text("global batch ", global_batch, " over ", n_gpus, " GPUs"))
    rows.exclude(~(throughput > 0), "no throughput", "throughput not given")

    unit = src["throughput_unit"].to_numpy(object)
    per_unit = units_per_sample(model, workloads)
    per_sample = np.isin(unit, list(PER_SAMPLE_UNITS))
    rows.exclude(~np.isin(unit, list(SAMPLE_UNITS | PER_SAMPLE_UNITS)), "unknown throughput unit", unit)
    rows.exclude(
        per_sample & np.isnan(per_unit),
        "per-sample unit needs tokens_per_sample",
        text("", unit, " for workload ", model, ": no tokens_per_sample in the workload catalogue"),
    )
    step_time_s = step_times(global_batch, throughput, np.where(per_sample, per_unit, 1.0))

    intra, intra_problem = _intra_links(src["intra_node_link"], devices, hardware)
    rows.exclude(pd.notna(intra_problem), "intra-node link not available for the gpu", intra_problem)

    precision = np.where(src["precision"].to_numpy(object) == "amp_fp16", "fp16", np.where(has_precision(devices, "tf32"), "tf32", "fp32"))
    configuration = text("", src["suite_version"].to_numpy(object), "|", src["gpu"].to_numpy(object), "|", model, "|", precision, "|", batch)
    superlinear, one_gpu_s = faster_than_one_gpu(configuration, n_gpus, step_time_s, rows.ok)
    rows.exclude(superlinear, "faster per GPU than on one GPU", one_gpu_detail(n_gpus, step_time_s, one_gpu_s))
    n = len(src)
    replicas = np.isin(model, list(LAMBDA_REPLICA_MODELS))
    gpus = np.where(replicas, 1.0, n_gpus)
    runs = {
        "name": source_id,
        "model": model,
        "batch_size_per_gpu": batch,
        "precision": precision,
        "framework": np.full(n, "pytorch", object),
        "software_stack": np.full(n, "stock", object),
        "software_year": np.array([LAMBDA_SOFTWARE_YEARS.get(v, np.nan) for v in src["suite_version"].to_numpy(object)], float),
        "mixed_precision": np.where(
            np.isin(model, list(LAMBDA_HALF_MODELS)) | ((src["suite_version"].to_numpy(object) == "v0") & np.isin(model, list(LAMBDA_V0_HALF_MODELS))),
            "half", "autocast",
        ).astype(object),
        "architecture": np.where(gpus == 1, "single", "allreduce-local").astype(object),
        "workers": np.ones(n),
        "gpus_per_worker": gpus,
        "gpu": attribute(devices, "name"),
        "gpus_per_node": gpus,
        "intra_node_link": np.where(replicas, None, intra),
        "measured_step_time_s": step_time_s,
        "source": np.full(n, LAMBDA_SOURCE, object),
        "source_id": source_id,
        "system": src["system_name"].to_numpy(object),
        "software": (src["framework"].astype(str) + "; benchmark suite " + src["suite_version"].astype(str)).to_numpy(object),
    }
    return rows.result(runs, source_id, hardware, workloads)


def _intra_links(labels: pd.Series, devices: np.ndarray, hardware: HardwareCatalog) -> tuple[np.ndarray, np.ndarray]:
    """Lambda's intra_node_link label for each row's GPU, and a problem text where it does not fit."""
    keys = pd.DataFrame({"label": labels.fillna("").astype(str), "gpu": attribute(devices, "name")}).astype(object)
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(keys.fillna("")))
    links, problems = [], []
    for label, gpu in uniques:
        device = hardware.devices.find(gpu) if gpu else None
        link, problem = _link(label, device)
        links.append(link)
        problems.append(problem)
    return np.array(links, object)[codes], np.array(problems, object)[codes]


def _link(label: str, device: DeviceSpec | None) -> tuple[str | None, str | None]:
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
        return pcie_link(device), None
    return None, f"unknown label {label!r}"
