"""Per-GPU memory of a data-parallel step: hand-computed parts, the warning, and the check on measured runs."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from features.memory import RUNTIME_RESERVE_BYTES, data_parallel_memory
from features.workloads import workload_catalog
from predictor import Predictor

runner = CliRunner()
GIB = 2.0**30


def _workload(**changes):
    return dataclasses.replace(workload_catalog().workloads.get("resnet50", "model"), **changes)


def test_parts_by_hand():
    # 1 M trained parameters, 1 MB saved per sample in FP32, batch 10 at FP16 on 2 GPUs.
    w = _workload(param_count=1e6, dense_param_count=1e6, activation_bytes_per_sample_fp32=1e6, domain="vision")
    m = data_parallel_memory(w, batch_size_per_gpu=10, element_bytes=2, total_gpus=2, capacity_bytes=8 * GIB)
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) == (4e6, 4e6, 8e6)
    assert (m.half_copy_bytes, m.bucket_bytes, m.activations_bytes) == (2e6, 4e6, 5e6)  # 1e6 x 2/4 x 10
    assert m.total_bytes == 27e6 + RUNTIME_RESERVE_BYTES
    assert m.fits and m.to_dict()["fits"] is True
    # One GPU in FP32: no bucket, no half copy, activations at full size.
    one = data_parallel_memory(w, batch_size_per_gpu=10, element_bytes=4, total_gpus=1, capacity_bytes=8 * GIB)
    assert (one.half_copy_bytes, one.bucket_bytes, one.activations_bytes) == (0.0, 0.0, 1e7)


def test_frozen_parameters_at_the_compute_precision_and_sparse_tables_sharded():
    frozen = _workload(param_count=11e6, dense_param_count=1e6, activation_bytes_per_sample_fp32=0.0, domain="generative")
    m = data_parallel_memory(frozen, 1, element_bytes=2, total_gpus=8, capacity_bytes=GIB)
    assert m.weights_bytes == 1e6 * 4 + 10e6 * 2  # trained in FP32, frozen at FP16, on every GPU
    tables = _workload(param_count=81e6, dense_param_count=1e6, activation_bytes_per_sample_fp32=0.0, domain="recommendation")
    m = data_parallel_memory(tables, 1, element_bytes=2, total_gpus=8, capacity_bytes=GIB)
    assert m.weights_bytes == 1e6 * 4 + 80e6 * 4 / 8  # embedding tables in FP32, one eighth on each GPU


def test_no_estimate_without_an_activation_count():
    assert data_parallel_memory(_workload(activation_bytes_per_sample_fp32=None), 1, 4, 1, GIB) is None


def test_counted_figure_for_every_catalogue_workload_with_provenance():
    for w in workload_catalog().workloads:
        assert w.activation_bytes_per_sample_fp32 > 0, w.name
        assert w.provenance["activation_bytes_per_sample_fp32"] == "counted", w.name
    resnet = workload_catalog().workloads.get("resnet50", "model")
    # ResNet-50 keeps about 86 MB per 224x224 image in FP32 for its backward (batch 256: 22 GB).
    assert 60e6 < resnet.activation_bytes_per_sample_fp32 < 120e6
    assert resnet.provenance["activation_bytes_per_sample_fp32"] == "counted"


def _job(batch: int, gpu: str) -> dict:
    return {
        "name": "bert",
        "workload": {"model": "bert-large-squad", "batch_size_per_gpu": batch, "precision": "fp16", "framework": "pytorch"},
        "parallelism": {"architecture": "single"},
        "cluster": {"gpu": gpu},
    }


def test_a_step_too_large_for_its_gpu_is_predicted_with_a_warning():
    predictor = Predictor()
    small = predictor.time(_job(4, "T4"))
    assert small.fits is True and not any(w.startswith("memory:") for w in small.warnings)
    large = predictor.time(_job(512, "T4"))
    assert large.fits is False
    (warning,) = [w for w in large.warnings if w.startswith("memory:")]
    assert "the GPU has 16 GB" in warning and "at 512 samples per pass" in warning
    # The parts scale with the batch: activations 128x, the rest alike.
    parts_small, parts_large = small.memory["parts"], large.memory["parts"]
    assert parts_large["activations_bytes"] == pytest.approx(128 * parts_small["activations_bytes"])
    assert parts_large["weights_bytes"] == parts_small["weights_bytes"]


def test_cli_time_and_compare_carry_the_estimate(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(_job(192, "A100-SXM4-80GB")))
    result = runner.invoke(app, ["time", "--job", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["memory"]["fits"] is True and out["memory"]["capacity_bytes"] == 80 * GIB
    compared = runner.invoke(app, ["compare", "--job", str(path), "--gpu", "T4", "--json"])
    assert compared.exit_code == 0, compared.output
    options = {o["gpu"]: o for o in json.loads(compared.output)["options"]}
    assert options["A100-SXM4-80GB"]["fits"] is True and options["T4"]["fits"] is False
    assert any(w.startswith("memory:") for w in options["T4"]["warnings"])
    text = runner.invoke(app, ["compare", "--job", str(path), "--gpu", "T4"], env={"COLUMNS": "200"})
    assert "may not fit" in text.output


#: Measured runs whose estimate exceeds their GPU: MLPerf's BERT on 24 GB GPUs (224 sequences per GPU, a
#: global batch that may count gradient accumulation, which MLPerf's tables do not state), and Mask
#: R-CNN, counted at its largest input (800 x 1333) for every image. DeepLearningExamples' BERT
#: pre-training rows state their passes, so they are no exception.
OVER_CAPACITY_EXPECTED = {"bert-large-unpadded", "mask-rcnn"}


def test_measured_runs_fit_their_gpus(shared_data):
    """Every measured data-parallel run ran, so its estimate must fit its GPU; and Lambda's batches, chosen to
    fill the GPU, must not come out nearly empty (the estimate is no trivial bound)."""
    import numpy as np

    from features.memory import job_memory
    from training.dataset import build_dataset
    from training.sources import gather_runs

    ds = build_dataset(gather_runs(None, None, None).runs)
    runs = ds.runs.reset_index(drop=True)
    ratio = np.full(len(runs), np.nan)
    for i in range(len(runs)):
        m = job_memory(ds.resolved, i)
        if m is not None:
            ratio[i] = m.total_bytes / m.capacity_bytes
    estimated = np.isfinite(ratio)
    assert estimated.sum() > 0.9 * len(runs)
    over = estimated & (ratio > 1.0)
    assert set(runs.loc[over, "model"]) <= OVER_CAPACITY_EXPECTED
    accumulated = (runs["gradient_accumulation_steps"].fillna(1) > 1).to_numpy() & estimated
    assert accumulated.sum() > 200 and ratio[accumulated].max() < 0.9  # thousands of sequences per GPU, a pass at a time
    mask_rcnn = (runs["model"] == "mask-rcnn").to_numpy() & estimated
    assert ratio[mask_rcnn].max() < 1.2  # at most 20% over, from the input shape
    lambda_rows = (runs["source"] == "lambdal/deeplearning-benchmark").to_numpy() & estimated
    fullest = runs.loc[lambda_rows].assign(ratio=ratio[lambda_rows]).groupby("model")["ratio"].max()
    assert fullest.median() > 0.5, fullest


def test_fleet_rows_carry_the_share_of_their_gpu_as_one_job_does(tmp_path):
    import numpy as np
    import pandas as pd

    from predictor.fleet import score_fleet

    frame = pd.DataFrame({
        "name": ["fits", "too-large", "custom", "cpu"],
        "model": ["bert-large-squad", "bert-large-squad", None, "testbed-resnet"],
        "flops_per_sample": [np.nan, np.nan, 1e9, np.nan],
        "param_count": [np.nan, np.nan, 1e6, np.nan],
        "memory_bytes_per_sample": [np.nan, np.nan, 1e7, np.nan],
        "input_bytes_per_sample": [np.nan, np.nan, 1e5, np.nan],
        "batch_size_per_gpu": [4, 512, 8, 8],
        "precision": ["fp16", "fp16", "fp32", "fp32"],
        "gpu": ["T4", "T4", "T4", "cpu-host"],
    })  # fmt: skip
    scored = score_fleet(frame, to=["gpu=A100-SXM4-80GB"], model="none")
    predictor = Predictor(model=None)
    for i in (0, 1):
        row = frame.iloc[i]
        job = _job(int(row.batch_size_per_gpu), "T4")
        memory = predictor.time(job).memory
        assert scored["memory_share_of_gpu"][i] == pytest.approx(memory["total_bytes"] / memory["capacity_bytes"], rel=1e-12)
        target = predictor.time(_job(int(row.batch_size_per_gpu), "A100-SXM4-80GB")).memory
        assert scored["target_memory_share_of_gpu"][i] == pytest.approx(target["total_bytes"] / target["capacity_bytes"], rel=1e-12)
    assert scored["memory_share_of_gpu"][0] < 1 < scored["memory_share_of_gpu"][1]
    # No estimate without a catalogue model's activation count, nor on a CPU device.
    assert np.isnan(scored["memory_share_of_gpu"][2]) and np.isfinite(scored["step_time_s"][2])
    assert np.isnan(scored["memory_share_of_gpu"][3])
    # The over-memory row: the fewest passes one job's compare would give; every other row has none.
    from features.memory import DataParallelMemory, passes_that_fit

    memory = predictor.time(_job(512, "T4")).memory
    needed = passes_that_fit(DataParallelMemory(**memory["parts"], capacity_bytes=memory["capacity_bytes"]), 512, 1)
    assert scored["passes_to_fit"][1] == needed == 32  # about 29 sequences a pass fit: 32 passes of 16
    assert np.isnan(scored["passes_to_fit"][[0, 2, 3]]).all()
    from predictor.fleet import summarize

    lines = summarize(scored, to=["gpu=A100-SXM4-80GB"]).lines()
    # BERT-large at batch 512 needs about 170 GB: more than the T4's 16 GB and the A100's 80 GB.
    assert "gpu=A100-SXM4-80GB: 1 jobs may not fit the target GPU's memory (target_memory_share_of_gpu > 1)" in lines
    assert "1 predicted jobs may not fit their GPU's memory (memory_share_of_gpu > 1); 1 of them would in gradient-accumulation passes (passes_to_fit)" in lines
    from predictor.fleet_report import write_report

    report = write_report(scored, tmp_path / "report", to=["gpu=A100-SXM4-80GB"], model="none")
    assert (report.memory.estimated, report.memory.over, report.memory.over_by_gpu) == (2, 1, {"T4": 1})
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Jobs that may not fit their GPU's memory" in text
    assert "1 of the 2 predicted jobs with a memory estimate need more per GPU than their GPU holds" in text
    assert f"Under gpu=A100-SXM4-80GB, 1 of the {report.memory.target_estimated} jobs it scores would not fit" in text
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["memory"]["over"] == 1
    assert "1 of them would fit as the same optimizer step in gradient-accumulation passes" in text
    assert (report.memory.accumulable, report.memory.median_passes_to_fit) == (1, 32.0)


def test_predict_workloads_lists_the_activation_count():
    result = runner.invoke(app, ["workloads", "--json"])
    assert result.exit_code == 0, result.output
    resnet = next(r for r in json.loads(result.output)["workloads"] if r["name"] == "resnet50")
    assert resnet["activations_mb_per_sample"] == pytest.approx(workload_catalog().workloads.get("resnet50", "model").activation_bytes_per_sample_fp32 / 1e6)


def test_an_explicit_param_count_is_the_one_held():
    """A job that names a catalogue model and gives its own param_count trains that many parameters."""
    base = _job(8, "A100-SXM4-80GB")
    bigger = {**base, "workload": {**base["workload"], "param_count": 1e9}}
    predictor = Predictor(model=None)
    a, b = predictor.time(base).memory["parts"], predictor.time(bigger).memory["parts"]
    assert b["optimizer_bytes"] == 8e9 and b["gradients_bytes"] == 4e9
    assert b["activations_bytes"] == a["activations_bytes"]


def test_an_accumulated_step_holds_one_pass_and_runs_no_faster():
    predictor = Predictor(model=None, overlap="roofline")
    whole = _job(512, "A100-SXM4-80GB")
    split = {**whole, "workload": {**whole["workload"], "gradient_accumulation_steps": 8}}
    pass_sized = _job(64, "A100-SXM4-80GB")
    a, b, c = (predictor.time(j) for j in (whole, split, pass_sized))
    assert b.memory["parts"]["activations_bytes"] == pytest.approx(c.memory["parts"]["activations_bytes"])
    assert a.fits is False and b.fits is True
    # Eight passes of 64 do the arithmetic of one pass of 512 with eight times its launches and host work,
    # so they are slower than it, and faster than eight steps of 64 (one optimizer step instead of eight).
    assert b.step_time_s > a.step_time_s
    assert b.step_time_s < 8 * c.step_time_s


def test_more_passes_than_samples_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "job.json"
    job = _job(4, "T4")
    job["workload"]["gradient_accumulation_steps"] = 8
    path.write_text(json.dumps(job))
    result = runner.invoke(app, ["time", "--job", str(path)])
    assert result.exit_code == 2
    assert "workload.gradient_accumulation_steps" in result.output and "at most batch_size_per_gpu (4) passes" in result.output


def test_a_layout_job_takes_its_passes_from_its_global_batch(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({
        "workload": {"model": "gpt3-175b", "gradient_accumulation_steps": 4},
        "parallelism": {"tensor_parallel": 8, "pipeline_parallel": 8}, "cluster": {"gpu": "H100"},
    }))
    result = runner.invoke(app, ["time", "--job", str(path)])
    assert result.exit_code == 2 and "workload.gradient_accumulation_steps" in result.output
    assert "global_batch_size" in result.output


def test_an_accumulated_step_of_a_model_never_measured_accumulating_keeps_none_of_the_learned_correction():
    """Only BERT pre-training runs accumulate gradients: the learned model answers an accumulated ResNet-50 step
    with the physics, and says so."""
    job = _job(256, "V100-SXM2-32GB")
    job["workload"]["model"] = "resnet50"
    split = {**job, "workload": {**job["workload"], "gradient_accumulation_steps": 4}}
    learned = Predictor().time(split)
    physics = Predictor(model=None, overlap="roofline").time(split)
    assert learned.method == "learned"
    assert learned.step_time_s == pytest.approx(physics.step_time_s, rel=1e-9)
    assert any("accumulation x model accumulated x resnet50 is not in the training data" in w for w in learned.warnings)
    assert learned.lower_s < learned.step_time_s < learned.upper_s
    # The what-if from one pass to four is the physics' too: the correction's change is faded with it.
    speedup = Predictor().speedup(job, ["gradient_accumulation_steps=4"]).speedup
    assert speedup == pytest.approx(Predictor(model=None, overlap="roofline").speedup(job, ["gradient_accumulation_steps=4"]).speedup, rel=1e-9)
    assert speedup < 1.0


def test_the_warning_says_how_many_samples_fit():
    from features.memory import may_not_fit_message, samples_that_fit

    # 1 M trained parameters on one GPU at FP32 (16 MB of weights, gradients and moments), 100 MB saved
    # per sample, a 2 GiB GPU: (2 GiB - 16 MB - 1 GiB reserve) // 100 MB = 10 samples.
    w = _workload(param_count=1e6, dense_param_count=1e6, activation_bytes_per_sample_fp32=1e8, domain="vision")
    m = data_parallel_memory(w, batch_size_per_gpu=64, element_bytes=4, total_gpus=1, capacity_bytes=2 * GIB)
    assert not m.fits
    assert samples_that_fit(m, 64) == int((2 * GIB - 16e6 - RUNTIME_RESERVE_BYTES) // 1e8) == 10
    # The fewest passes that divide 64 and hold at most 10 samples each: 8 of 8.
    assert "about 10 samples per pass fit: gradient_accumulation_steps=8 (8 passes of 8) would" in may_not_fit_message(m, 64)
    # Where the weights alone exceed the GPU, no batch helps.
    huge = _workload(param_count=1e9, dense_param_count=1e9, activation_bytes_per_sample_fp32=1e8, domain="vision")
    m = data_parallel_memory(huge, batch_size_per_gpu=1, element_bytes=4, total_gpus=1, capacity_bytes=8 * GIB)
    assert samples_that_fit(m, 1) == 0
    assert "without its activations the step needs 15.9 GB: try a sharded layout" in may_not_fit_message(m, 1)


def test_the_fewest_whole_passes_that_fit():
    from features.memory import DataParallelMemory, passes_that_fit

    def memory(rest_gib, activations_gib, capacity_gib):
        return DataParallelMemory(rest_gib * GIB, 0.0, 0.0, 0.0, 0.0, activations_gib * GIB, 0.0, capacity_gib * GIB)

    # 10 GB besides 8 GB of activations for 64 samples (1/8 GB each) on 16 GB: 6 GB hold 48 samples a pass.
    assert passes_that_fit(memory(10, 8, 16), 64, 1) == 2  # 2 passes of 32
    # 60 samples at 1/8 GB each, 3 GB free: 24 a pass, so 3 passes at least, and 3 divides 60.
    assert passes_that_fit(memory(10, 7.5, 13), 60, 1) == 3
    # 64 samples, 24 a pass: 3 passes do not split 64 evenly, 4 of 16 do.
    assert passes_that_fit(memory(10, 8, 13), 64, 1) == 4
    # Already 2 passes of 32 (4 GB of activations): the count is of the whole batch, 4 of 16 at 2.5 GB free.
    assert passes_that_fit(memory(10, 4, 12.5), 64, 2) == 4
    assert passes_that_fit(memory(17, 8, 16), 64, 1) is None  # the rest alone exceeds the GPU
    assert passes_that_fit(memory(4, 8, 16), 64, 1) is None  # it fits already


def test_compare_can_make_the_step_fit_by_accumulating(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(_job(128, "A100-SXM4-80GB")))
    plain = {o["gpu"]: o for o in json.loads(runner.invoke(app, ["compare", "--job", str(path), "--gpu", "T4", "--json"]).output)["options"]}
    result = runner.invoke(app, ["compare", "--job", str(path), "--gpu", "T4", "--accumulate-to-fit", "--json"])
    assert result.exit_code == 0, result.output
    options = {o["gpu"]: o for o in json.loads(result.output)["options"]}
    t4 = options["T4"]
    assert plain["T4"]["fits"] is False and "passes" not in plain["T4"]
    assert t4["fits"] is True and 128 % t4["passes"] == 0 and t4["samples_per_pass"] == 128 / t4["passes"]
    # The same answer as the what-if spelled out, one fewer pass would not fit, and the job's own GPU is untouched.
    job = _job(128, "A100-SXM4-80GB")
    spelled = Predictor().speedup(job, ["gpu=T4", f"gradient_accumulation_steps={t4['passes']}"])
    assert t4["step_time_s"] == pytest.approx(spelled.target.step_time_s, rel=1e-12)
    assert t4["speedup"] == pytest.approx(spelled.speedup, rel=1e-12)
    fewer = max(k for k in range(1, t4["passes"]) if 128 % k == 0)
    assert Predictor().speedup(job, ["gpu=T4", f"gradient_accumulation_steps={fewer}"]).target.fits is False
    assert options["A100-SXM4-80GB"] == plain["A100-SXM4-80GB"]
    text = runner.invoke(app, ["compare", "--job", str(path), "--gpu", "T4", "--accumulate-to-fit"], env={"COLUMNS": "200"})
    assert f"fits in {t4['passes']} passes of {128 // t4['passes']}" in text.output
    # A job too large for its own GPU: that row too is accumulated, and its speedup is over the job as given.
    path.write_text(json.dumps(_job(512, "A100-SXM4-80GB")))
    out = json.loads(runner.invoke(app, ["compare", "--job", str(path), "--gpu", "T4", "--accumulate-to-fit", "--json"]).output)
    own = next(o for o in out["options"] if o["gpu"] == "A100-SXM4-80GB")
    assert own["passes"] > 1 and own["fits"] is True
    assert own["speedup"] == pytest.approx(out["step_time_s"] / own["step_time_s"], rel=1e-9)


def test_the_fleet_command_counts_the_jobs_accumulation_would_fit(tmp_path):
    """The summary the command prints (without a report, from the columns it keeps) counts them too."""
    import pandas as pd

    path = tmp_path / "fleet.csv"
    pd.DataFrame({"model": ["bert-large-squad"] * 3, "batch_size_per_gpu": [4, 512, 512], "precision": ["fp16"] * 3,
                  "gpu": ["T4"] * 3}).to_csv(path, index=False)  # fmt: skip
    result = runner.invoke(app, ["fleet", "--jobs", str(path), "--model", "none"])
    assert result.exit_code == 0, result.output
    assert "2 predicted jobs may not fit their GPU's memory (memory_share_of_gpu > 1); 2 of them would in gradient-accumulation passes (passes_to_fit)" in result.output
