"""All sources together: the default set, validation across sources, CV groups and the sources report."""

from __future__ import annotations

import pandas as pd
import pytest
import test_importers_dle as dle
import test_importers_dlperf as dlperf
from table_rows import write_rows
from typer.testing import CliRunner

from training.dataset import cv_groups, network_of
from training.importers import IMPORTERS
from training.sources import app, default_tables, gather_runs, sources_report


@pytest.fixture
def data_dir(tmp_path):
    write_rows(tmp_path / IMPORTERS["dle"].default_file, dle.HEADER, dle.ROWS)
    write_rows(tmp_path / IMPORTERS["dlperf"].default_file, dlperf.HEADER, dlperf.ROWS)
    return tmp_path


def test_default_tables_are_the_registered_files_present(data_dir):
    assert default_tables(data_dir) == {"dle": data_dir / "dle_training_throughput.csv", "dlperf": data_dir / "dlperf_v100_cluster.csv"}


def test_gathered_sources_are_validated_together_and_counted(data_dir):
    gathered = gather_runs(tables=default_tables(data_dir), default=False)
    assert (gathered.counts["dle"]["mapped"], gathered.counts["dlperf"]["mapped"]) == (7, 3)  # BERT phase 1 among them
    assert gathered.counts["combined"] == {"accepted": 10, "rejected": 0}
    assert set(gathered.runs["source"]) == {"NVIDIA/DeepLearningExamples", "Oneflow-Inc/DLPerf"}
    report = sources_report(gathered)
    assert "| dle | `dle_training_throughput.csv` | 14 | 7 | 7 |" in report
    assert "| individual repeat (the reported median is mapped) | 1 |" in report
    assert "## Repeated jobs: the floor under any predictor" in report


def test_unknown_source_name_is_a_domain_error(data_dir):
    from features.errors import SpecError

    with pytest.raises(SpecError, match="allowed: lambda"):
        gather_runs(tables={"lamda": data_dir / "dle_training_throughput.csv"}, default=False)


def test_cv_groups_share_a_gpu_type_across_sources_and_keep_mlperf_by_benchmark():
    runs = pd.DataFrame({
        "source": ["lambdal/deeplearning-benchmark", "NVIDIA/DeepLearningExamples", "Oneflow-Inc/DLPerf",
                   "mlcommons/training_results_v0.7", "mlcommons/training_results_v3.1", "testbed"],
        "gpu": ["V100-SXM2-16GB", "V100-SXM2-16GB", "V100-SXM2-16GB", "V100-SXM2-32GB", "H100-SXM5-80GB", "cpu-host"],
        "model": ["resnet50", "bert-large", "resnet50", "resnet50", "resnet50", "testbed-resnet"],
        "architecture": ["single", "allreduce-local", "allreduce-cluster", "allreduce-local", "allreduce-local", "ps-worker"],
        "workers": [1, 1, 4, 1, 1, 4], "parameter_servers": [None, None, None, None, None, 2],
    })  # fmt: skip
    groups = cv_groups(runs)
    assert list(groups[:3]) == ["V100-SXM2-16GB"] * 3
    assert list(groups[3:5]) == ["mlperf:resnet50", "mlperf:resnet50"]
    assert groups[5].startswith("testbed:ps-worker:4:2")


def test_layout_variants_of_one_network_share_a_held_out_group():
    # Unpadded and binned BERT-large pre-training is the padded network on another layout of the same
    # data: holding BERT-large out must take all three out of training.
    models = ["bert-large", "bert-large-unpadded", "bert-large-binned", "bert-large-squad", "resnet50"]
    assert list(network_of(models)) == ["bert-large", "bert-large", "bert-large", "bert-large-squad", "resnet50"]
    runs = pd.DataFrame({"source": ["mlcommons/training_results_v3.1"] * 2, "gpu": ["H100-SXM5-80GB"] * 2,
                         "model": ["bert-large-unpadded", "resnet50"], "architecture": ["allreduce-local"] * 2,
                         "workers": [1, 1], "parameter_servers": [None, None]})  # fmt: skip
    assert list(cv_groups(runs)) == ["mlperf:bert-large", "mlperf:resnet50"]


def test_report_command_writes_markdown(data_dir, tmp_path):
    out = tmp_path / "report" / "sources.md"
    result = CliRunner().invoke(app, ["--data", str(data_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and out.read_text().startswith("# Measured runs by source")


def test_report_command_help_has_an_example():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "Example" in result.output


def test_every_shared_table_is_imported_and_every_row_accounted_for(shared_data):
    gathered = gather_runs()
    assert set(IMPORTERS) <= set(gathered.counts)
    for name in IMPORTERS:
        counts = gathered.counts[name]
        rows = len(pd.read_csv(shared_data / IMPORTERS[name].default_file, usecols=[0]))
        assert counts["rows"] == rows == counts["mapped"] + counts["excluded"], name
        assert counts["mapped"] > 150, name
    assert gathered.counts["combined"]["rejected"] == 0
    assert len(gathered.runs) > 5000
