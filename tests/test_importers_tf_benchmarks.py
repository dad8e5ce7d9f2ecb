"""TensorFlow 2017 GPU benchmarks importer: PS/Worker across instances, replicated in one host; and the real table."""

from __future__ import annotations

import pytest
from table_rows import reasons, write_rows

from training.importers import import_tf_benchmarks

HEADER = (
    "source,system,gpu,gpus_per_node,nodes,total_gpus,architecture,parameter_servers,ps_device,interconnect,"
    "interconnect_inferred,framework,model,batch_size_per_gpu,precision,data,throughput,throughput_unit,notes,"
    "variable_update_as_stated,test_date,identical_in_other_version"
).split(",")
MAY = "tensorflow/tensorflow@6535ed7c270f:tensorflow/docs_src/performance/benchmarks.md (May 2017 version; read_file id 1)"
APRIL = "tensorflow/tensorflow:tensorflow/docs_src/performance/benchmarks.md (April 2017 version; read_file id 2)"
K80 = "Tesla K80 (one GK210 die; 8 dies = 4 boards per 8-GPU instance)"
P100 = "Tesla P100 (DGX-1; SXM2 not stated)"


def row(key, system, gpu, per_node, nodes, model, update, throughput, source=MAY, servers="", identical="False", **extra):
    return {
        "source": source, "system": system, "gpu": gpu, "gpus_per_node": per_node, "nodes": nodes, "total_gpus": per_node * nodes,
        "parameter_servers": servers, "framework": "TensorFlow (git b1e174e)", "model": model, "batch_size_per_gpu": 64,
        "precision": "fp32", "data": "synthetic", "throughput": throughput, "throughput_unit": "images/sec", "notes": key,
        "variable_update_as_stated": update, "test_date": "May 2017", "identical_in_other_version": identical, **extra,
    }  # fmt: skip


ROWS = [
    row("dgx1-single", "NVIDIA DGX-1", P100, 1, 1, "ResNet-50", "parameter_server, local_parameter_device=cpu", 219.0, identical="True"),
    row("dgx1-single-april", "NVIDIA DGX-1", P100, 1, 1, "ResNet-50", "parameter_server, local_parameter_device=cpu", 219.0, source=APRIL, identical="True", test_date="April 2017"),
    row("p2-cluster", "Amazon EC2 p2.8xlarge cluster", K80, 8, 4, "InceptionV3", "distributed_replicated", 640.0, servers="4"),
    row("dgx1-nccl", "NVIDIA DGX-1", P100, 8, 1, "ResNet-152", "replicated (with NCCL)", 800.0),
    row("dgx1-ps", "NVIDIA DGX-1", P100, 8, 1, "ResNet-50", "parameter_server, local_parameter_device=cpu", 1600.0),
    row("alexnet", "NVIDIA DGX-1", P100, 1, 1, "AlexNet", "parameter_server, local_parameter_device=cpu", 2000.0),
    row("tensorpack", "8x P100 server", "Tesla P100", 8, 1, "ResNet-50", "replicated", 1600.0),
    row("p2-xlarge", "Amazon EC2 p2.xlarge cluster, 1 GPU per node", K80, 1, 8, "InceptionV3", "distributed_replicated", 200.0, servers="8"),
]


@pytest.fixture
def tf_csv(tmp_path):
    return write_rows(tmp_path / "tf.csv", HEADER, ROWS)


def test_every_row_is_mapped_or_excluded_with_its_reason(tf_csv):
    runs, excluded = import_tf_benchmarks(tf_csv)
    assert len(runs) + len(excluded) == len(ROWS) and len(runs) == 3
    assert reasons(excluded, "notes") == {
        "dgx1-single-april": "same value as the May 2017 version of the page",
        "dgx1-ps": "parameter server inside one host",
        "alexnet": "model not in the workload catalogue",
        "tensorpack": "gpu variant not stated",
        "p2-xlarge": "network not in the link catalogue",
    }


def test_mapping_rules(tf_csv):
    runs = import_tf_benchmarks(tf_csv).runs.set_index("model")
    single = runs.loc["resnet50"]
    assert (single["gpu"], single["architecture"], single["framework"]) == ("P100-SXM2-16GB", "single", "tensorflow")
    assert single["measured_step_time_s"] == pytest.approx(64 / 219.0)
    ps = runs.loc["inception-v3"]
    assert (ps["architecture"], ps["workers"], ps["gpus_per_worker"], ps["parameter_servers"], ps["nodes"]) == ("ps-worker", 4, 8, 4, 4)
    assert (ps["gpu"], ps["network"], ps["nics_per_node"]) == ("K80", "ethernet-10g", 1)
    assert ps["measured_step_time_s"] == pytest.approx(32 * 64 / 640.0)
    nccl = runs.loc["resnet152"]
    assert (nccl["architecture"], nccl["gpus_per_worker"], nccl["measured_step_time_s"]) == ("allreduce-local", 8, pytest.approx(8 * 64 / 800.0))
    assert set(runs["source"]) == {"tensorflow/tensorflow"}
    assert set(runs["software_year"]) == {2017}  # the pages' test dates, May and April 2017


def test_real_table(shared_data):
    result = import_tf_benchmarks(shared_data / "ps_worker_gpu_measured.csv")
    counts = result.counts()
    assert counts["rows"] == 499 and counts["mapped"] >= 150
    runs = result.runs
    ps = runs[runs["architecture"] == "ps-worker"]
    # The only public PS/Worker measurements on GPUs: p2.8xlarge instances (K80) over 10 GbE.
    assert len(ps) >= 30 and set(ps["network"]) == {"ethernet-10g"} and set(ps["gpu"]) == {"K80"}
    assert set(runs["gpu"]) == {"K80", "P100-SXM2-16GB"}
