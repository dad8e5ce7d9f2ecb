"""MLPerf Training v0.7-v3.0 importer: benchmarks by round, accelerator qualifiers, reused logs; and the real table."""

from __future__ import annotations

import pandas as pd
import pytest
from table_rows import reasons, write_rows

from training.importers import import_mlperf_rounds
from training.importers.mlperf import named_nodes

HEADER = (
    "source,round,submitter,division,availability,system,benchmark,accelerator,accelerators_per_node,n_nodes,"
    "n_accelerators,accelerator_memory,accelerator_interconnect,host_networking,host_processor,framework,"
    "global_batch_size,train_samples_per_epoch,n_runs,n_runs_with_throughput,train_throughput_samples_per_s,"
    "throughput_rel_spread,throughput_per_accelerator,step_time_s,median_time_to_train_min,progress_event,suspect"
).split(",")
EDR8 = "8x Mellanox ConnectX-6 IB EDR 100Gb/s"


def row(round_, system, benchmark, accelerator, per_node, nodes, batch, throughput, interconnect="NVLink", networking="", framework="NGC PyTorch", **extra):
    return {
        "source": f"mlcommons/training_results_{round_}", "round": round_, "submitter": "Somebody", "division": "closed",
        "system": system, "benchmark": benchmark, "accelerator": accelerator, "accelerators_per_node": per_node, "n_nodes": nodes,
        "n_accelerators": per_node * nodes, "accelerator_interconnect": interconnect, "host_networking": networking,
        "framework": framework, "global_batch_size": batch, "n_runs_with_throughput": 5,
        "train_throughput_samples_per_s": throughput, "throughput_rel_spread": 0.01, **extra,
    }  # fmt: skip


ROWS = [
    row("v0.7", "C4140", "resnet", "Nvidia Tesla V100-SXM2-32GB", 4, 1, 832, 5583.906, interconnect="NVLINK2.0", framework="NGC MXNet 20.06 , NGC PyTorch 20.06"),
    row("v0.7", "2xC4140", "resnet", "Nvidia Tesla V100-SXM2-32GB", 4, 1, 1664, 11230.315, interconnect="NVLINK2.0", framework="NGC MXNet 20.06 , NGC PyTorch 20.06"),
    row("v2.0", "8xA100_80GB-baseline", "resnet", "NVIDIA A100-SXM4-80GB", 8, 1, 2048, 16378.9),
    row("v1.0", "old-ssd", "ssd", "NVIDIA A100-SXM4-40GB", 8, 1, 2048, 20000.0),
    row("v2.0", "new-ssd", "ssd", "NVIDIA A100-SXM4-80GB (400W)", 8, 1, 256, 2560.0, interconnect="NVLINK 3.0, NVSWITCH 2.0 600GB/s"),
    row("v2.0", "bare-a100", "bert", "NVIDIA A100", 8, 1, 448, 3000.0),
    row("v2.0", "dgxa100_n2", "maskrcnn", "NVIDIA A100-SXM-80GB CTS", 8, 2, 128, 1300.0, networking="8x ConnectX-6 IB HDR 200Gb/s"),
    row("v2.1", "dgxa100_n2", "maskrcnn", "NVIDIA A100-SXM-80GB CTS", 8, 2, 128, 1300.0, networking="8x ConnectX-6 IB HDR 200Gb/s"),
    row("v1.1", "dlrm-box", "dlrm", "NVIDIA A100-SXM4-80GB", 8, 1, 55296, 3e6, framework="merlin_hugectr NVIDIA Release 21.09"),
    row("v0.7", "dlrm-pyt", "dlrm", "NVIDIA V100-SXM3-32GB (450W)", 16, 1, 55296, 2.3e7, framework="PyTorch NVIDIA Release 20.06"),
    row("v3.0", "eos_n64", "gpt3", "NVIDIA H100-SXM5-80GB", 8, 64, 1536, 500.0, networking="8x ConnectX-7 IB NDR 400Gb/s"),
    row("v1.0", "tpu-v4-128", "resnet", "TPU-v4", 4, 32, 4096, 1e5),
    row("v1.0", "dgx2h_n2", "rnnt", "NVIDIA V100-SXM3-32GB (450W)", 16, 2, 1024, 6400.0, interconnect="NVLINK 2.0, NVSWITCH 1.0 300GB/s", networking=EDR8),
]


@pytest.fixture
def rounds_csv(tmp_path):
    return write_rows(tmp_path / "rounds.csv", HEADER, ROWS)


def test_every_row_is_mapped_or_excluded_with_its_reason(rounds_csv):
    runs, excluded = import_mlperf_rounds(rounds_csv)
    assert len(runs) + len(excluded) == len(ROWS) and len(runs) == 7
    assert dict(zip(excluded["source_id"], excluded["reason"])) == {
        # Two C4140 servers by name, one node of 4 GPUs by description: per GPU twice the one-node C4140's rate.
        "v0.7/Somebody/2xC4140/resnet": "node count contradicts the system's name",
        "v1.0/Somebody/old-ssd/ssd": "benchmark not in the workload catalogue",  # SSD-ResNet34 before v2.0
        "v2.0/Somebody/bare-a100/bert": "gpu variant not stated",
        "v2.1/Somebody/dgxa100_n2/maskrcnn": "repeats an earlier round's value (reused logs)",
        "v3.0/Somebody/eos_n64/gpt3": "large-model layout job (tensor/pipeline parallel)",
        "v1.0/Somebody/tpu-v4-128/resnet": "non-NVIDIA accelerator",
    }
    assert reasons(excluded, "system")["tpu-v4-128"] == "non-NVIDIA accelerator"


def test_mapping_rules(rounds_csv):
    runs = import_mlperf_rounds(rounds_csv).runs.set_index("system")
    v07 = runs.loc["C4140"]
    assert (v07["gpu"], v07["model"], v07["framework"], v07["architecture"], v07["collected_at"]) == (
        "V100-SXM2-32GB", "resnet50", "mxnet", "allreduce-local", "2020-07-29",
    )  # fmt: skip
    assert v07["measured_step_time_s"] == pytest.approx(832 / 5583.906) and v07["batch_size_per_gpu"] == 208
    # "8x" before the accelerator's own name counts GPUs, not nodes.
    assert (runs.loc["8xA100_80GB-baseline", "gpus_per_worker"], runs.loc["8xA100_80GB-baseline", "batch_size_per_gpu"]) == (8, 256)
    assert v07["source"] == "mlcommons/training_results_v0.7" and v07["software_stack"] == "tuned"
    assert (v07["software_year"], runs.loc["dgxa100_n2", "software_year"]) == (2020, 2022)  # the rounds' years
    ssd = runs.loc["new-ssd"]
    assert (ssd["gpu"], ssd["model"], ssd["intra_node_link"]) == ("A100-SXM4-80GB", "retinanet-fused-loss", "nvswitch-gen2")  # "(400W)" dropped
    mask = runs.loc["dgxa100_n2"]
    assert (mask["gpu"], mask["architecture"], mask["network"], mask["nics_per_node"], mask["collected_at"]) == (
        "A100-SXM4-80GB", "allreduce-cluster", "infiniband-hdr", 8, "2022-06-29",
    )  # fmt: skip
    dgx2h = runs.loc["dgx2h_n2"]
    assert (dgx2h["gpu"], dgx2h["intra_node_link"], dgx2h["network"], dgx2h["gpus_per_worker"]) == ("V100-SXM3-32GB", "nvswitch-gen1", "infiniband-edr", 16)
    assert dgx2h["measured_step_time_s"] == pytest.approx(1024 / 6400.0)
    # The original DLRM (v0.7-v2.1): HugeCTR, or NVIDIA's PyTorch implementation where the text names only it.
    hugectr, pyt = runs.loc["dlrm-box"], runs.loc["dlrm-pyt"]
    assert (hugectr["model"], hugectr["framework"], hugectr["batch_size_per_gpu"]) == ("dlrm-dot", "other", 6912)
    assert hugectr["measured_step_time_s"] == pytest.approx(55296 / 3e6)
    assert (pyt["model"], pyt["framework"], pyt["batch_size_per_gpu"]) == ("dlrm-dot", "pytorch", 3456)


def test_maskrcnn_throughput_counts_coco_epochs_not_logged_iterations(tmp_path):
    # train_samples logs SOLVER.MAX_ITER (80000, 40000): progress as epochs x 80000 is 80000/117266 of the images.
    rows = [
        row("v2.1", "four", "maskrcnn", "NVIDIA A100-SXM-40GB", 4, 1, 48, 227.2, train_samples_per_epoch=80000),
        row("v2.1", "eight", "maskrcnn", "NVIDIA A100-SXM-40GB", 8, 1, 96, 227.2, train_samples_per_epoch=40000),
        row("v2.0", "tpu-like", "maskrcnn", "NVIDIA A100-SXM-40GB", 8, 1, 96, 500.0, train_samples_per_epoch=117266),
        row("v2.0", "resnet", "resnet", "NVIDIA A100-SXM-40GB", 8, 1, 1024, 20000.0, train_samples_per_epoch=40000),
    ]
    runs = import_mlperf_rounds(write_rows(tmp_path / "mask.csv", HEADER, rows)).runs.set_index("system")
    assert runs.loc["four", "measured_step_time_s"] == pytest.approx(48 / (227.2 * 117266 / 80000))
    assert runs.loc["eight", "measured_step_time_s"] == pytest.approx(96 / (227.2 * 117266 / 40000))
    assert runs.loc["tpu-like", "measured_step_time_s"] == pytest.approx(96 / 500.0)  # an image count stays
    assert runs.loc["resnet", "measured_step_time_s"] == pytest.approx(1024 / 20000.0)  # other benchmarks stay


def test_node_counts_in_system_names():
    systems = ["2xC4140", "16xXE8545x4A100-SXM-40GB", "8xA100_80GB-baseline", "2xa30_ngc22.04_mxnet", "dgxa100_n2", "XE8545x4A100"]
    accelerators = ["Nvidia Tesla V100-SXM2-32GB", "NVIDIA A100-SXM-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A30", "NVIDIA A100", "NVIDIA A100"]
    named = named_nodes(pd.Series(systems), pd.Series(accelerators))
    assert list(named[:2]) == [2.0, 16.0] and pd.isna(named[2:]).all()


def test_real_table(shared_data):
    result = import_mlperf_rounds(shared_data / "mlperf_training_v0.7-v3.0.csv")
    counts = result.counts()
    assert counts["rows"] == 1156 and counts["mapped"] >= 600
    assert counts["excluded_by_reason"]["large-model layout job (tensor/pipeline parallel)"] >= 5
    # v0.7's 2xC4140 and 4xC4140: the one ResNet-50 each that is not SSD-ResNet34.
    assert counts["excluded_by_reason"]["node count contradicts the system's name"] == 2
    runs = result.runs
    assert {"A100-SXM4-80GB", "A100-PCIE-80GB", "H100-SXM5-80GB", "A30", "A40", "V100-SXM3-32GB"} <= set(runs["gpu"])
    assert {"v0.7", "v1.0", "v1.1", "v2.0", "v2.1", "v3.0"} == {s.rsplit("_", 1)[1] for s in runs["source"]}
    assert "gpt3-175b" not in set(runs["model"])
    # Rescaled Mask R-CNN: one Dell system (4 x A100-SXM-40GB) logged 40000 in v2.0 and 80000 in v2.1; as read
    # the v2.1 run was 2.06x as fast per GPU, rescaled the two agree within 3%.
    dell = runs[runs["source_id"].isin(["v2.0/Dell/XE8545x4A100-SXM-40GB/maskrcnn", "v2.1/Dell/XE8545x4A100-SXM-40GB/maskrcnn"])]
    per_gpu = dell["batch_size_per_gpu"] / dell["measured_step_time_s"]
    assert len(per_gpu) == 2 and per_gpu.max() / per_gpu.min() < 1.03
