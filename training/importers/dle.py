"""NVIDIA DeepLearningExamples' published training throughput (``NVIDIA/DeepLearningExamples``).

Every model README's "Training performance" table, read from the repository
snapshot (``dle_training_throughput.csv``, :func:`import_dle`) and from older
README versions whose values are no longer at the snapshot
(``dle_training_throughput_history.csv``, :func:`import_dle_history`). NGC
containers, DGX-1 (V100 SXM2), DGX-2/2H (V100 SXM3) and DGX A100 systems.

* Models (by the README's directory, variant and section):
  ``*/resnet50v1.5``, ``RN50v1.5`` -> resnet50; PyTorch SSD -> ssd300-resnet50
  (the TensorFlow SSD is SSD320 with an FPN backbone: not mapped); Mask R-CNN
  -> mask-rcnn; Transformer-XL base/large -> transformer-xl-base/-large, and
  the example's first directory name, ``TransformerXL`` (pytorch-19.09
  tables), -> transformer-xl-base: that version held one configuration,
  ``run_wt103_base.sh`` (16 layers, d_model 512, 192-token segments and
  memory, at commit 3d46067af943); Tacotron2 (mels/s) -> tacotron2 and, in
  the same README, the WaveGlow table (audio samples/s) -> waveglow (the
  first versions' Tacotron 2 "tokens/sec", input characters, is not mapped);
  TensorFlow GNMT -> gnmt; NCF -> ncf; BERT
  pre-training at sequence length 512 -> bert-large (padded to 512), or
  bert-large-binned where the example loads LDDL's 64-token length bins
  (PyTorch from the 21.11 container, PaddlePaddle from 22.12); at sequence
  length 128 (phase 1) -> bert-large-seq128 where the example pads to 128
  (TensorFlow, and PyTorch and PaddlePaddle before LDDL); fine-tuning on
  SQuAD -> bert-large-squad (DeepLearningExamples pre-trains and fine-tunes
  BERT-large).
  ResNeXt101-32x4d and SE-ResNeXt101-32x4d (the ConvNets directories of
  those names) -> resnext101-32x4d and se-resnext101-32x4d. DLRM (PyTorch
  and TensorFlow 2: the original DLRM) by its model size, the frequency
  threshold of its tables: small -> dlrm-dot-fl15, large -> dlrm-dot-fl3,
  PyTorch's xlarge -> dlrm-dot-fl2, TensorFlow 2's extra large ->
  dlrm-dot-fl0; the first README (April 2020) names no size.
  Not mapped, with the reason: phase 1 loaded in LDDL's length bins (the
  real lengths of its binned sequences are not counted), NER fine-tuning,
  models the workload catalogue does not hold (EfficientNet, BART, Jasper,
  Wide & Deep on Outbrain, ...), and namesakes of catalogue workloads that
  train another configuration (Transformer-big; :data:`DLE_NAMESAKES`),
  each with what differs.
* Precision: amp -> fp16, tf32, bf16 and fp32 as stated; amp+asp (automatic
  sparsity) is not a dense precision and is not mapped. Rows the source flags
  ``suspect`` (no stated unit, FP32 on A100 where TF32 is likely) are excluded,
  and so is every row whose throughput (same model table, GPU and GPU count)
  is published under both a full and a reduced precision in either table
  (:func:`precision_label_conflicts`: swapped columns).
* GPU: the table's name; a power qualifier ("(DGX-2H 450W)") is dropped, so
  the part maps to its datasheet entry.
* Step time: images/s, sequences/s, sentences/s, samples/s, items/s and
  DLRM's records of data/s count samples: ``gpus x batch_size_per_gpu / throughput``; tokens/s and mels/s
  (Transformer-XL, GNMT, Tacotron2) and WaveGlow's audio samples/s are
  multiplied by the workload's ``tokens_per_sample``. NCF's cells are written
  in millions ("22.59M"; the table holds 22.59): the raw cell's "M" scales
  them by 10^6. A batch cell that held two values without a stated order is
  excluded.
* A throughput published under two batch sizes (:func:`batch_label_conflicts`)
  is excluded in both places.
* PyTorch DLRM's READMEs before 729963dd47e7 print the global batch in their
  "Batch size / GPU" column (64k at 8 and at 16 GPUs; ``dist_main.py`` splits
  ``--batch_size``, default 65,536, over the GPUs: ``get_gpu_batch_sizes``);
  it is divided by the GPU count (:data:`DLE_GLOBAL_BATCH_READMES`). From
  729963dd47e7 on, and in TensorFlow 2's, the column is per GPU (8k at 8, 4k
  at 16).
* Gradient accumulation (BERT pre-training: thousands of sequences per GPU
  in up to 16,384 passes) as the README states it
  (:mod:`training.importers.dle_accumulation`): the row is the optimizer
  step, its batch per GPU the accumulated one and
  ``gradient_accumulation_steps`` its passes, so the all-reduce and the
  optimizer run once and every pass launches its kernels. A statement that
  does not add up (one pass times the passes is not the accumulated batch)
  excludes the row.
* Parallelism: 1 GPU -> single; one node -> allreduce-local (gpus_per_node the
  GPUs used); several nodes -> allreduce-cluster over the DGX system's
  published InfiniBand (DGX A100: 8 x HDR per node; DGX-2H: 8 x EDR),
  ``interconnect_inferred`` in the table, which the README itself does not
  state; a multi-node row without it is excluded. The intra-node link is the
  GPU's own (DGX-1: NVLink 2 hybrid cube mesh; DGX-2: first-generation
  NVSwitch; DGX A100: NVSwitch gen2).
* framework: PyTorch (and DGLPyTorch) -> pytorch, TensorFlow 1/2 ->
  tensorflow, MxNet -> mxnet, PaddlePaddle -> paddle; software_stack stock
  (the public DeepLearningExamples code in NGC containers, the code Lambda's
  benchmark runs too), compiled where the table says XLA; ``software`` holds the framework directory, the
  container and the XLA flag. ``software_year``: the container's NGC release
  (20.06 -> 2020); without one, the year the value first appeared in a README
  (the history), else the field's default (2024, the snapshot's year).
  ``collected_at``: empty for the snapshot (the
  README gives no measurement date), the date the value first appeared for
  the history.
* mixed_precision: half for the PyTorch examples whose FP16 ("amp") runs hold
  the whole model at FP16 with FP32 master weights, at every README version
  the tables hold (:data:`DLE_HALF_EXAMPLES`): BERT, GNMT and Transformer-XL;
  autocast (per-operator casts) for the rest, PaddlePaddle's BERT included
  (static AMP at level O1, though its white list also casts softmax, layer
  norm and GELU). Set on every precision of those examples (it changes
  nothing at FP32 and TF32).
* A multi-GPU row whose step is shorter than the one-GPU step of the same
  README version, model table, GPU, precision, batch cell and container
  by more than the spread between hosts
  (:func:`training.runs.faster_than_one_gpu`) is excluded: the
  TensorFlow BERT phase-1 FP32 rows on 4 to 16 V100s of a DGX-2 (1.35-1.37x
  the one-GPU rate per GPU, above 0.8 of the FP32 peak).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pandas as pd

from features.errors import SpecError
from features.hardware import HardwareCatalog
from features.workloads import WorkloadCatalog
from training.importers.common import (
    ImportResult, RowAccounting, attribute, catalogues, given, map_unique, numbers, one_gpu_detail, read_source, step_times, text,
    units_per_sample,
)  # fmt: skip
from training.importers.dle_accumulation import accumulations
from training.importers.networking import parse_host_networking
from training.runs import faster_than_one_gpu

DLE_SOURCE = "NVIDIA/DeepLearningExamples"
DLE_HISTORY_SOURCE = "NVIDIA/DeepLearningExamples (older README versions)"
#: The two tables' file names: each importer reads the other one's labels where it lies beside its own.
DLE_FILES = {False: "dle_training_throughput.csv", True: "dle_training_throughput_history.csv"}
#: What identifies one published measurement across README versions: a throughput of one table row.
_MEASUREMENT = ("model_dir", "model_variant", "gpu", "gpus_total", "throughput")
#: Full and reduced precision: FP32 and TF32 name one setting on an A100 (the source flags the FP32 label there).
_PRECISION_CLASS = {"fp32": "full", "tf32": "full", "fp16": "reduced", "bf16": "reduced"}

DLE_COLUMNS = (
    "source", "readme_line", "model", "model_variant", "model_dir", "framework", "section_heading", "system", "gpu",
    "gpus_total", "gpus_per_node", "nodes", "interconnect_inferred", "precision", "xla", "batch_size_per_gpu",
    "batch_parse_note", "throughput", "throughput_unit", "throughput_column", "other_config", "container", "raw_row", "suspect",
)  # fmt: skip

#: Columns read as text, whatever their cells look like.
DLE_TEXT_COLUMNS = ("batch_size_per_gpu", "xla", "model_variant", "raw_row", "readme_line", "batch_parse_note", "interconnect_inferred")

#: README directory (its last path part) -> catalogue model, for directories with one model.
DLE_DIRECTORIES = {
    "resnet50v1.5": "resnet50",
    "RN50v1.5": "resnet50",
    "resnext101-32x4d": "resnext101-32x4d",
    "se-resnext101-32x4d": "se-resnext101-32x4d",
    "MaskRCNN": "mask-rcnn",
    "GNMT": "gnmt",
    "NCF": "ncf",
}
#: Directories whose model needs the framework as well.
DLE_FRAMEWORK_DIRECTORIES = {("PyTorch", "SSD"): "ssd300-resnet50"}
#: The speech README's two training tables by unit: Tacotron 2 in mel frames a second, WaveGlow in audio
#: samples a second. Its first versions (2019) also gave Tacotron 2 in "tokens/sec", input characters,
#: which the catalogue does not count.
TACOTRON2_README_UNITS = {"mels/s": "tacotron2", "samples/s": "waveglow"}
#: Directories named like a catalogue workload that train another configuration of it, with what differs.
DLE_NAMESAKES = {
    "Transformer": "Transformer-big (PyTorch's --arch transformer_wmt_en_de_big_t2t, TensorFlow's --params=big), "
    "not the catalogue's base Transformer",
}
#: DLRM's model sizes (the README's "Model size" column): the frequency threshold below which a category
#: shares one row, which sets the tables and nothing else (PyTorch README: small ~15 GB, large ~82 GB,
#: xlarge ~142 GB, thresholds 15, 3 and 2; TensorFlow 2's: small, large and extra large, 15, 3 and 0).
DLRM_SIZES = {"small": "dlrm-dot-fl15", "large": "dlrm-dot-fl3", "xlarge": "dlrm-dot-fl2", "extra large": "dlrm-dot-fl0"}
#: README versions whose batch column holds the global batch, by directory (see the module docstring).
DLE_GLOBAL_BATCH_READMES = {
    "PyTorch/Recommendation/DLRM": frozenset({"36f3b1b670a9", "3745b498980d", "4e764dcd7873", "15af494a8e7e"}),
}
#: BERT-large pre-training by its stated sequence length: phase 2 and phase 1.
BERT_PRETRAINING = {"512": "bert-large", "128": "bert-large-seq128"}
DLE_PRECISIONS = {"amp": "fp16", "tf32": "tf32", "bf16": "bf16", "fp32": "fp32"}
DLE_FRAMEWORKS = {
    "PyTorch": "pytorch", "DGLPyTorch": "pytorch", "TensorFlow": "tensorflow", "TensorFlow2": "tensorflow",
    "Tensorflow2": "tensorflow", "MxNet": "mxnet", "PaddlePaddle": "paddle",
}  # fmt: skip
#: Examples whose "amp" tables train a half-precision model (FP16 weights and activations, FP32 master
#: weights; the job spec's mixed_precision "half"), with the code that makes it so at their README versions.
DLE_HALF_EXAMPLES = {
    # 19.07-20.06: run_pretraining.py / run_squad.py --fp16 -> amp.initialize(..., opt_level="O2");
    # 21.11 on: run_pretraining.sh passes --allreduce_post_accumulation_fp16 by default -> model.half().
    "PyTorch/LanguageModeling/BERT": "apex O2, then model.half()",
    # 18.11-19.01: --math fp16 (train.py's default) -> model.half() with Fp16Optimizer's FP32 master copy;
    # later: amp.initialize(..., opt_level="O2").
    "PyTorch/Translation/GNMT": "model.half(), then apex O2",
    # --fp16 -> amp.initialize(..., opt_level="O2") (hard-coded at 19.09-19.11; later --amp apex and
    # --apex_amp_opt_level O2 by default).
    "PyTorch/LanguageModeling/Transformer-XL": "apex O2",
    "PyTorch/LanguageModeling/TransformerXL": "apex O2",
}
#: Units that count samples; DLRM's "records of data/s" are its click-log records, one sample each.
DLE_SAMPLE_UNITS = frozenset({"images/s", "sequences/s", "sentences/s", "samples/s", "items/images/s", "items/s", "records of data/s"})
#: Units counted per unit of a sample (tokens, mel frames), by the model they belong to.
DLE_PER_SAMPLE_UNITS = {"tokens/s": None, "mels/s": None}
_MILLIONS = re.compile(r"\d(?:\.\d+)?\s?M\b")
_SEQUENCE = re.compile(r"sequence length\s*=\s*(\d+)", re.IGNORECASE)


def import_dle(path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None) -> ImportResult:
    """Map DeepLearningExamples' snapshot table onto run rows (see the module docstring for the rules)."""
    return _import(path, hardware, workloads, DLE_SOURCE, history=False)


def import_dle_history(path: str | Path, *, hardware: HardwareCatalog | None = None, workloads: WorkloadCatalog | None = None) -> ImportResult:
    """Map the values of older DeepLearningExamples READMEs onto run rows (see the module docstring)."""
    return _import(path, hardware, workloads, DLE_HISTORY_SOURCE, history=True)


def dle_model(model_dir: str, variant: object, section: object, unit: object = None) -> tuple[str | None, str | None]:
    """The catalogue model of one README table row (``unit``: its throughput unit), or None and why not."""
    parts = str(model_dir).split("/")
    framework, last = parts[0], parts[-1]
    variant = "" if pd.isna(variant) else str(variant)
    section = "" if pd.isna(section) else str(section)
    if last in DLE_DIRECTORIES:
        return DLE_DIRECTORIES[last], None
    if (framework, last) in DLE_FRAMEWORK_DIRECTORIES:
        return DLE_FRAMEWORK_DIRECTORIES[(framework, last)], None
    if last == "Transformer-XL":
        return ("transformer-xl-large", None) if variant.lower().startswith("large") else ("transformer-xl-base", None)
    if last == "TransformerXL":
        return "transformer-xl-base", None
    if last == "Tacotron2":
        if unit in TACOTRON2_README_UNITS:
            return TACOTRON2_README_UNITS[unit], None
        return None, f"{model_dir}: a {unit} table of Tacotron 2 (the catalogue counts its mel frames, WaveGlow's audio samples)"
    if last == "DLRM":
        size = variant.split("=", 1)[-1].strip().lower()
        if size in DLRM_SIZES:
            return DLRM_SIZES[size], None
        return None, f"{model_dir}: DLRM of no stated model size (its tables are not known)"
    if last in DLE_NAMESAKES:
        return None, f"{model_dir}: {DLE_NAMESAKES[last]}"
    if last == "BERT":
        if re.search(r"fine-?tuning", section, re.IGNORECASE):
            if "squad" in section.lower():
                return "bert-large-squad", None
            return None, "BERT-large fine-tuning other than SQuAD (NER): not in the workload catalogue"
        sequence = _SEQUENCE.search(variant)
        if sequence and sequence.group(1) in BERT_PRETRAINING:
            return BERT_PRETRAINING[sequence.group(1)], None
        return None, f"BERT-large pre-training at {variant or 'an unstated sequence length'}: the catalogue holds sequences 128 and 512"
    return None, f"{model_dir}: not in the workload catalogue"


def global_batch_readme(src: pd.DataFrame) -> np.ndarray:
    """Whether each row's README prints the global batch in its batch column (:data:`DLE_GLOBAL_BATCH_READMES`)."""
    commit = src["source"].astype(str).str.rsplit("@", n=1).str[-1]
    readmes = src["model_dir"].astype(str).map(lambda d: DLE_GLOBAL_BATCH_READMES.get(d, frozenset()))
    return np.array([c in r for c, r in zip(commit, readmes)], bool)


#: The first container of each BERT example whose phase-2 pre-training loads LDDL's 64-token length bins:
#: PyTorch from 21.11 (data/create_datasets_from_start.sh, BIN_SIZE 64), PaddlePaddle from 22.12 (README
#: changelog, January 2023). Earlier containers and TensorFlow pad every sequence to 512.
LDDL_FIRST_CONTAINER = {"PyTorch/LanguageModeling/BERT": (21, 11), "PaddlePaddle/LanguageModeling/BERT": (22, 12)}


def lddl_binned(model_dir, container) -> np.ndarray:
    """Whether each row's BERT example loads length-binned sequences (see :data:`LDDL_FIRST_CONTAINER`)."""
    out = []
    for directory, text in zip(model_dir, container):
        first = LDDL_FIRST_CONTAINER.get(str(directory))
        version = re.search(r"(\d{2})\.(\d{2})", "" if pd.isna(text) else str(text))
        out.append(bool(first and version and (int(version.group(1)), int(version.group(2))) >= first))
    return np.array(out, bool)


#: An NGC release as the tables write it: "20.06-py3", "pytorch-22.10-py3", "PyTorch 21.03", "21.02-tf2-py3 NGC".
_NGC_RELEASE = re.compile(r"(?<!\d)(\d{2})\.(0[1-9]|1[0-2])(?!\d)")


def software_years(container, first_seen) -> np.ndarray:
    """Each row's software release year: its NGC container's (20.06 -> 2020), else the year the value
    first appeared in a README (the history; the measurement is no later), else NaN (the job field's default)."""
    years = []
    for text, seen in zip(container, first_seen):
        release = _NGC_RELEASE.search("" if pd.isna(text) else str(text))
        if release:
            years.append(2000.0 + int(release.group(1)))
        else:
            years.append(float(str(seen)[:4]) if isinstance(seen, str) and str(seen)[:4].isdigit() else np.nan)
    return np.array(years, float)


def _import(path, hardware, workloads, source: str, history: bool) -> ImportResult:
    hardware, workloads = catalogues(hardware, workloads)
    columns = DLE_COLUMNS + (("first_seen_date",) if history else ())
    rows = RowAccounting(read_source(path, columns, DLE_TEXT_COLUMNS))
    src = rows.source
    n = len(src)
    digest = src["raw_row"].fillna("").map(lambda raw: hashlib.sha1(raw.encode()).hexdigest()[:10])
    source_id = (
        src["source"].astype(str) + ":" + src["readme_line"].astype(str) + ":" + digest + ":" + src["precision"].astype(str)
        + ":" + src["throughput_column"].fillna("").astype(str) + ":" + src["batch_size_per_gpu"].fillna("").astype(str)
    ).to_numpy(object)  # fmt: skip

    rows.exclude(given(src["suspect"]), "suspect in source", src["suspect"].to_numpy(object))
    rows.exclude(pd.Series(source_id).duplicated().to_numpy(), "repeats a row of the source", "same README line, cell and precision")
    conflict, other_label = precision_label_conflicts(src, _sibling_table(path, history))
    rows.exclude(conflict, "published under two precisions", other_label)
    unit = src["throughput_unit"].to_numpy(object)
    mapped = [dle_model(d, v, s, u) for d, v, s, u in zip(src["model_dir"], src["model_variant"], src["section_heading"], unit)]
    model = np.array([m for m, _ in mapped], object)
    model_dir = src["model_dir"].astype(str).to_numpy(object)
    binned = lddl_binned(model_dir, src["container"])
    model = np.where((model == "bert-large") & binned, "bert-large-binned", model)
    rows.exclude(pd.isna(model), "model not in the workload catalogue", np.array([why for _, why in mapped], object))
    rows.exclude((model == "bert-large-seq128") & binned, "phase-1 BERT in length bins",
                 "LDDL's 64-token bins at sequence length 128: the binned sequences' real lengths are not counted")

    devices = map_unique(src["gpu"].fillna("").str.replace(r"\s*\(.*\)\s*$", "", regex=True), hardware.devices.find)
    rows.exclude(pd.isna(devices), "unknown gpu", src["gpu"].to_numpy(object))
    precision = src["precision"].map(DLE_PRECISIONS).to_numpy(object)
    rows.exclude(pd.isna(precision), "unmapped precision", src["precision"].to_numpy(object))
    framework = src["framework"].map(DLE_FRAMEWORKS).to_numpy(object)
    rows.exclude(pd.isna(framework), "unmapped framework", src["framework"].to_numpy(object))

    total = numbers(src["gpus_total"])
    per_node = numbers(src["gpus_per_node"])
    nodes = numbers(src["nodes"])
    batch = numbers(src["batch_size_per_gpu"]) / np.where(global_batch_readme(src), numbers(src["gpus_total"]), 1.0)
    rows.exclude(src["batch_parse_note"].fillna("").str.startswith("ambiguous").to_numpy(), "batch size missing or ambiguous", src["batch_size_per_gpu"].to_numpy(object))
    rows.exclude(~(batch >= 1) | (batch != np.round(batch)), "batch size missing or ambiguous", src["batch_size_per_gpu"].to_numpy(object))
    rows.exclude(~(total >= 1) | ~(per_node >= 1) | ~(nodes >= 1) | (per_node * nodes != total), "gpu count missing or inconsistent", text("", per_node, " per node x ", nodes, " nodes vs ", total))

    throughput = numbers(src["throughput"]) * np.where(src["raw_row"].fillna("").str.contains(_MILLIONS).to_numpy(), 1e6, 1.0)
    rows.exclude(~(throughput > 0), "no throughput", "throughput not given")
    per_sample_unit = np.isin(unit, list(DLE_PER_SAMPLE_UNITS)) | (model == "waveglow")
    rows.exclude(~per_sample_unit & ~np.isin(unit, list(DLE_SAMPLE_UNITS)), "unknown throughput unit", unit)
    per_unit = units_per_sample(model, workloads)
    rows.exclude(per_sample_unit & np.isnan(per_unit), "per-sample unit needs tokens_per_sample", text("", unit, " for workload ", model))
    cell_s = step_times(total * batch, throughput, np.where(per_sample_unit, per_unit, 1.0))

    configuration = text("", src["source"].to_numpy(object), "|", model_dir, "|", src["model_variant"].fillna("").to_numpy(object), "|",
                         src["gpu"].to_numpy(object), "|", precision, "|", framework, "|", batch, "|", src["container"].fillna("").to_numpy(object),
                         "|", src["xla"].fillna("").to_numpy(object))
    # Compared per batch cell, before accumulation is read: a strong-scaling table accumulates fewer passes on more GPUs.
    superlinear, one_gpu_s = faster_than_one_gpu(configuration, total, cell_s, rows.ok)
    rows.exclude(superlinear, "faster per GPU than on one GPU", one_gpu_detail(total, cell_s, one_gpu_s))
    passes, per_step, unread = accumulations(src, batch, total)
    rows.exclude(np.isnan(passes), "accumulation does not add up", unread)
    step_time_s = cell_s * per_step / batch
    two_batches, other_batch = batch_label_conflicts(src, per_step, rows.ok)
    rows.exclude(two_batches, "published under two batch sizes", other_batch)

    multi_node = nodes > 1
    parsed = [_dgx_fabric(t) for t in src["interconnect_inferred"]]
    network = np.array([p[0] for p in parsed], object)
    nics = np.array([np.nan if p[1] is None else p[1] for p in parsed], float)
    rows.exclude(multi_node & pd.isna(network), "multi-node row without a network", src["interconnect_inferred"].fillna("").to_numpy(object))

    xla = src["xla"].fillna("").str.lower().isin(["yes", "on"]).to_numpy()
    software = (src["model_dir"].fillna("README.md").astype(str) + "; " + src["container"].fillna("container not stated").astype(str)).to_numpy(object).astype(str).astype(object)
    software = np.where(xla, software + "; XLA", software)
    runs = {
        "name": source_id,
        "model": model,
        "batch_size_per_gpu": per_step,
        "gradient_accumulation_steps": passes,
        "precision": precision,
        "framework": framework,
        "software_stack": np.where(xla, "compiled", "stock").astype(object),
        "software_year": software_years(src["container"].to_numpy(object), src["first_seen_date"].to_numpy(object) if history else np.full(n, None, object)),
        "mixed_precision": np.where(np.isin(model_dir, list(DLE_HALF_EXAMPLES)), "half", "autocast").astype(object),
        "architecture": np.select([multi_node, total > 1], ["allreduce-cluster", "allreduce-local"], "single").astype(object),
        "workers": np.where(multi_node, nodes, 1.0),
        "gpus_per_worker": per_node,
        "nodes": np.where(multi_node, nodes, np.nan),
        "gpu": attribute(devices, "name"),
        "gpus_per_node": per_node,
        "network": np.where(multi_node, network, None),
        "nics_per_node": np.where(multi_node, nics, np.nan),
        "measured_step_time_s": step_time_s,
        "source": np.full(n, source, object),
        "source_id": source_id,
        "system": src["system"].to_numpy(object),
        "collected_at": src["first_seen_date"].to_numpy(object) if history else np.full(n, None, object),
        "software": software,
    }
    return rows.result(runs, source_id, hardware, workloads)


def _sibling_table(path, history: bool) -> pd.DataFrame | None:
    """The other DeepLearningExamples table where it lies beside ``path`` (None where it does not)."""
    sibling = Path(path).with_name(DLE_FILES[not history])
    if not sibling.exists() or sibling.resolve() == Path(path).resolve():
        return None
    try:
        return read_source(sibling, DLE_COLUMNS, DLE_TEXT_COLUMNS)
    except SpecError as exc:
        raise SpecError(
            "path", sibling.name,
            f"{sibling} is read beside {Path(path).name} for values published under two precisions, "
            f"but {exc.allowed}; move it away or fix it",
        ) from None


#: What one measurement of a README shares whatever its batch cell says: model table, GPU, GPU count,
#: precision, XLA, container and the throughput itself.
_SAME_MEASUREMENT = ("model_dir", "model_variant", "gpu", "gpus_total", "precision", "xla", "container", "throughput")


def batch_label_conflicts(src: pd.DataFrame, per_step: np.ndarray, standing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose throughput a README gives, in one version or across its versions, under two optimizer steps
    of different sizes (same model table, GPU, GPU count, precision, XLA and container).

    TensorFlow SE-ResNeXt101's README of June 2020 printed its mixed-precision
    values, 285.99 and 2,168.4 images/s, under batch 96 in one table and 128 in
    the next; PyTorch BERT's FP32 phase-2 values (7.56 sequences/s on one
    V100 16 GB, and their 4- to 16-GPU rows) stood under batch 4 on 2019-08-13
    and under 2 two weeks later, the same for the 32 GB parts (8, then 4). One
    label is wrong and nothing says which, so both go, as for values published
    under two precisions. A measurement published once per pass and once per
    accumulated step (PaddlePaddle's BERT tables) is one optimizer step, read
    the same by the accumulation rules. Returns the mask and, per row, the
    other batch.
    """
    keys = src[list(_SAME_MEASUREMENT)].fillna("").astype(str).agg("|".join, axis=1).to_numpy(object)
    frame = pd.DataFrame({"key": keys, "step": per_step})[standing]
    steps = frame.groupby("key")["step"].agg(lambda v: sorted(set(v)))
    conflict = np.zeros(len(src), bool)
    other = np.full(len(src), "", object)
    for key, values in steps.items():
        if len(values) > 1:
            rows = standing & (keys == key)
            conflict |= rows
            for i in np.flatnonzero(rows):
                other[i] = "also at " + ", ".join(f"{v:g}" for v in values if v != per_step[i]) + " per GPU in the same README"
    return conflict, other


def precision_label_conflicts(src: pd.DataFrame, other: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose throughput is published under another precision too, and where.

    One measurement (a model's table row: the same directory, variant, GPU,
    GPU count and throughput to the last digit) labelled full precision (FP32
    or TF32) in one README version and mixed precision in another (TensorFlow
    BERT's SQuAD tables of November 2019 swapped the two columns, corrected a
    week later) cannot be placed: every row carrying it is excluded, in this
    table and, where ``other`` (the other table) holds it, there too.
    """
    tables = [src] if other is None else [src, other]
    both = pd.concat([t.loc[:, list(_MEASUREMENT) + ["precision", "source", "readme_line"]] for t in tables], ignore_index=True)
    names = both.loc[:, ["model_dir", "model_variant", "gpu"]].astype(object)
    key = names.where(names.notna(), "").astype(str).agg("|".join, axis=1)
    for column in ("gpus_total", "throughput"):
        key = key + "|" + pd.Series(numbers(both[column])).map(repr)
    precision = both["precision"].map(DLE_PRECISIONS).map(_PRECISION_CLASS)
    labels = precision.groupby(key).nunique()
    conflicting = key.map(labels).fillna(0).to_numpy() > 1
    where = both["source"].astype(str).str.split(":", n=1).str[-1] + " (line " + both["readme_line"].astype(str) + ")"
    label = both["precision"].astype(str) + " in " + where
    own = np.arange(len(src))
    detail = np.full(len(src), None, object)
    for i in own[conflicting[own]]:
        same = (key == key.iloc[i]).to_numpy() & (precision != precision.iloc[i]).to_numpy()
        detail[i] = "also " + "; ".join(sorted(set(label[same])))
    return conflicting[own], detail


def _dgx_fabric(words: object) -> tuple[str | None, int | None]:
    """The inter-node network a DGX system description names ("8x200Gb/s HDR InfiniBand per node")."""
    if pd.isna(words) or "multi-node" not in str(words):
        return None, None
    return parse_host_networking(str(words).split("multi-node:", 1)[1].split("[")[0])[:2]
