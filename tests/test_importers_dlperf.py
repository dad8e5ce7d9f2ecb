"""DLPerf importer: frameworks, reported values against repeats, the cluster's fabric; and the real table."""

from __future__ import annotations

import pytest
from table_rows import reasons, write_rows

from training.importers import import_dlperf

HEADER = (
    "source,file_line,model,framework,implementation_column,section_heading,precision,xla,gpu,gpus_total,gpus_per_node,"
    "nodes,interconnect,hardware_source,batch_size_per_gpu,throughput,throughput_unit,row_kind,raw_row,duplicate_of"
).split(",")


def row(line, model, framework, precision, gpus, per_node, nodes, batch, throughput, **extra):
    return {
        "source": f"Oneflow-Inc/DLPerf:{framework}/README.md@c89430bac64f", "file_line": line, "model": model, "framework": framework,
        "implementation_column": "samples/s", "precision": precision, "gpu": "Tesla V100-SXM2-16GB", "gpus_total": gpus,
        "gpus_per_node": per_node, "nodes": nodes, "batch_size_per_gpu": batch, "throughput": throughput,
        "throughput_unit": "samples/s", "row_kind": "reported value", "raw_row": f"{line} | {gpus} | {throughput}", **extra,
    }  # fmt: skip


ROWS = [
    row(1, "ResNet50 v1.5", "MXNet", "fp32", 1, 1, 1, 128, 384.0),
    row(2, "BERT-base pretrain", "OneFlow", "amp", 32, 8, 4, 96, 9600.0),
    row(3, "ResNet50 v1.5", "TensorFlow 2.x", "fp32", 8, 8, 1, 128, 2560.0, xla="yes"),
    row(4, "ResNet50 v1.5", "MXNet", "fp32", 1, 1, 1, 128, 380.0, row_kind="individual run"),
    row(5, "ResNet50 v1.5", "NGC PyTorch (NVIDIA DeepLearningExamples)", "amp", 8, 8, 1, 256, 6000.0, duplicate_of="PyTorch/resnet50v1.5/README.md"),
    row(6, "InsightFace", "OneFlow", "fp32", 8, 8, 1, 64, 3000.0),
    row(7, "BERT-base pretrain", "OneFlow", "", 8, 8, 1, 96, 1000.0),
]


@pytest.fixture
def dlperf_csv(tmp_path):
    return write_rows(tmp_path / "dlperf.csv", HEADER, ROWS)


def test_every_row_is_mapped_or_excluded_with_its_reason(dlperf_csv):
    runs, excluded = import_dlperf(dlperf_csv)
    assert len(runs) + len(excluded) == len(ROWS) and len(runs) == 3
    assert reasons(excluded, "file_line") == {
        "4": "individual repeat (the reported median is mapped)",
        "5": "repeats a value reported elsewhere in the source",
        "6": "model not in the workload catalogue",
        "7": "precision not stated",
    }


def test_mapping_rules(dlperf_csv):
    runs = import_dlperf(dlperf_csv).runs.set_index("software")
    mxnet = runs.loc["MXNet"]
    assert (mxnet["model"], mxnet["architecture"], mxnet["framework"], mxnet["gpu"]) == ("resnet50", "single", "mxnet", "V100-SXM2-16GB")
    assert mxnet["measured_step_time_s"] == pytest.approx(128 / 384.0)
    oneflow = runs.loc["OneFlow"]
    assert (oneflow["model"], oneflow["architecture"], oneflow["nodes"], oneflow["gpus_per_worker"]) == ("bert-base", "allreduce-cluster", 4, 8)
    assert (oneflow["network"], oneflow["nics_per_node"], oneflow["framework"], oneflow["precision"]) == ("infiniband-edr", 1, "other", "fp16")
    assert oneflow["measured_step_time_s"] == pytest.approx(32 * 96 / 9600.0)
    tf = runs.loc["TensorFlow 2.x; XLA"]
    assert (tf["architecture"], tf["framework"], tf["network"]) == ("allreduce-local", "tensorflow", None)
    assert tf["software_stack"] == "compiled" and mxnet["software_stack"] == "stock"
    assert tf["measured_step_time_s"] == pytest.approx(8 * 128 / 2560.0)
    assert set(runs["software_year"]) == {2020}


def test_real_table(shared_data):
    result = import_dlperf(shared_data / "dlperf_v100_cluster.csv")
    counts = result.counts()
    assert counts["rows"] == 1010 and counts["mapped"] >= 400
    assert counts["excluded_by_reason"]["individual repeat (the reported median is mapped)"] == 190
    runs = result.runs
    assert set(runs["framework"]) == {"mxnet", "pytorch", "tensorflow", "paddle", "other"}
    assert set(runs["gpus_per_worker"] * runs["workers"]) == {1, 2, 4, 8, 16, 32}


def test_each_result_file_says_how_its_reduced_precision_is_applied(tmp_path):
    # NGC MXNet's ResNet50 README holds two FP16 tables: "without amp" casts the network (--dtype float16), "with amp"
    # is mx.contrib.amp; MXNet's own BERT casts, OneFlow's AMP pass casts per operator.
    ngc_mxnet = "Oneflow-Inc/DLPerf:NVIDIADeepLearningExamples/MxNet/Classification/RN50v1.5/README.md@c89430bac64f"
    heading = "ResNet50 v1.5 FP16 > batch_size = 256 & {} amp & without xla"
    rows = [
        row(1, "ResNet50 v1.5", "NGC MxNet (NVIDIA DeepLearningExamples)", "amp", 1, 1, 1, 256, 1393.87, source=ngc_mxnet, section_heading=heading.format("without")),
        row(2, "ResNet50 v1.5", "NGC MxNet (NVIDIA DeepLearningExamples)", "amp", 1, 1, 1, 256, 1281.83, source=ngc_mxnet, section_heading=heading.format("with")),
        row(3, "BERT-base pretrain", "MXNet", "amp", 1, 1, 1, 64, 473.76, source="Oneflow-Inc/DLPerf:MxNet/BERT/README.md@c89430bac64f"),
        row(4, "BERT-base pretrain", "OneFlow", "amp", 1, 1, 1, 64, 534.72),
    ]  # fmt: skip
    runs = import_dlperf(write_rows(tmp_path / "dlperf.csv", HEADER, rows)).runs
    line = runs["name"].str.split(":").str[2].astype(int)  # source (one colon), file line, ...
    assert dict(zip(line, runs["mixed_precision"])) == {1: "half", 2: "autocast", 3: "half", 4: "autocast"}


def test_real_half_precision_files(shared_data):
    runs = import_dlperf(shared_data / "dlperf_v100_cluster.csv").runs
    half = runs[runs["mixed_precision"] == "half"]
    assert set(half["software"]) == {"MXNet", "MindSpore", "NGC PyTorch (NVIDIA DeepLearningExamples)", "NGC MxNet (NVIDIA DeepLearningExamples)"}
    assert set(half.loc[half["software"].str.startswith("NGC PyTorch"), "model"]) == {"bert-base"}  # its ResNet50 runs apex O1
    assert set(runs["mixed_precision"]) == {"half", "autocast"}
