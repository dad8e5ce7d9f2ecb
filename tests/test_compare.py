"""predict compare: one job on many GPUs, each exactly the gpu= what-if of predict speedup, ranked."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from features.hardware import hardware_catalog
from predictor import Predictor
from predictor.compare import compare_gpus, default_candidates

PS = "examples/jobs/resnet50-ps.json"
SINGLE = "examples/jobs/resnet50-single.json"
LLAMA = "examples/jobs/llama-70b-512-h100.json"
runner = CliRunner()


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor()


def test_each_option_is_the_speedup_what_if_and_the_own_gpu_is_one(predictor):
    comparison = compare_gpus(predictor, SINGLE, ["A100", "H100", "T4"])
    by_gpu = {o.gpu: o for o in comparison.options}
    assert set(by_gpu) == {"V100-SXM2-32GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "T4"}
    for name in ("A100-SXM4-80GB", "H100-SXM5-80GB", "T4"):
        single = predictor.speedup(SINGLE, [f"gpu={name}"])
        o = by_gpu[name]
        assert (o.step_time_s, o.speedup, o.speedup_lower, o.speedup_upper) == (
            single.target.step_time_s, single.speedup, single.speedup_lower, single.speedup_upper)
        assert o.warnings == single.target.warnings
    own = by_gpu["V100-SXM2-32GB"]
    assert (own.speedup, own.speedup_lower, own.step_time_s) == (1.0, None, comparison.step_time_s)
    assert by_gpu["T4"].outside_training_data and not by_gpu["H100-SXM5-80GB"].outside_training_data
    steps = [o.step_time_s for o in comparison.options]
    assert steps == sorted(steps)


def test_a_layout_job_lists_the_gpus_it_does_not_fit_last_with_the_reason(predictor):
    comparison = compare_gpus(predictor, LLAMA, ["A800", "V100", "Quadro-RTX-8000", "H800"])
    names = [o.gpu for o in comparison.options]
    assert names[-1] == "V100-SXM2-16GB"
    refused = comparison.options[-1]
    assert refused.step_time_s is None and refused.error.startswith("does not fit: 31.5 GB per GPU needed")
    by_gpu = {o.gpu: o for o in comparison.options}
    # The H800 is the H100 with 400 GB/s NVLink: the TP8 layout's all-reduces make it 1.16x slower.
    assert by_gpu["H800-SXM5-80GB"].speedup == pytest.approx(1 / 1.16, abs=0.01)
    # BF16 on a Turing card runs at FP32, and the table says so.
    assert by_gpu["Quadro-RTX-8000"].computes_at == "fp32" and by_gpu["A800-SXM4-80GB"].computes_at is None
    assert comparison.method == "analytical layout model"


def test_a_precision_the_gpu_lacks_is_named(predictor):
    job = json.loads(open(SINGLE).read())
    job["workload"]["precision"] = "bf16"
    comparison = compare_gpus(predictor, job, ["V100", "A100"])
    by_gpu = {o.gpu: o for o in comparison.options}
    assert by_gpu["V100-SXM2-16GB"].computes_at == "fp32" and by_gpu["A100-SXM4-80GB"].computes_at is None


def test_default_candidates_are_one_gpu_per_family():
    catalog = hardware_catalog()
    families = {d.family for d in catalog.devices if d.kind == "gpu"}
    names = default_candidates()
    assert len(names) == len(set(names)) == len(families)
    assert {catalog.device(n).family for n in names} == families
    assert "A800-SXM4-80GB" in names and "A800-PCIE-80GB" not in names and "cpu-host" not in names


def test_cli_table_and_json():
    table = runner.invoke(app, ["compare", "--job", PS, "--gpu", "A100", "--gpu", "H800"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "resnet50-ps-8w on 3 GPUs, fastest first (baseline V100-SXM2-16GB" in table.output
    assert "its own GPU" in table.output and "outside the training data" in table.output
    out = runner.invoke(app, ["compare", "--job", PS, "--gpu", "A100", "--json"])
    data = json.loads(out.output)
    assert data["gpu"] == "V100-SXM2-16GB" and [o["gpu"] for o in data["options"]][-1] == "V100-SXM2-16GB"
    assert data["options"][0]["speedup"] > 1 and "speedup_lower" in data["options"][0]


@pytest.mark.parametrize(("gpu", "message"), [
    ("V10", "error: unknown gpu 'V10' at --gpu; did you mean V100-SXM2-16GB"),
    ("cpu-host", "error: --gpu: 'cpu-host' is not valid; a GPU of the catalogue (predict devices)"),
])
def test_cli_a_bad_gpu_is_one_line_and_exit_2(gpu, message):
    result = runner.invoke(app, ["compare", "--job", PS, "--gpu", gpu])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(message)


def test_a_layout_that_does_not_fit_its_own_gpu_lists_where_it_would(predictor):
    """Llama-70B without activation recompute needs 111.5 GB per GPU: not an H100, but an H200 or a B200."""
    job = json.loads(open(LLAMA).read())
    job["parallelism"]["activation_recompute"] = "none"
    comparison = compare_gpus(predictor, job, ["H200", "B200", "A100"])
    assert comparison.step_time_s is None
    by_gpu = {o.gpu: o for o in comparison.options}
    assert by_gpu["H100-SXM5-80GB"].error == "does not fit: 111.5 GB per GPU needed, H100-SXM5-80GB has 80 GB"
    for name in ("H200-SXM-141GB", "B200"):
        single = predictor.speedup(job, [f"gpu={name}"])
        assert by_gpu[name].step_time_s == single.target.step_time_s and by_gpu[name].speedup is None
    assert [o.gpu for o in comparison.options][:2] == ["B200", "H200-SXM-141GB"]
    result = runner.invoke(app, ["compare", "--job", LLAMA, "--gpu", "H200"], env={"COLUMNS": "200"})
    assert result.exit_code == 0


def test_a_job_no_gpu_compared_can_run_is_answered_with_exit_code_3(predictor, tmp_path):
    """Llama-70B on 512 T4s needs 31.5 GB per GPU: neither a T4, an L4 (24 GB) nor a 16 GB V100 holds it."""
    job = json.loads(open(LLAMA).read())
    job["cluster"]["gpu"], job["workload"]["precision"] = "T4", "fp16"
    comparison = compare_gpus(predictor, job, ["L4", "V100-SXM2-16GB"])
    assert not comparison.runs_anywhere and all(o.error.startswith("does not fit") for o in comparison.options)
    assert compare_gpus(predictor, LLAMA, ["L4"]).runs_anywhere  # its own H100 holds it
    path = tmp_path / "t4.json"
    path.write_text(json.dumps(job))
    table = runner.invoke(app, ["compare", "--job", str(path), "--gpu", "L4", "--gpu", "V100-SXM2-16GB"], env={"COLUMNS": "200"})
    assert table.exit_code == 3 and "does not fit: 31.5 GB per GPU needed, L4 has 24 GB" in table.stdout
    assert table.stderr == "nothing fits: no GPU compared can run llama-70b-512-h100; each is listed with why (try --gpu with more memory)\n"
    answered = runner.invoke(app, ["compare", "--job", str(path), "--gpu", "L4", "--json"])
    assert answered.exit_code == 3 and json.loads(answered.stdout)["runs_anywhere"] is False
    assert json.loads(answered.stderr)["nothing_fits"].startswith("no GPU compared can run llama-70b-512-h100")
