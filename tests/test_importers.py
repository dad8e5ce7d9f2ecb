"""Importers of the public benchmark tables: mapping rules, exclusions, counts and the CLI."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from features.workloads import FIGURES, WorkloadCatalog, workload_catalog
from training.importers import app, import_lambda, import_mlperf, mlperf_framework, parse_host_networking
from training.runs import faster_than_one_gpu, load_runs

LAMBDA_HEADER = (
    "source,suite_version,system_name,vendor,gpu,form_factor,n_gpus,n_nodes,intra_node_link,framework,model,"
    "model_desc,precision,global_batch_size,per_gpu_batch_size,throughput,throughput_unit,throughput_per_gpu,"
    "step_time_s,suspect,note"
).split(",")
MLPERF_HEADER = (
    "source,round,submitter,division,availability,system,benchmark,accelerator,accelerators_per_node,n_nodes,"
    "n_accelerators,accelerator_memory,accelerator_interconnect,host_networking,host_processor,framework,"
    "global_batch_size,train_samples_per_epoch,n_runs,n_runs_with_throughput,train_throughput_samples_per_s,"
    "throughput_rel_spread,throughput_per_accelerator,step_time_s,median_time_to_train_min,progress_event,suspect"
).split(",")
PYTORCH_NGC = "PyTorch (NVIDIA DeepLearningExamples, NGC container)"


def lambda_row(system, gpu, n, link, model, precision, batch, throughput, unit="images/s", suspect="", form="SXM"):
    return {
        "source": "lambdal/deeplearning-benchmark", "suite_version": "v2", "system_name": system, "vendor": "Lambda Cloud",
        "gpu": gpu, "form_factor": form, "n_gpus": n, "n_nodes": 1, "intra_node_link": link, "framework": PYTORCH_NGC,
        "model": model, "model_desc": "", "precision": precision, "global_batch_size": batch * n if batch != "" else "",
        "per_gpu_batch_size": batch, "throughput": throughput, "throughput_unit": unit, "suspect": suspect,
    }  # fmt: skip


LAMBDA_ROWS = [
    lambda_row("1xV100", "V100 16GB", 1, "", "resnet50", "fp32", 256, 400.0),
    lambda_row("8xH100", "H100 SXM5 80GB", 8, "NVLink/NVSwitch", "resnet50", "amp_fp16", 256, 20480.0),
    lambda_row("8xV100", "V100 16GB", 8, "NVLink (SXM2 hybrid cube mesh)", "ssd", "amp_fp16", 64, 2048.0),
    lambda_row("4x2080Ti-nvl", "RTX 2080 Ti", 4, "NVLink bridge", "bert_base_squad", "fp32", 16, 128.0, "sequences/s", form="PCIe"),
    lambda_row("2xA100PCIe", "A100 PCIe 40GB", 2, "PCIe", "maskrcnn", "fp32", 8, 32.0, form="PCIe"),
    lambda_row("1xA100-gnmt", "A100 SXM4 40GB", 1, "", "gnmt", "amp_fp16", 128, 6400.0, "tokens/s"),
    lambda_row("1xA100-tx", "A100 SXM4 40GB", 1, "", "tacotron2", "amp_fp16", 100, 50000.0, "mel-frames/s"),
    lambda_row("8xV100-ncf", "V100 16GB", 8, "NVLink (SXM2 hybrid cube mesh)", "ncf", "fp32", 1000, 5e9, "samples/s", suspect="ncf throughput implausibly high"),
    lambda_row("1xRTX5000", "Quadro RTX 5000", 1, "", "transformerxllarge", "amp_fp16", "", 979.0, "tokens/s", form="PCIe"),
    lambda_row("3xV100-frac", "V100 16GB", 3, "NVLink (SXM2 hybrid cube mesh)", "ncf", "fp32", 3554145.5, 1e7, "samples/s"),
    lambda_row("1xVoodoo", "Voodoo 5 6000", 1, "", "resnet50", "fp32", 32, 10.0, form="PCIe"),
    lambda_row("2xA100PCIe-bridge", "A100 PCIe 40GB", 2, "NVLink bridge", "resnet50", "fp32", 256, 2000.0, form="PCIe"),
]

MLPERF_DEFAULTS = {"source": "mlcommons/training_results_v3.1", "round": "v3.1", "division": "closed", "availability": "onprem", "n_runs": 10}
NDR8 = "Storage: 2x ConnectX-7 IB NDR 400Gb/s, Compute: 8x ConnectX-7 IB NDR 400Gb/s, Management: 100Gb/s Ethernet NIC"


def mlperf_row(submitter, system, benchmark, accelerator, per_node, nodes, interconnect, networking, framework, batch, throughput, suspect="", repeats=10, spread=0.01):
    total = "" if per_node == "" else per_node * nodes
    return {
        **MLPERF_DEFAULTS, "submitter": submitter, "system": system, "benchmark": benchmark, "accelerator": accelerator,
        "accelerators_per_node": per_node, "n_nodes": nodes, "n_accelerators": total, "accelerator_interconnect": interconnect,
        "host_networking": networking, "framework": framework, "global_batch_size": batch, "n_runs_with_throughput": repeats,
        "train_throughput_samples_per_s": throughput, "throughput_rel_spread": spread, "suspect": suspect,
    }  # fmt: skip


MLPERF_ROWS = [
    mlperf_row("NVIDIA", "eos_ngc23.09_pytorch", "bert", "NVIDIA H100-SXM5-80GB", 8, 1, "NVLINK Gen4 900 GB/s + NVSWITCH Gen3", NDR8, "NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", 768, 8000.0),
    mlperf_row("NVIDIA", "eos_n64_ngc23.04_pytorch", "resnet", "NVIDIA H100-SXM5-80GB", 8, 64, "NVLINK Gen4 900 GB/s + NVSWITCH Gen3", NDR8, "NGC MXNet 23.04 , NGC PyTorch 23.04", 16384, 1.6e6),
    mlperf_row("Dell", "2xXE8640x4H100-SXM-80GB", "ssd", "NVIDIA H100-SXM5-80GB", 4, 2, "NVLink Gen4 900GB/s", "4x ConnectX-7 IB NDR 400Gb/Sec", "PyTorch NVIDIA Release 23.09", 512, 2048.0),
    mlperf_row("Clemson", "16xR750-2xA100-PCIe-80GB", "resnet", "NVIDIA A100 - PCIe - 80 GB", 2, 16, "PCIe Gen4: 64 GB / s", "Management: 1 x 25 Gb / Sec Ethernet, Compute: 1 x ConnectX - 6 IB HDR100 100 Gb / Sec", "MxNet NVIDIA Release 22.04", 3200, 32000.0),
    mlperf_row("Krai", "7920T_2xA5000_ssd", "ssd", "NVIDIA RTX A5000", 2, 1, "NVIDIA NVLink", "Ethernet", "PyTorch", 32, 100.0),
    mlperf_row("xFusion", "G5500V7x8xL40", "dlrm_dcnv2", "NVIDIA L40", 8, 1, "", "", "NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", 55296, 5.5296e6),
    mlperf_row("Intel-HabanaLabs", "HLS-Gaudi2-PT", "resnet", "Intel Gaudi2", 8, 1, "24x 100Gb/s Ethernet", "2x Mellanox ConnectX-5 Ex 100Gb/s Ethernet", "PyTorch", 2048, 20000.0),
    mlperf_row("Intel", "16-nodes-SPR-pytorch", "bert", "", "", 16, "", "Intel(R) Corporation Ethernet Controller E810-C for QSFP", "Pytorch", 3072, 1000.0, suspect="accelerator count unknown"),
    mlperf_row("Ailiverse", "8xA100_40GB_open", "resnet", "NVIDIA A100-SXM-40GB", 8, 1, "", "", "PyTorch v1.11.0 + optimizations", 2048, 2500.0, suspect="open division (model/data may differ)"),
    mlperf_row("NVIDIA", "eos-dfw_n512_ngc23.09_nemo", "gpt3", "NVIDIA H100-SXM5-80GB", 8, 512, "NVLINK Gen4 900 GB/s + NVSWITCH Gen3", NDR8, "NVIDIA NeMo Framework Release 23.09", 2048, 500.0),
    mlperf_row("Somebody", "two-nodes-no-fabric", "bert", "NVIDIA H100-SXM5-80GB", 8, 2, "NVLink", "Infiniband", "Pytorch", 256, 2000.0),
    mlperf_row("Somebody", "new-benchmark", "chess", "NVIDIA H100-SXM5-80GB", 8, 1, "NVLink", "", "Pytorch", 256, 2000.0),
]


def write(tmp_path, header, rows, name):
    path = tmp_path / name
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: r.get(k, "") for k in header})
    return path


def workloads_with_units(units: dict[str, float | None]) -> WorkloadCatalog:
    entries = [{
        "name": name, "domain": "language", "description": f"{name} for tests", "flops_per_sample": 1e9,
        "param_count": 1e6, "dense_param_count": 1e6, "memory_bytes_per_sample_fp32": 1e8, "input_bytes_per_sample": 1e3,
        "default_batch_size_per_gpu": 32, "tokens_per_sample": per_sample,
        "provenance": {f: "counted" for f in FIGURES}, "source": {f: "test fixture" for f in FIGURES},
    } for name, per_sample in units.items()]  # fmt: skip
    return WorkloadCatalog.from_dict({"workloads": entries})


@pytest.fixture
def lambda_csv(tmp_path):
    return write(tmp_path, LAMBDA_HEADER, LAMBDA_ROWS, "lambda.csv")


@pytest.fixture
def mlperf_csv(tmp_path):
    return write(tmp_path, MLPERF_HEADER, MLPERF_ROWS, "mlperf.csv")


def by_system(runs: pd.DataFrame) -> pd.DataFrame:
    return runs.set_index("system")


def test_lambda_every_row_is_mapped_or_excluded(lambda_csv):
    # A catalogue whose token-counted models lack tokens_per_sample: their rows cannot become step times.
    no_units = workloads_with_units({"resnet50": None, "gnmt": None, "transformer-xl-base": None, "ncf": None})
    runs, excluded = import_lambda(lambda_csv, workloads=no_units)
    assert len(runs) + len(excluded) == len(LAMBDA_ROWS)
    reasons = dict(zip(excluded["system_name"], excluded["reason"]))
    assert reasons == {
        "1xA100-gnmt": "per-sample unit needs tokens_per_sample",
        "1xA100-tx": "per-sample unit needs tokens_per_sample",
        "8xV100-ncf": "suspect in source",
        "1xRTX5000": "batch size missing",
        "3xV100-frac": "fractional per-GPU batch",
        "1xVoodoo": "unknown gpu",
        "2xA100PCIe-bridge": "intra-node link not available for the gpu",
    }


def test_lambda_mapping_rules(lambda_csv):
    runs = by_system(import_lambda(lambda_csv).runs)
    v100 = runs.loc["1xV100"]
    assert (v100["gpu"], v100["architecture"], v100["workers"], v100["gpus_per_worker"]) == ("V100-SXM2-16GB", "single", 1, 1)
    assert v100["measured_step_time_s"] == pytest.approx(256 / 400.0)
    assert v100["precision"] == "fp32"  # V100 has no TF32 path
    assert v100["intra_node_link"] is None
    h100 = runs.loc["8xH100"]
    assert (h100["architecture"], h100["workers"], h100["gpus_per_worker"], h100["gpus_per_node"]) == ("allreduce-local", 1, 8, 8)
    assert h100["intra_node_link"] == "nvswitch-gen3" and h100["precision"] == "fp16"
    assert h100["measured_step_time_s"] == pytest.approx(8 * 256 / 20480.0)
    assert runs.loc["8xV100", "intra_node_link"] == "nvlink-gen2"
    assert runs.loc["8xV100", "model"] == "ssd300-resnet50"
    assert runs.loc["4x2080Ti-nvl", "intra_node_link"] == "nvlink-bridge-turing"
    assert runs.loc["4x2080Ti-nvl", "model"] == "bert-base-squad"
    assert runs.loc["4x2080Ti-nvl", "measured_step_time_s"] == pytest.approx(4 * 16 / 128.0)
    a100 = runs.loc["2xA100PCIe"]
    assert (a100["intra_node_link"], a100["model"], a100["precision"]) == ("pcie-gen4", "mask-rcnn", "tf32")
    assert set(runs["source"]) == {"lambdal/deeplearning-benchmark"}
    assert set(runs["software_stack"]) == {"stock"} and set(runs["framework"]) == {"pytorch"}
    assert runs["source_id"].is_unique


def test_lambda_token_units_use_the_workload_units_per_sample(lambda_csv):
    # gnmt: 128 sentences x 50 tokens / 6400 tokens/s = 1.0 s; tacotron2: 100 x 800 frames / 50000 = 1.6 s.
    workloads = workloads_with_units({"resnet50": None, "gnmt": 50.0, "tacotron2": 800.0})
    runs, excluded = import_lambda(lambda_csv, workloads=workloads)
    runs = by_system(runs)
    assert runs.loc["1xA100-gnmt", "measured_step_time_s"] == pytest.approx(1.0)
    assert runs.loc["1xA100-tx", "measured_step_time_s"] == pytest.approx(1.6)
    assert "per-sample unit needs tokens_per_sample" not in set(excluded["reason"])


def test_lambda_transformer_xl_is_the_suites_configuration(tmp_path):
    # Every config file passes --tgt_len 256 --mem_len 256 to the large model, and neither model gets --adaptive:
    # 8 segments of 256 tokens at 1,024 tokens/s is a 2.0 s step of the large network with a full softmax.
    rows = [
        lambda_row("1xA100-txl", "A100 SXM4 40GB", 1, "", "transformerxllarge", "amp_fp16", 8, 1024.0, "tokens/s"),
        # 4 GPUs, global batch 96 (24 a GPU) at 20,000 tokens/s summed over the 4 processes: without --multi_gpu ddp
        # they are 4 replicas, each a one-GPU step of 24 x 192 tokens at 5,000 tokens/s.
        lambda_row("4xA6000-txl", "RTX A6000", 4, "NVLink bridge", "transformerxlbase", "amp_fp16", 24, 20000.0, "tokens/s", form="PCIe"),
    ]
    runs = by_system(import_lambda(write(tmp_path, LAMBDA_HEADER, rows, "txl.csv")).runs)
    large, base = runs.loc["1xA100-txl"], runs.loc["4xA6000-txl"]
    assert large["model"] == "transformer-xl-large-256-full-softmax" and large["measured_step_time_s"] == pytest.approx(8 * 256 / 1024.0)
    assert large["mixed_precision"] == "half"  # train.py --fp16: apex O2
    assert base["model"] == "transformer-xl-base-full-softmax"
    assert (base["architecture"], base["gpus_per_worker"], base["gpus_per_node"], base["batch_size_per_gpu"]) == ("single", 1, 1, 24)
    assert pd.isna(base["intra_node_link"])
    assert base["measured_step_time_s"] == pytest.approx(24 * 192 / 5000.0)
    assert workload_catalog().get("transformer-xl-large-256-full-softmax").network_of == "transformer-xl-large"


def test_lambda_bert_and_gnmt_train_a_half_precision_model(lambda_csv):
    # The suite's BERT, GNMT and Transformer-XL scripts hold the model at FP16 (apex AMP O2); the others cast per operator.
    runs = by_system(import_lambda(lambda_csv).runs)
    assert runs.loc["4x2080Ti-nvl", "mixed_precision"] == "half"  # bert_base_squad (at FP32: changes nothing)
    assert runs.loc["1xA100-gnmt", "mixed_precision"] == "half"
    assert runs.loc["8xH100", "mixed_precision"] == "autocast"  # resnet50
    assert runs.loc["1xA100-tx", "mixed_precision"] == "autocast"  # tacotron2


def test_lambda_v0_resnet50_and_ncf_fp16_tasks_train_a_half_precision_model(tmp_path):
    # Suite v0's ResNet-50 FP16 task passes --fp16 (network_to_half) and NCF's --opt_level O2; from v1 both autocast.
    rows = [dict(lambda_row(f"{v}-{m}", "V100 16GB", 1, "", m, "amp_fp16", 256, 1000.0), suite_version=v) for v in ("v0", "v1") for m in ("resnet50", "ncf", "ssd")]
    runs = by_system(import_lambda(write(tmp_path, LAMBDA_HEADER, rows, "v0.csv")).runs)
    assert runs["mixed_precision"].to_dict() == {
        "v0-resnet50": "half", "v0-ncf": "half", "v0-ssd": "autocast", "v1-resnet50": "autocast", "v1-ncf": "autocast", "v1-ssd": "autocast",
    }  # fmt: skip


def test_lambda_suite_versions_run_their_ngc_releases_year(tmp_path):
    # v0: NGC PyTorch 20.01; v1: 22.09 and later; v2: 24.10 (the v2 runs' sys_pytorch.txt).
    rows = [dict(lambda_row(v, "V100 16GB", 1, "", "resnet50", "amp_fp16", 256, 1000.0), suite_version=v) for v in ("v0", "v1", "v2")]
    runs = by_system(import_lambda(write(tmp_path, LAMBDA_HEADER, rows, "versions.csv")).runs)
    assert runs["software_year"].to_dict() == {"v0": 2020, "v1": 2022, "v2": 2024}


def test_lambda_output_loads_once_the_models_are_catalogued(lambda_csv, tmp_path):
    runs, _ = import_lambda(lambda_csv)
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    loaded = load_runs(path)
    # Every model the importer maps is in the shipped workload catalogue, so every mapped row loads.
    assert loaded.n_rows == len(runs) == loaded.n_accepted


def test_mlperf_every_row_is_mapped_or_excluded(mlperf_csv):
    runs, excluded = import_mlperf(mlperf_csv)
    assert len(runs) + len(excluded) == len(MLPERF_ROWS)
    reasons = dict(zip(excluded["system"], excluded["reason"]))
    assert reasons == {
        "HLS-Gaudi2-PT": "non-NVIDIA accelerator",
        "16-nodes-SPR-pytorch": "no accelerator (CPU-only submission)",
        "8xA100_40GB_open": "suspect in source",
        "eos-dfw_n512_ngc23.09_nemo": "large-model layout job (tensor/pipeline parallel)",
        "two-nodes-no-fabric": "multi-node row without a network",
        "new-benchmark": "unmapped benchmark",
    }


def test_mlperf_mapping_rules(mlperf_csv):
    runs = by_system(import_mlperf(mlperf_csv).runs)
    eos = runs.loc["eos_ngc23.09_pytorch"]
    assert (eos["model"], eos["precision"], eos["framework"], eos["architecture"]) == ("bert-large-unpadded", "fp8", "pytorch", "allreduce-local")
    assert eos["intra_node_link"] == "nvswitch-gen3" and eos["network"] is None
    assert eos["measured_step_time_s"] == pytest.approx(768 / 8000.0)
    assert eos["batch_size_per_gpu"] == 96
    assert (eos["repeats"], eos["spread_rel"], eos["collected_at"]) == (10, pytest.approx(0.01), "2023-11-08")
    assert eos["software_stack"] == "tuned" and eos["software_year"] == 2023

    cluster = runs.loc["eos_n64_ngc23.04_pytorch"]
    assert (cluster["architecture"], cluster["nodes"], cluster["workers"], cluster["gpus_per_worker"]) == ("allreduce-cluster", 64, 64, 8)
    assert (cluster["network"], cluster["nics_per_node"], cluster["framework"], cluster["model"]) == ("infiniband-ndr", 8, "mxnet", "resnet50")
    assert cluster["batch_size_per_gpu"] == 16384 / 512

    dell = runs.loc["2xXE8640x4H100-SXM-80GB"]  # 4-GPU HGX board, no NVSwitch named
    assert (dell["intra_node_link"], dell["network"], dell["nics_per_node"], dell["model"]) == ("nvlink-gen4", "infiniband-ndr", 4, "retinanet-fused-loss")

    clemson = runs.loc["16xR750-2xA100-PCIe-80GB"]
    assert (clemson["gpu"], clemson["intra_node_link"], clemson["network"], clemson["nics_per_node"]) == (
        "A100-PCIE-80GB", "pcie-gen4", "infiniband-hdr100", 1,
    )  # fmt: skip
    assert clemson["precision"] == "fp16"

    krai = runs.loc["7920T_2xA5000_ssd"]
    assert (krai["intra_node_link"], krai["precision"]) == ("nvlink-bridge-ampere", "fp16")

    l40 = runs.loc["G5500V7x8xL40"]
    assert (l40["model"], l40["framework"], l40["intra_node_link"], l40["precision"]) == ("dlrm-dcnv2", "other", None, "fp16")


@pytest.mark.parametrize(
    "text,link,nics",
    [
        ("8x ConnectX-7 IB NDR 400Gb/Sec", "infiniband-ndr", 8),
        ("4x ConnectX-7 IB NDR 400Gb/Sec", "infiniband-ndr", 4),
        (NDR8, "infiniband-ndr", 8),
        ("Storage+Management: 1x NVIDIA BlueField 2 DPU 100Gb/s, Compute: 8x NVIDIA ConnectX-7 IB NDR 400Gb/s", "infiniband-ndr", 8),
        ("Management: 1x Bluefield-2 DPU Ethernet 100Gb/Sec, Compute: 8x ConnectX-7 InfiniBand NDR 400Gb/Sec", "infiniband-ndr", 8),
        ("1x Ethernet 80Gb/Sec, 8x NVIDIA NDR (400Gb/s)", "infiniband-ndr", 8),
        ("1x Ethernet 100Gb/Sec, 8x NVIDIA Quantum-2 CX7 InfiniBand (400Gb/s)", "infiniband-ndr", 8),
        ("Management: 1 x 25 Gb / Sec Ethernet, Compute: 1 x ConnectX - 6 IB HDR100 100 Gb / Sec", "infiniband-hdr100", 1),
        ("2x Mellanox ConnectX-5 Ex 100Gb/s Ethernet", "ethernet-100g", 2),
        ("Intel XXV710 25Gb/s Ethernet", "ethernet-25g", 1),
        (" ConnectX-6 25Gb/s Ethernet", "ethernet-25g", 1),
        ("Gig Ethernet", "ethernet-1g", 1),
        ("8x200Gb/s HDR InfiniBand per node", "infiniband-hdr", 8),
        ("NetXtreme BCM5719 Gigabit Ethernet PCIe", "ethernet-1g", 1),
        ("Intel(R) Corporation Ethernet Controller E810-C for QSFP", "ethernet-100g", 1),
        ("Management: 1x Ethernet 10GB/Sec", None, None),
        ("Infiniband", None, None),
        ("Ethernet", None, None),
        ("Ethernet, Infiniband", None, None),
        ("", None, None),
        (None, None, None),
    ],
)
def test_host_networking_rules(text, link, nics):
    assert parse_host_networking(text)[:2] == (link, nics)


@pytest.mark.parametrize(
    "text,benchmark,framework",
    [
        ("NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", "resnet", "mxnet"),
        ("NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", "bert", "pytorch"),
        ("NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09", "dlrm_dcnv2", "other"),
        # The original DLRM: HugeCTR, or NVIDIA's PyTorch implementation (v0.7) where the text names it alone.
        ("Merlin HugeCTR with NVIDIA DL Frameworks Release 20.06", "dlrm", "other"),
        ("PyTorch NVIDIA Release 20.06", "dlrm", "pytorch"),
        ("NGC MXNet 21.05 , NGC PyTorch 21.05 , NGC TensorFlow 21.05-tf1", "dlrm", "other"),
        ("NVIDIA Release 22.04 Tensorflow, MxNet, pytorch, hugectr", "dlrm", "other"),
        ("PyTorch NVIDIA Release 20.06", "dlrm_dcnv2", "other"),
        ("MxNet NVIDIA Release 22.04", "bert", "pytorch"),
        ("NVIDIA NeMo Framework Release 23.09", "gpt3", "pytorch"),
        ("NGC MLPerf Training v3.1", "unet3d", "mxnet"),
        ("TensorFlow 2.13.0", "resnet", "tensorflow"),
        ("PAX", "gpt3", "jax"),
        (None, "rnnt", "pytorch"),
    ],
)
def test_mlperf_framework_rule(text, benchmark, framework):
    assert mlperf_framework(text, benchmark) == framework


def test_cli_prints_counts_and_writes_a_loadable_table(lambda_csv, tmp_path):
    out = tmp_path / "runs.parquet"
    excluded = tmp_path / "excluded.csv"
    result = CliRunner().invoke(app, ["lambda", str(lambda_csv), "--out", str(out), "--excluded", str(excluded)])
    assert result.exit_code == 0, result.output
    # With the shipped catalogue the token-counted rows (gnmt, transformer-xl) become step times.
    assert f"{len(LAMBDA_ROWS)} rows: 7 mapped, 5 excluded" in result.output
    assert "suspect in source" in result.output
    assert load_runs(out).n_rows == 7
    assert len(pd.read_csv(excluded)) == 5


def test_cli_reports_bad_input_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["mlperf", str(tmp_path / "missing.csv")])
    assert result.exit_code == 2
    assert "error:" in result.output
    assert "Traceback" not in result.output


def test_cli_has_help_with_an_example():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "Example" in result.output


def test_a_data_parallel_step_shorter_than_one_gpus_beyond_host_spread_is_excluded(tmp_path):
    """One H100 does 320 sequences in 320 / 868 = 0.369 s; eight at 1,200 sequences/s each take 0.267 s
    a step, 1.38x shorter: excluded. Eight at 850 each, and two at 1.2x (inside the 1.25x spread), stay;
    a count with no one-GPU row of the same configuration (another batch, another suite) is never judged."""
    h100 = "H100 SXM5 80GB"
    rows = [
        lambda_row("1xH100", h100, 1, "", "bert_base_squad", "amp_fp16", 320, 868.0, "sequences/s"),
        lambda_row("8xH100-fast", h100, 8, "NVLink/NVSwitch", "bert_base_squad", "amp_fp16", 320, 8 * 1200.0, "sequences/s"),
        lambda_row("8xH100", h100, 8, "NVLink/NVSwitch", "bert_base_squad", "amp_fp16", 320, 8 * 850.0, "sequences/s"),
        lambda_row("2xH100", h100, 2, "NVLink/NVSwitch", "bert_base_squad", "amp_fp16", 320, 2 * 1.2 * 868.0, "sequences/s"),
        lambda_row("8xH100-b256", h100, 8, "NVLink/NVSwitch", "bert_base_squad", "amp_fp16", 256, 8 * 1500.0, "sequences/s"),
        {**lambda_row("8xH100-v1", h100, 8, "NVLink/NVSwitch", "bert_base_squad", "amp_fp16", 320, 8 * 1200.0, "sequences/s"), "suite_version": "v1"},
    ]
    runs, excluded = import_lambda(write(tmp_path, LAMBDA_HEADER, rows, "lambda.csv"))
    assert list(excluded["system_name"]) == ["8xH100-fast"]
    assert excluded["reason"].iloc[0] == "faster per GPU than on one GPU"
    assert excluded["detail"].iloc[0] == "8 GPUs step 0.2667 s, one GPU 0.3687 s at the same per-GPU batch (1.38x)"
    assert set(runs["system"]) == {"1xH100", "8xH100", "2xH100", "8xH100-b256", "8xH100-v1"}


def test_faster_than_one_gpu_takes_the_median_of_the_standing_one_gpu_rows():
    keys = np.array(["a", "a", "a", "a", "a", "b"], object)
    gpus = np.array([1, 1, 1, 4, 4, 4])
    step = np.array([1.0, 1.2, 9.0, 0.79, 0.81, 0.1])
    standing = np.array([True, True, False, True, True, True])  # the 9 s row was excluded before: not a partner
    flagged, one_gpu_s = faster_than_one_gpu(keys, gpus, step, standing)
    # One-GPU median of the standing rows: 1.1 s; 1.1 / 0.79 = 1.39 > 1.25, 1.1 / 0.81 = 1.36 > 1.25; "b" has no partner.
    assert flagged.tolist() == [False, False, False, True, True, False]
    assert one_gpu_s[:5] == pytest.approx([1.1] * 5) and np.isnan(one_gpu_s[5])
    flagged, _ = faster_than_one_gpu(keys, gpus, np.array([1.0, 1.2, 9.0, 0.89, 0.88, 0.1]), standing)
    assert not flagged.any()  # 1.1 / 0.88 = 1.25: within the spread


def test_full_lambda_import(shared_data):
    result = import_lambda(shared_data / "lambda_throughput.csv")
    counts = result.counts()
    reasons = counts["excluded_by_reason"]
    assert counts["rows"] == 3359
    assert (reasons["suspect in source"], reasons["batch size missing"], reasons["fractional per-GPU batch"]) == (22, 2, 5)
    # The 1,874 rows counting samples, less 22 suspect and 5 fractional batches, map unless the job
    # rules refuse them (NCF per-GPU batches above the job spec's limit).
    per_sample_models = {"gnmt", "transformer-xl-base-full-softmax", "transformer-xl-large-256-full-softmax", "tacotron2", "waveglow"}
    sample_rows = int((~result.runs["model"].isin(per_sample_models)).sum())
    refused = reasons.get("fails run-table rules: workload.batch_size_per_gpu", 0)
    # BERT-base SQuAD and NCF on several GPUs faster per GPU than on one (55 rows).
    assert reasons["faster per GPU than on one GPU"] == 55
    assert sample_rows + refused + 55 == 1874 - 22 - 5
    # Token, frame and audio-sample rows (1,485, two without a batch) map or wait for tokens_per_sample.
    assert len(result.runs) - sample_rows + reasons.get("per-sample unit needs tokens_per_sample", 0) == 1485 - 2


def test_full_mlperf_import(shared_data):
    result = import_mlperf(shared_data / "mlperf_training_v3.1.csv")
    counts = result.counts()
    assert (counts["rows"], counts["mapped"], counts["excluded"]) == (209, 182, 27)
    assert counts["excluded_by_reason"] == {
        "large-model layout job (tensor/pipeline parallel)": 8,  # 6 GPT-3 and 2 Llama 2 70B LoRA rows on NVIDIA GPUs
        "fewer samples than accelerators per step": 3,
        "non-NVIDIA accelerator": 8,
        "no accelerator (CPU-only submission)": 6,
        "suspect in source": 1,
        "fractional per-GPU batch": 1,
    }
    runs = result.runs
    assert int((runs["architecture"] == "allreduce-cluster").sum()) == 25  # the 2 multi-node Llama 2 LoRA rows are layout jobs
    assert set(runs.loc[runs["architecture"] == "allreduce-cluster", "network"]) == {"infiniband-ndr", "infiniband-hdr100"}
