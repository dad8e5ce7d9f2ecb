"""DeepLearningExamples importer: model, unit and fabric rules on hand-written README rows, and the real tables."""

from __future__ import annotations

import numpy as np
import pytest
from table_rows import reasons, write_rows

from features.errors import SpecError
from training.importers import import_dle, import_dle_history
from training.importers.dle import lddl_binned, software_years
from training.runs import load_runs

HEADER = (
    "source,readme_line,model,model_variant,model_dir,framework,section_heading,system,gpu,gpus_total,gpus_per_node,nodes,"
    "nodes_source,interconnect,interconnect_inferred,precision,xla,batch_size_per_gpu,batch_parse_note,throughput,"
    "throughput_unit,unit_source,throughput_column,other_config,container,raw_row,suspect"
).split(",")
HDR_FABRIC = "NVLink3 via NVSwitch (600 GB/s/GPU) intra-node; multi-node: 8x200Gb/s HDR InfiniBand per node [DGX A100 spec, not stated in README]"
DGX1 = "NVLink2 hybrid cube-mesh (V100) [DGX-1 spec, not stated in README]"
PRETRAIN = "Training performance results > Pre-training NVIDIA DGX A100 (8x A100 80GB) Multi-node Scaling"


def row(key, model_dir, gpu, gpus, per_node, nodes, precision, batch, throughput, unit, **extra):
    framework = model_dir.split("/")[0]
    return {
        "source": f"NVIDIA/DeepLearningExamples:{model_dir}/README.md@729963dd47e7", "readme_line": key, "model": model_dir.split("/")[-1],
        "model_dir": model_dir, "framework": framework, "section_heading": "Training performance results", "system": "DGX",
        "gpu": gpu, "gpus_total": gpus, "gpus_per_node": per_node, "nodes": nodes, "precision": precision,
        "batch_size_per_gpu": batch, "throughput": throughput, "throughput_unit": unit, "throughput_column": "Throughput",
        "container": "20.12-py3", "raw_row": f"row {key}", **extra,
    }  # fmt: skip


ROWS = [
    row(1, "PyTorch/Classification/ConvNets/resnet50v1.5", "V100-SXM2-16GB", 8, 8, 1, "amp", 256, 10240.0, "images/s", interconnect_inferred=DGX1),
    row(2, "TensorFlow2/LanguageModeling/BERT", "A100-SXM4-80GB", 32, 8, 4, "tf32", 32, 640.0, "sequences/s",
        model_variant="Sequence Length=512", section_heading=PRETRAIN, interconnect_inferred=HDR_FABRIC, xla="Yes"),
    row(3, "TensorFlow2/LanguageModeling/BERT", "A100-SXM4-80GB", 8, 8, 1, "tf32", 64, 2000.0, "sequences/s",
        model_variant="Sequence Length=128", section_heading=PRETRAIN),
    row(4, "PyTorch/LanguageModeling/BERT", "V100-SXM3-32GB (DGX-2H 450W)", 16, 16, 1, "amp", 10, 800.0, "sequences/s",
        section_heading="Training performance results > Fine-tuning training performance for SQuAD v1.1 on DGX-2 32GB"),
    row(5, "PyTorch/Recommendation/NCF", "A100-SXM4-80GB", 1, 1, 1, "tf32", 1048576, 22.59, "samples/s", raw_row="1 | 1048576 | 22.59M | 34.08M | 0.66"),
    row(6, "PyTorch/LanguageModeling/Transformer-XL", "A100-SXM4-80GB", 1, 1, 1, "amp", 16, 10000.0, "tokens/s", model_variant="Large model"),
    row(7, "PyTorch/SpeechSynthesis/Tacotron2", "A100-SXM4-40GB", 1, 1, 1, "amp", 10, 160000.0, "samples/s"),
    row(8, "MxNet/Classification/RN50v1.5", "V100-SXM2-16GB", 1, 1, 1, "fp32", 96, 400.0, "", suspect="unit not stated"),
    row(9, "PaddlePaddle/Classification/RN50v1.5", "A100-SXM4-80GB", 1, 1, 1, "amp+asp", 256, 2000.0, "images/s"),
    row(10, "TensorFlow2/LanguageModeling/BERT", "V100-SXM2-16GB", 16, 8, 2, "amp", 64, 1000.0, "sequences/s",
        model_variant="Sequence Length=512", section_heading=PRETRAIN, interconnect_inferred=DGX1),
    row(11, "PyTorch/Classification/ConvNets/efficientnet", "A100-SXM4-80GB", 1, 1, 1, "amp", 256, 2000.0, "images/s"),
    row(1, "PyTorch/Classification/ConvNets/resnet50v1.5", "V100-SXM2-16GB", 8, 8, 1, "amp", 256, 10240.0, "images/s", interconnect_inferred=DGX1),
    row(13, "PyTorch/Detection/SSD", "V100-SXM2-16GB", 1, 1, 1, "amp", "", 300.0, "images/s", batch_parse_note="ambiguous multi-value cell (raw)"),
    row(14, "PyTorch/LanguageModeling/BERT", "A100-SXM4-80GB", 8, 8, 1, "amp", 256, 3000.0, "sequences/s",
        model_variant="Sequence length=128", section_heading=PRETRAIN, container="21.11-py3"),
]


@pytest.fixture
def dle_csv(tmp_path):
    return write_rows(tmp_path / "dle.csv", HEADER, ROWS)


def test_every_row_is_mapped_or_excluded_with_its_reason(dle_csv):
    runs, excluded = import_dle(dle_csv)
    assert len(runs) + len(excluded) == len(ROWS)
    assert reasons(excluded, "readme_line") == {
        "14": "phase-1 BERT in length bins",  # PyTorch's from 21.11 loads LDDL's bins: real lengths not counted
        "8": "suspect in source",
        "9": "unmapped precision",
        "10": "multi-node row without a network",  # DGX-1: no InfiniBand stated or inferred
        "11": "model not in the workload catalogue",
        "1": "repeats a row of the source",  # the second copy of line 1
        "13": "batch size missing or ambiguous",
    }
    assert sorted(runs["model"]) == sorted(["resnet50", "bert-large", "bert-large-seq128", "bert-large-squad", "ncf", "transformer-xl-large", "waveglow"])


def test_mapping_rules(dle_csv):
    runs = import_dle(dle_csv).runs.set_index("model")
    resnet = runs.loc["resnet50"]
    assert (resnet["architecture"], resnet["gpus_per_worker"], resnet["precision"], resnet["framework"]) == ("allreduce-local", 8, "fp16", "pytorch")
    assert resnet["measured_step_time_s"] == pytest.approx(8 * 256 / 10240.0)
    bert = runs.loc["bert-large"]
    assert (bert["architecture"], bert["nodes"], bert["workers"], bert["gpus_per_worker"]) == ("allreduce-cluster", 4, 4, 8)
    assert (bert["network"], bert["nics_per_node"], bert["framework"], bert["precision"]) == ("infiniband-hdr", 8, "tensorflow", "tf32")
    assert bert["measured_step_time_s"] == pytest.approx(32 * 32 / 640.0) and bert["software"].endswith("; XLA")
    assert bert["software_stack"] == "compiled"  # XLA fuses element-wise operators
    # Phase 1, padded to 128 (TensorFlow 2): 8 GPUs x 64 sequences at 2,000 sequences/s.
    phase1 = runs.loc["bert-large-seq128"]
    assert (phase1["architecture"], phase1["precision"]) == ("allreduce-local", "tf32")
    assert phase1["measured_step_time_s"] == pytest.approx(8 * 64 / 2000.0)
    squad = runs.loc["bert-large-squad"]
    assert (squad["gpu"], squad["architecture"]) == ("V100-SXM3-32GB", "allreduce-local")  # the 450 W qualifier dropped
    assert squad["measured_step_time_s"] == pytest.approx(16 * 10 / 800.0)
    # NCF's cell reads 22.59M samples/s: 1,048,576 / 22.59e6 s.
    assert runs.loc["ncf", "measured_step_time_s"] == pytest.approx(1048576 / 22.59e6)
    # Transformer-XL large: 16 segments of 384 tokens at 10,000 tokens/s; WaveGlow: 10 x 8,000 audio samples at 160,000/s.
    assert runs.loc["transformer-xl-large", "measured_step_time_s"] == pytest.approx(16 * 384 / 10000.0)
    assert runs.loc["waveglow", "measured_step_time_s"] == pytest.approx(10 * 8000 / 160000.0)
    assert set(runs["source"]) == {"NVIDIA/DeepLearningExamples"}
    assert set(runs.drop(index=["bert-large"])["software_stack"]) == {"stock"}
    # PyTorch's BERT and Transformer-XL hold the model at FP16 (apex O2, model.half()); the others cast per operator.
    assert runs["mixed_precision"].to_dict() == {
        "resnet50": "autocast", "bert-large": "autocast", "bert-large-seq128": "autocast", "bert-large-squad": "half",
        "ncf": "autocast", "transformer-xl-large": "half", "waveglow": "autocast",
    }  # fmt: skip


def test_speech_tables_by_unit_and_the_first_transformer_xl_directory(tmp_path):
    """Tacotron 2's README holds two training tables, told apart by unit; Transformer-XL's first directory held the base model."""
    speech = "PyTorch/SpeechSynthesis/Tacotron2"
    rows = [
        row(1, speech, "A100-SXM4-40GB", 1, 1, 1, "amp", 128, 26484.0, "mels/s"),
        row(2, speech, "A100-SXM4-40GB", 8, 8, 1, "amp", 10, 905043.0, "samples/s"),
        row(3, speech, "V100-SXM2-16GB", 1, 1, 1, "amp", 128, 2424.0, "tokens/s"),
        row(4, "PyTorch/LanguageModeling/TransformerXL", "V100-SXM2-16GB", 1, 1, 1, "fp32", 16, 11499.8, "tokens/s"),
    ]
    runs, excluded = import_dle(write_rows(tmp_path / "dle.csv", HEADER, rows))
    # Input characters a second are not the mel frames the catalogue counts.
    assert reasons(excluded, "readme_line") == {"3": "model not in the workload catalogue"}
    assert "tokens/s table of Tacotron 2" in excluded["detail"].iloc[0]
    runs = runs.set_index("model")
    # 128 utterances of 566 mel frames at 26,484 frames/s; 8 x 10 segments of 8,000 samples at 905,043 samples/s;
    # 16 segments of 192 tokens at 11,499.8 tokens/s.
    assert runs.loc["tacotron2", "measured_step_time_s"] == pytest.approx(128 * 566 / 26484.0)
    assert runs.loc["waveglow", "measured_step_time_s"] == pytest.approx(8 * 10 * 8000 / 905043.0)
    assert runs.loc["transformer-xl-base", "measured_step_time_s"] == pytest.approx(16 * 192 / 11499.8)


def test_dlrm_by_model_size_and_the_readmes_that_print_the_global_batch(tmp_path):
    """DLRM's model size picks its tables; PyTorch's READMEs before 729963dd47e7 print the global batch (64k at 8 GPUs)."""
    pyt, tf2 = "PyTorch/Recommendation/DLRM", "TensorFlow2/Recommendation/DLRM"
    old = {"source": f"NVIDIA/DeepLearningExamples:{pyt}/README.md@4e764dcd7873"}
    rows = [
        row(1, pyt, "A100-SXM4-80GB", 8, 8, 1, "tf32", 65536, 10538937.0, "records of data/s", model_variant="Model size=xlarge", **old),
        row(2, pyt, "V100-SXM3-32GB", 16, 16, 1, "amp", 65536, 11208483.0, "records of data/s", model_variant="Model size=large", **old),
        row(3, pyt, "A100-SXM4-80GB", 1, 1, 1, "tf32", 32768, 2684082.0, "records of data/s", model_variant="Model size=small", **old),
        row(4, pyt, "A100-SXM4-80GB", 8, 8, 1, "tf32", 8192, 11400000.0, "records of data/s", model_variant="Model size=large"),
        row(5, tf2, "A100-SXM4-80GB", 8, 8, 1, "amp", 8192, 14000000.0, "items/s", model_variant="Model size=extra large"),
        row(6, "Tensorflow2/Recommendation/DLRM", "V100-SXM2-32GB", 1, 1, 1, "fp32", 65536, 800000.0, "items/s", model_variant="Model size=small"),
        row(7, pyt, "V100-SXM2-32GB", 1, 1, 1, "fp32", 32768, 494.0, "items/images/s"),
    ]
    runs, excluded = import_dle(write_rows(tmp_path / "dle.csv", HEADER, rows))
    assert reasons(excluded, "readme_line") == {"7": "model not in the workload catalogue"}  # the first README: no size
    runs = runs.assign(line=runs["source_id"].str.split(":").str[2].astype(int)).sort_values("line")
    assert list(runs["model"]) == ["dlrm-dot-fl2", "dlrm-dot-fl3", "dlrm-dot-fl15", "dlrm-dot-fl3", "dlrm-dot-fl0", "dlrm-dot-fl15"]
    # The global 65,536 over 8 and 16 GPUs; one GPU's 32k is its own; the current README's 8k is per GPU already.
    assert list(runs["batch_size_per_gpu"]) == [8192, 4096, 32768, 8192, 8192, 65536]
    assert list(runs["framework"]) == ["pytorch"] * 4 + ["tensorflow"] * 2
    # A step is the global batch over the records a second.
    expected = [65536 / 10538937.0, 65536 / 11208483.0, 32768 / 2684082.0, 65536 / 11400000.0, 65536 / 14000000.0, 65536 / 800000.0]
    assert list(runs["measured_step_time_s"]) == pytest.approx(expected)


def test_a_throughput_under_two_batch_sizes_is_excluded_in_both_places(tmp_path):
    """SE-ResNeXt101's README printed 285.99 images/s under batch 96 and under 128; the other rows stand."""
    convnets = "TensorFlow/Classification/ConvNets/se-resnext101-32x4d"
    rows = [
        row(1, convnets, "V100-SXM2-16GB", 1, 1, 1, "amp", 96, 285.99, "images/s"),
        row(2, convnets, "V100-SXM2-16GB", 1, 1, 1, "amp", 128, 285.99, "images/s"),
        row(3, convnets, "V100-SXM2-16GB", 1, 1, 1, "fp32", 64, 126.44, "images/s"),
        row(4, "TensorFlow/Classification/ConvNets/resnext101-32x4d", "A100-SXM4-40GB", 8, 8, 1, "tf32", 128, 2854.0, "images/s", xla="yes"),
    ]
    runs, excluded = import_dle(write_rows(tmp_path / "dle.csv", HEADER, rows))
    assert reasons(excluded, "readme_line") == {"1": "published under two batch sizes", "2": "published under two batch sizes"}
    assert excluded.set_index("readme_line").loc["1", "detail"] == "also at 128 per GPU in the same README"
    runs = runs.set_index("model")
    assert runs.loc["se-resnext101-32x4d", "measured_step_time_s"] == pytest.approx(64 / 126.44)
    resnext = runs.loc["resnext101-32x4d"]
    assert resnext["measured_step_time_s"] == pytest.approx(8 * 128 / 2854.0)
    assert (resnext["software_stack"], resnext["architecture"]) == ("compiled", "allreduce-local")


SQUAD = "Training performance results > Fine-tuning training performance for SQuAD on 16G"


def test_a_value_published_under_two_precisions_is_excluded_from_both_tables(tmp_path):
    """TensorFlow BERT's SQuAD table of November 2019 swapped its FP32 and mixed-precision columns."""
    bert = "TensorFlow/LanguageModeling/BERT"
    snapshot = [
        row(1, bert, "V100-SXM2-16GB", 1, 1, 1, "amp", 3, 17.17, "sentences/s", section_heading=SQUAD),
        row(2, bert, "V100-SXM2-16GB", 1, 1, 1, "fp32", 2, 7.35, "sentences/s", section_heading=SQUAD),
        row(3, bert, "A100-SXM4-40GB", 1, 1, 1, "tf32", 4, 10.0, "sentences/s", section_heading=SQUAD),
    ]
    history = [
        {**row(11, bert, "V100-SXM2-16GB", 1, 1, 1, "fp32", 2, 17.17, "sentences/s", section_heading=SQUAD), "first_seen_date": "2019-11-04"},
        {**row(12, bert, "V100-SXM2-16GB", 1, 1, 1, "amp", 3, 7.35, "sentences/s", section_heading=SQUAD), "first_seen_date": "2019-11-04"},
        # FP32 and TF32 name one setting on an A100: no conflict.
        {**row(13, bert, "A100-SXM4-40GB", 1, 1, 1, "fp32", 4, 10.0, "sentences/s", section_heading=SQUAD), "first_seen_date": "2020-07-04"},
        # The same throughput on another GPU count is another measurement.
        {**row(14, bert, "V100-SXM2-16GB", 4, 4, 1, "fp32", 2, 17.17, "sentences/s", section_heading=SQUAD), "first_seen_date": "2019-11-04"},
    ]
    for r in history:
        r["source"] = r["source"].replace("729963dd47e7", "9cd3946603c8")
    snapshot_csv = write_rows(tmp_path / "dle_training_throughput.csv", HEADER, snapshot)
    history_csv = write_rows(tmp_path / "dle_training_throughput_history.csv", HEADER + ["first_seen_date"], history)
    runs, excluded = import_dle(snapshot_csv)
    assert reasons(excluded, "readme_line") == {"1": "published under two precisions", "2": "published under two precisions"}
    assert excluded.set_index("readme_line").loc["1", "detail"] == "also fp32 in TensorFlow/LanguageModeling/BERT/README.md@9cd3946603c8 (line 11)"
    assert list(runs["gpu"]) == ["A100-SXM4-40GB"]
    runs, excluded = import_dle_history(history_csv)
    assert reasons(excluded, "readme_line") == {"11": "published under two precisions", "12": "published under two precisions"}
    assert sorted(runs["gpus_per_worker"]) == [1, 4]
    # Alone, a table finds no conflict in these rows.
    alone = tmp_path / "alone"
    alone.mkdir()
    assert len(import_dle(write_rows(alone / "dle_training_throughput.csv", HEADER, snapshot)).runs) == 3


def test_a_malformed_table_beside_it_is_named(tmp_path):
    snapshot = write_rows(tmp_path / "dle_training_throughput.csv", HEADER, ROWS[:1])
    (tmp_path / "dle_training_throughput_history.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SpecError, match="dle_training_throughput_history.csv.*read beside dle_training_throughput.csv"):
        import_dle(snapshot)


def test_mapped_rows_load_as_a_run_table(dle_csv, tmp_path):
    runs, _ = import_dle(dle_csv)
    runs.to_csv(tmp_path / "runs.csv", index=False)
    loaded = load_runs(tmp_path / "runs.csv")
    assert loaded.n_accepted == len(runs) and loaded.n_rejected == 0


@pytest.mark.parametrize("importer,name,rows,floor", [(import_dle, "dle_training_throughput.csv", 1307, 300), (import_dle_history, "dle_training_throughput_history.csv", 2158, 400)])
def test_real_tables(shared_data, importer, name, rows, floor):
    result = importer(shared_data / name)
    counts = result.counts()
    assert counts["rows"] == rows and counts["mapped"] >= floor
    assert result.excluded["reason"].notna().all() and result.runs["source_id"].is_unique
    assert counts["excluded_by_reason"].get("suspect in source", 0) >= 58
    assert counts["excluded_by_reason"].get("published under two precisions", 0) >= 29  # QuartzNet, SE(3)-Transformer, BERT


def test_no_directory_named_like_a_catalogue_workload_is_left_out_as_unknown(shared_data):
    """A README directory whose name resolves to a catalogue workload is mapped, or left out with what differs.

    Tacotron 2's table was once left out as 'not in the workload catalogue' while the catalogue held it.
    """
    from features.workloads import workload_catalog

    catalog = workload_catalog().workloads
    for importer, name in ((import_dle, "dle_training_throughput.csv"), (import_dle_history, "dle_training_throughput_history.csv")):
        excluded = importer(shared_data / name).excluded
        generic = excluded[excluded["detail"].astype(str).str.endswith(": not in the workload catalogue")]
        for directory in set(generic["model_dir"].dropna().astype(str)):
            known = catalog.find(directory.split("/")[-1])
            assert known is None, f"{directory} resolves to {known.name} but is left out as unknown"


def test_the_dgx2_bert_phase1_fp32_rows_faster_per_gpu_than_one_gpu_are_excluded(shared_data):
    """TensorFlow BERT phase 1 at FP32 on a DGX-2: one V100 0.906 s a step, 4 to 16 of them 0.66-0.67 s (1.35-1.37x)."""
    result = import_dle(shared_data / "dle_training_throughput.csv")
    faster = result.excluded[result.excluded["reason"] == "faster per GPU than on one GPU"]
    assert sorted(faster["gpus_total"].astype(int)) == [4, 8, 16]
    assert faster["detail"].str.endswith(("(1.37x)", "(1.35x)")).all() and faster["detail"].str.contains("one GPU 0.906 s").all()


def test_no_real_bert_squad_row_runs_faster_than_the_peak(shared_data):
    """The swapped SQuAD columns of 2019-2020 gave FP32 rows up to 1.7x V100's FP32 peak: none is mapped now."""
    result = import_dle_history(shared_data / "dle_training_throughput_history.csv")
    assert (result.excluded["reason"] == "published under two precisions").sum() >= 60
    assert (result.excluded["reason"] == "fails run-table rules: measured.step_time_s").sum() >= 3
    squad = result.runs[(result.runs["model"] == "bert-large-squad") & (result.runs["precision"] == "fp32") & result.runs["gpu"].str.startswith("V100")]
    # 746.5 GFLOP per 384-token sequence at V100's 15.7 TFLOP/s: at most 21.0 sequences/s per GPU.
    assert len(squad) >= 1 and (squad["batch_size_per_gpu"] / squad["measured_step_time_s"] <= 15.7e12 / 746.5e9).all()


def test_lddl_containers_load_binned_bert():
    # PyTorch's BERT loads LDDL's 64-token bins from the 21.11 container, PaddlePaddle's from 22.12;
    # TensorFlow's and the earlier containers pad every sequence to 512.
    dirs = ["PyTorch/LanguageModeling/BERT"] * 3 + ["PaddlePaddle/LanguageModeling/BERT"] * 2 + ["TensorFlow/LanguageModeling/BERT"]
    containers = ["20.06-py3 NGC", "21.11-py3 NGC", "22.12-py3 NGC", "22.08-py3 NGC", "22.12-py3 NGC", "TensorFlow 21.11-py3"]
    assert list(lddl_binned(dirs, containers)) == [False, True, True, False, True, False]
    assert not lddl_binned(["PyTorch/LanguageModeling/BERT"], [None])[0]


def test_software_year_is_the_containers_release_else_the_readme_that_first_printed_the_value():
    containers = ["20.06-py3 NGC", "pytorch-22.10-py3", "PyTorch 21.03", "21.02-tf2-py3 NGC", "mxnet-19.12-py3", None, None, "TensorFlow 1.15"]
    first_seen = [None, None, None, None, None, "2019-05-14", None, None]
    years = software_years(containers, first_seen)
    assert list(years[:6]) == [2020, 2022, 2021, 2021, 2019, 2019]
    assert np.isnan(years[6]) and np.isnan(years[7])  # no release stated: the job field's default


def test_real_bert_pretraining_rows_by_data_loader(shared_data):
    """Phase 2 (sequence 512) by data loader; phase 1 (128) is mapped only where padded."""
    runs = import_dle_history(shared_data / "dle_training_throughput_history.csv").runs
    bert = runs[runs["model"].isin(["bert-large", "bert-large-binned"])]
    binned = bert["model"] == "bert-large-binned"
    assert bert.loc[binned, "software"].str.contains("21.11-py3|22.12-py3").all()
    assert not bert.loc[~binned, "software"].str.contains("21.11-py3|22.12-py3").any()
    assert binned.sum() >= 16 and (~binned).sum() >= 100
    result = import_dle_history(shared_data / "dle_training_throughput_history.csv")
    phase1 = result.runs[result.runs["model"] == "bert-large-seq128"]
    assert len(phase1) >= 100 and not phase1["software"].str.contains("PyTorch.*(21.11|22.12)-py3").any()
    assert (result.excluded["reason"] == "phase-1 BERT in length bins").sum() >= 15


PHASE2 = "Training performance results > Pre-training NVIDIA DGX A100 (8x A100 80GB)"


def test_accumulated_pre_training_steps_carry_their_passes(tmp_path):
    """The four ways the READMEs state gradient accumulation, read into the optimizer step's batch and passes."""
    paddle, pytorch = "PaddlePaddle/LanguageModeling/BERT", "PyTorch/LanguageModeling/BERT"
    tf1, tf2 = "TensorFlow/LanguageModeling/BERT", "TensorFlow2/LanguageModeling/BERT"
    seq128 = {"model_variant": "Sequence length=128", "section_heading": PHASE2, "container": "20.06-py3"}
    rows = [
        # The cell is the accumulated batch: 8,192 per GPU in 64 passes of 128 (TF32).
        row(1, paddle, "A100-SXM4-80GB", 1, 1, 1, "tf32", 8192, 307.0, "sequences/s",
            other_config="Accumulation steps (TF32 and FP16)=64 and 32; Sequence length=128", **seq128),
        # The cell is one pass of 256; the accumulated batch is stated.
        row(2, pytorch, "A100-SXM4-80GB", 8, 8, 1, "amp", 256, 4591.0, "sequences/s",
            other_config="Accumulated Batch size / GPU (TF32 and FP16)=8192 and 8192; Accumulation steps (TF32 and FP16)=64 and 32", **seq128),
        # The header says TF32 first but the cells give mixed precision's 32 first: the same 8,192 sequences in
        # fewer, larger passes is mixed precision's (half-size activations), so FP16 takes 32 passes of 256.
        row(3, pytorch, "A100-SXM4-80GB", 8, 8, 1, "amp", 8192, 4553.0, "sequences/s",
            other_config="Accumulation steps (TF32 and FP16)=32 and 64; Sequence length=128", **seq128),
        # TensorFlow: one pass of 16 per GPU, 1,024 passes, a global batch of 65,536 over 4 GPUs.
        row(4, tf1, "V100-SXM2-16GB", 4, 4, 1, "amp", 16, 449.68, "sentences/s", interconnect_inferred=DGX1,
            other_config="Sequence Length=128; Gradient Accumulation: mixed precision, FP32=1024, 2048; Global Batch Size=65536",
            model_variant="Sequence Length=128", section_heading=PHASE2),
        # A global batch per precision (TensorFlow 2): FP32 takes 32 per pass x 2,048 = 65,536 on one GPU.
        row(5, tf2, "V100-SXM3-32GB", 1, 1, 1, "fp32", 32, 49.97, "sequences/s",
            other_config="Sequence Length=128; Gradient Accumulation: mixed precision, FP32=1024 , 2048; Global Batch Size: mixed precision, FP32=61440 , 65536",
            model_variant="Sequence Length=128", section_heading=PHASE2),
        # A statement that does not add up (32 x 8,192 is not 65,536) is excluded with its numbers.
        row(6, tf1, "V100-SXM3-32GB", 1, 1, 1, "fp32", 32, 35.32, "sentences/s",
            other_config="Sequence Length=128; Gradient Accumulation: mixed precision, FP32=1024 , 8192; Global Batch Size=65536",
            model_variant="Sequence Length=128", section_heading=PHASE2),
        # No statement: one pass of the cell's batch.
        row(7, "PyTorch/Classification/ConvNets/resnet50v1.5", "V100-SXM2-16GB", 1, 1, 1, "amp", 256, 1000.0, "images/s"),
    ]  # fmt: skip
    runs, excluded = import_dle(write_rows(tmp_path / "dle.csv", HEADER, rows))
    assert reasons(excluded, "readme_line") == {"6": "accumulation does not add up"}
    assert "8192 steps against 65536 per GPU" in excluded.iloc[0]["detail"]
    runs = runs.assign(line=runs["name"].str.split(":").str[2].astype(int)).set_index("line")
    expected = {1: (8192, 64, 8192 / 307.0), 2: (8192, 32, 8 * 8192 / 4591.0), 3: (8192, 32, 8 * 8192 / 4553.0),
                4: (16384, 1024, 4 * 16384 / 449.68), 5: (65536, 2048, 65536 / 49.97), 7: (256, 1, 256 / 1000.0)}  # fmt: skip
    for line, (batch, passes, step_s) in expected.items():
        got = runs.loc[line]
        assert (got["batch_size_per_gpu"], got["gradient_accumulation_steps"]) == (batch, passes), line
        assert got["measured_step_time_s"] == pytest.approx(step_s), line


def test_every_accumulated_row_of_the_real_tables_splits_into_whole_passes(shared_data):
    for importer, name in ((import_dle, "dle_training_throughput.csv"), (import_dle_history, "dle_training_throughput_history.csv")):
        runs = importer(shared_data / name).runs
        passes = runs["gradient_accumulation_steps"].to_numpy(float)
        assert (passes >= 1).all()
        assert (runs["batch_size_per_gpu"] % passes == 0).all()
        pre_training = runs["model"].isin(["bert-large", "bert-large-seq128", "bert-large-binned"])
        assert (passes[~pre_training.to_numpy()] == 1).all()  # only BERT pre-training states accumulation among mapped models
        assert (passes[pre_training.to_numpy()] > 1).sum() > 50


def test_a_single_stated_accumulation_multiplies_the_pass():
    """``Grad accumulation=24`` (the speech models' tables): the cell is one pass, both precisions alike."""
    from training.importers.dle_accumulation import accumulation

    assert accumulation("Grad accumulation=24", "amp", 48.0, 1.0) == (24.0, 1152.0, None)
    assert accumulation("Grad accumulation=24", "tf32", 48.0, 1.0) == (24.0, 1152.0, None)
    assert accumulation(None, "amp", 48.0, 8.0) == (1.0, 48.0, None)
    # Labels read where the stated batches differ (PyTorch, 2020: 65,232 at TF32 in 1,208 passes, 65,536 at FP16 in 512).
    stated = "Accumulated Batch size / GPU (TF32 and FP16)=65232 and 65536; Accumulation steps (TF32 and FP16)=1208 and 512"
    assert accumulation(stated, "tf32", 54.0, 1.0) == (1208.0, 65232.0, None)
    assert accumulation(stated, "amp", 128.0, 1.0) == (512.0, 65536.0, None)
