"""The training domain by combination: recorded at training, checked, faded toward the physics."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from predictor.api import Predictor
from predictor.domain import FACTS, SHRINK_PER_UNSEEN, kept_note


@pytest.fixture(scope="module")
def model_dirs(trained, tmp_path_factory):
    """The small testbed model, and a copy whose metadata predates the combination facts."""
    result, _ = trained
    old = tmp_path_factory.mktemp("old") / "model"
    shutil.copytree(result.path, old)
    metadata = json.loads((old / "metadata.json").read_text())
    for key in ("frameworks", "software_stacks", "models", "model_families", "combinations"):
        del metadata["domain"][key]
    (old / "metadata.json").write_text(json.dumps(metadata))
    return result.path, old


def test_training_records_the_combinations_it_saw(trained):
    domain = trained[0].metadata["domain"]
    # Every testbed run is a CPU process under PyTorch on the testbed's own models.
    assert domain["frameworks"] == ["pytorch"]
    assert domain["software_stacks"] == ["stock"]
    assert domain["model_families"] == ["testbed"]
    assert domain["combinations"]["architecture x device"] == [
        "allreduce-cluster x cpu-host", "allreduce-local x cpu-host", "ps-worker x cpu-host", "single x cpu-host",
    ]
    by_network = domain["combinations"]["architecture x network"]
    assert "ps-worker x emulated-1g" in by_network and "single x none" in by_network
    assert not any(c.startswith("single x emulated") for c in by_network)  # one host crosses no network


def test_a_ps_worker_job_on_v100s_fades_toward_the_physics_and_says_why(model_dirs, ps_job):
    new, old = model_dirs
    faded = Predictor(model=new).time(ps_job)
    unfaded = Predictor(model=old).time(ps_job)
    baseline = json.loads((new / "metadata.json").read_text())["baseline"]
    physics = Predictor(model=None, overlap=baseline).time(ps_job).step_time_s
    text = " ".join(faded.warnings)
    for fact in ("framework tensorflow", "model resnet50", "model family vision", "architecture x device ps-worker x V100",
                 "architecture x network ps-worker x ethernet-25g"):
        assert f"{fact} is not in the training data" in text, fact
    # Five unseen facts: the product of their estimated shares (none kept where one could not be estimated).
    shrink = json.loads((new / "metadata.json").read_text())["domain"]["shrink"]
    unseen = ("framework", "model", "model family", "architecture x device", "architecture x network")  # its stack is seen
    share = float(np.prod([shrink.get(fact, SHRINK_PER_UNSEEN) for fact in unseen]))
    assert kept_note(share) in text
    assert not any("x V100" in w for w in unfaded.warnings)  # an older artefact skips the check
    # log t = log physics + share x (the correction the old artefact applies in full)
    expected = physics * (unfaded.step_time_s / physics) ** share
    assert faded.step_time_s == pytest.approx(expected, rel=1e-6)
    # The interval holds both the faded and the unfaded prediction, and both intervals.
    assert faded.lower_s <= min(faded.step_time_s, unfaded.lower_s) + 1e-12
    assert faded.upper_s >= max(faded.step_time_s, unfaded.upper_s) - 1e-12
    assert faded.upper_s / faded.lower_s >= unfaded.upper_s / unfaded.lower_s - 1e-12


def test_jobs_inside_every_seen_combination_keep_their_full_correction(model_dirs, testbed_runs):
    from features.table import validate_columns
    from training.dataset import table_columns

    new, old = model_dirs
    table = validate_columns(table_columns(testbed_runs), len(testbed_runs))
    inside = Predictor(model=new).predict_table(table)
    before = Predictor(model=old).predict_table(table)
    assert np.array_equal(inside.step_time_s, before.step_time_s)
    assert np.array_equal(inside.lower_s, before.lower_s) and np.array_equal(inside.upper_s, before.upper_s)
    notes = [n for n in inside.extrapolation if n is not None]
    assert not any("not in the training data" in n and " x " in n for n in notes)


def test_learned_output_is_labelled_with_the_baseline_it_starts_from(model_dirs, ps_job, tmp_path):
    """The residual corrects the artefact's baseline, so that is the label, whatever --overlap says."""
    from typer.testing import CliRunner

    from cli.main import app

    new, _ = model_dirs
    baseline = json.loads((new / "metadata.json").read_text())["baseline"]
    job = tmp_path / "job.json"
    job.write_text(json.dumps(ps_job))
    for overlap in ("none", "overlapped"):
        result = CliRunner().invoke(app, ["time", "--job", str(job), "--model", str(new), "--overlap", overlap, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["overlap"] == baseline
    analytical = CliRunner().invoke(app, ["time", "--job", str(job), "--model", "none", "--overlap", "none", "--json"])
    assert analytical.exit_code == 0, analytical.output
    assert json.loads(analytical.stdout)["overlap"] == "none"  # the analytical model alone keeps the chosen form


def test_a_tuned_stack_is_outside_a_model_trained_on_stock_stacks(model_dirs):
    """An MLPerf-style tuned stack is a fact of its own: the correction learned on stock stacks fades."""
    new, _ = model_dirs
    job = {
        "workload": {"model": "testbed-recsys", "batch_size_per_gpu": 128},
        "parallelism": {"architecture": "ps-worker", "workers": 4, "parameter_servers": 1},
        "cluster": {"gpu": "cpu-host", "network": "emulated-250m", "gpus_per_node": 1},
    }
    stock = Predictor(model=new).time(job)
    tuned = Predictor(model=new).time({**job, "workload": {**job["workload"], "software_stack": "tuned"}})
    shrink = json.loads((new / "metadata.json").read_text())["domain"]["shrink"]
    assert "software stack" not in shrink  # one stack seen: nothing to estimate a share from
    assert "software stack tuned is not in the training data" in " ".join(tuned.warnings)
    # Nothing tested how far the correction carries to another stack: none of it is kept.
    assert "the prediction is the physics alone" in " ".join(tuned.warnings)
    baseline = json.loads((new / "metadata.json").read_text())["baseline"]
    tuned_job = {**job, "workload": {**job["workload"], "software_stack": "tuned"}}
    assert tuned.step_time_s == pytest.approx(Predictor(model=None, overlap=baseline).time(tuned_job).step_time_s, rel=1e-9)
    assert not any("not in the training data" in w for w in stock.warnings)
    assert "software stack" in FACTS


def test_a_gpu_named_by_its_alias_is_the_gpu_the_data_holds(ps_job):
    """The shipped model's data holds the V100 SXM2 16GB: the alias "V100" names it, and is no new GPU type."""
    full = Predictor().time(ps_job)
    alias = Predictor().time({**ps_job, "cluster": {**ps_job["cluster"], "gpu": "V100"}})
    assert ps_job["cluster"]["gpu"] == "V100-SXM2-16GB"
    assert alias.warnings == full.warnings
    assert not any("gpu V100" in w for w in alias.warnings)
    assert alias.step_time_s == full.step_time_s


@pytest.mark.parametrize(("part", "twin"), [("A800", "A100-SXM4-80GB"), ("H800-SXM5-80GB", "H100-SXM5-80GB"), ("H800 PCIe", "H100-PCIE-80GB")])
def test_a_part_with_its_twins_silicon_is_inside_the_data_its_twin_is(part, twin):
    """An A800/H800 is the A100/H100 with less NVLink: on one GPU it predicts exactly as its twin, and its
    8-GPU all-reduce job keeps the twin's correction and is never faster (monotone in link bandwidth)."""
    predictor = Predictor()
    single = {"workload": {"model": "bert-large", "precision": "bf16", "batch_size_per_gpu": 32}, "cluster": {"gpu": twin}}
    on_twin, on_part = predictor.time(single), predictor.time({**single, "cluster": {"gpu": part}})
    assert (on_part.step_time_s, on_part.lower_s, on_part.upper_s, on_part.warnings) == (
        on_twin.step_time_s, on_twin.lower_s, on_twin.upper_s, on_twin.warnings)
    eight = {**single, "parallelism": {"architecture": "allreduce-local", "workers": 8}}
    pair = predictor.speedup({**eight, "cluster": {"gpu": twin}}, [f"gpu={part}"])
    assert not any("not in the training data" in w for w in pair.target.warnings)
    assert pair.speedup <= 1.0


def test_a_silicon_twin_must_name_a_catalogue_device(tmp_path):
    from features.hardware import HARDWARE_DIR, HardwareCatalog

    data = json.loads((HARDWARE_DIR / "gpus.json").read_text())
    (part,) = [d for d in data["devices"] if d["name"] == "A800-SXM4-80GB"]
    part["same_silicon_as"] = "A100-SXM4-81GB"
    (tmp_path / "gpus.json").write_text(json.dumps(data))
    shutil.copy(HARDWARE_DIR / "links.json", tmp_path / "links.json")
    with pytest.raises(ValueError, match="A800-SXM4-80GB: same_silicon_as 'A100-SXM4-81GB' must name a catalogue device"):
        HardwareCatalog.from_files([tmp_path / "gpus.json", tmp_path / "links.json"])


@pytest.mark.parametrize(("share", "text"), [(0.0, "the prediction is the physics alone"), (0.25, "the prediction keeps 25% of the learned correction"),
                                             (0.0025, "the prediction keeps 0.25% of the learned correction"),
                                             (1.0, "the prediction keeps 100% of the learned correction")])
def test_the_kept_share_in_words(share, text):
    assert kept_note(share) == text


def test_an_accumulated_step_is_checked_against_the_models_measured_accumulating(model_dirs, testbed_runs):
    """No testbed run accumulates: an accumulated step of a testbed model fades to the physics and says so,
    while its single-pass step keeps the whole correction (the fact is not checked there)."""
    new, _ = model_dirs
    row = testbed_runs.iloc[0]
    job = {"workload": {"model": row["model"], "batch_size_per_gpu": 32, "framework": row["framework"]},
           "parallelism": {"architecture": "single"}, "cluster": {"gpu": row["gpu"]}}  # fmt: skip
    accumulated = {**job, "workload": {**job["workload"], "gradient_accumulation_steps": 4}}
    metadata = json.loads((new / "metadata.json").read_text())
    assert metadata["domain"]["combinations"]["accumulation x model"] == []
    single = Predictor(model=new).time(job)
    faded = Predictor(model=new).time(accumulated)
    physics = Predictor(model=None, overlap=metadata["baseline"]).time(accumulated).step_time_s
    assert not any("accumulation x model" in w for w in single.warnings)
    assert f"accumulation x model accumulated x {row['model']} is not in the training data" in " ".join(faded.warnings)
    share = metadata["domain"]["shrink"].get("accumulation x model", SHRINK_PER_UNSEEN)
    assert share == SHRINK_PER_UNSEEN  # nothing to estimate it on
    assert faded.step_time_s == pytest.approx(physics, rel=1e-9)
