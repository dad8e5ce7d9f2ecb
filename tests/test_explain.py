"""Explanations: families add up to the model's log residual; what-ifs explain the speedup."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from features.build import FAMILIES, feature_family
from features.table import table_from_rows
from predictor import Predictor
from predictor.explain import SpeedupExplanation, explain, family_contributions
from predictor.fleet import family_column, score_fleet

TESTBED_JOB = {
    "name": "recsys-ps",
    "workload": {"model": "testbed-recsys", "batch_size_per_gpu": 128},
    "parallelism": {"architecture": "ps-worker", "workers": 4, "parameter_servers": 1},
    "cluster": {"gpu": "cpu-host", "network": "emulated-250m", "gpus_per_node": 1},
}


@pytest.fixture(scope="module")
def predictor(trained):
    result, _ = trained
    return Predictor(model=result.path)


def test_families_sum_to_the_log_residual_minus_the_base(predictor, testbed_runs):
    rows = testbed_runs.drop(columns=["measured_step_time_s"]).to_dict("records")
    result = predictor.predict_table(table_from_rows(rows))
    families, base = family_contributions(predictor, result)
    residual = result.learned.log_step_time_s - np.log(result.breakdown.step_time_s(predictor.artefact.baseline))
    assert families.shape == (len(rows), len(FAMILIES))
    np.testing.assert_allclose(families.sum(axis=1) + base, residual, atol=1e-4)


def test_every_feature_has_a_family(predictor):
    assert {feature_family(name) for name in predictor.artefact.feature_names} <= set(FAMILIES)


def test_one_job_explanation_multiplies_out_to_the_prediction(predictor):
    e = explain(predictor, TESTBED_JOB)
    product = e.analytical_step_time_s * e.base_factor * np.prod(list(e.family_factors.values()))
    assert product == pytest.approx(e.step_time_s, rel=1e-4)
    assert sum(e.shares.values()) == pytest.approx(1.0)
    assert e.bottleneck in ("io", "compute", "memory", "communication", "dispatch") and e.summary()


def test_the_analytical_step_is_split_into_the_parts_of_the_physics_the_model_starts_from(predictor):
    assert predictor.artefact.baseline == "roofline"
    e = explain(predictor, TESTBED_JOB)
    assert sum(e.physics_seconds.values()) == pytest.approx(e.analytical_step_time_s, rel=1e-9)
    part = max(e.physics_seconds, key=e.physics_seconds.get)
    assert e.summary().startswith(f"{part} ")
    assert f"{e.physics_seconds[part] / e.analytical_step_time_s:.0%} of the analytical step" in e.summary()
    assert e.to_dict()["physics_breakdown_s"] == e.physics_seconds


def test_a_host_bound_job_is_explained_by_its_launches_not_by_the_pai_components():
    # Tacotron 2 on an H100: the PAI components (datasheet rates, no launches) put memory first,
    # while the roofline physics gives three quarters of the step to kernel launches.
    job = {"name": "tacotron2", "workload": {"model": "tacotron2", "batch_size_per_gpu": 256, "precision": "fp16"},
           "cluster": {"gpu": "H100-SXM5-80GB"}}
    e = explain(Predictor(model=None, overlap="roofline"), job)
    assert e.bottleneck == "dispatch" and e.shares["memory"] > 0.8
    assert e.physics_seconds["kernel launches"] > 0.5 * e.analytical_step_time_s
    assert e.summary().startswith("kernel launches dominate: ")
    # The PAI model as the baseline keeps the PAI components' account.
    pai = explain(Predictor(model=None, overlap="none"), job)
    assert pai.physics_seconds is None and pai.summary().startswith("memory dominates: ") and pai.bottleneck == "memory"


def test_what_if_explanation_splits_the_speedup(predictor):
    e = explain(predictor, TESTBED_JOB, ["network=emulated-1g"])
    assert isinstance(e, SpeedupExplanation)
    # A network-tier what-if keeps the model's network share of the correction's change, factors included.
    assert e.share == predictor.artefact.pair_shares["network"]
    base = e.base_speedup_factor
    assert base == pytest.approx((e.baseline.whole_base_factor / e.target.whole_base_factor) ** e.share)
    product = e.analytical_speedup * base * np.prod(list(e.family_speedup_factors.values()))
    assert product == pytest.approx(e.speedup, rel=1e-4)
    assert e.target.seconds["communication"] < e.baseline.seconds["communication"]
    # The summary's adjustment is the whole of it, base rate included (a faded baseline keeps less of it).
    assert f"adjusts it by x{e.speedup / e.analytical_speedup:.2f} (x{base:.2f} its base rate" in e.summary()


def test_a_what_if_onto_an_unseen_fact_keeps_what_that_side_keeps(predictor):
    """A tuned stack is outside the testbed model's data (its correction keeps none): the what-if onto it
    keeps none of the correction's change either, so the speedup is the physics' and the summary says why."""
    e = explain(predictor, TESTBED_JOB, ["software_stack=tuned"])
    assert e.baseline.kept == 1.0 and e.target.kept == 0.0
    assert e.correction_share == 0.0 and e.base_speedup_factor == 1.0
    assert all(factor == 1.0 for factor in e.family_speedup_factors.values())
    assert e.speedup == pytest.approx(e.analytical_speedup, rel=1e-9)
    assert predictor.speedup(TESTBED_JOB, ["software_stack=tuned"]).speedup == pytest.approx(e.speedup, rel=1e-9)
    assert "leaves it as it is (the target lies outside the training data)" in e.summary()
    assert e.to_dict()["correction_share"] == 0.0


def test_fleet_explanations_match_the_table_ones(predictor, trained, testbed_runs):
    result, _ = trained
    jobs = testbed_runs.drop(columns=["measured_step_time_s"]).head(20)
    scored = score_fleet(jobs, model=str(result.path), explain=True, progress=False)
    direct = predictor.predict_table(table_from_rows(jobs.to_dict("records")))
    families, _ = family_contributions(predictor, direct)
    for i, family in enumerate(FAMILIES):
        np.testing.assert_allclose(scored[family_column(family)].to_numpy(), np.exp(families[:, i]), rtol=1e-5)
    assert scored["why_dominant"].notna().all()


def test_explain_cli_json_and_plot(trained, tmp_path):
    from cli.main import app

    result, _ = trained
    job = tmp_path / "job.json"
    job.write_text(json.dumps(TESTBED_JOB))
    plot = tmp_path / "why.png"
    out = CliRunner().invoke(app, ["explain", "--job", str(job), "--to", "allreduce-nvlink", "--model", str(result.path),
                                   "--json", "--plot", str(plot)])
    assert out.exit_code == 2 and "cpu-host has no NVLink" in out.stderr
    out = CliRunner().invoke(app, ["explain", "--job", str(job), "--to", "network=emulated-1g", "--model", str(result.path),
                                   "--json", "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert set(data["family_speedup_factors"]) == set(FAMILIES)
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("per_tree_above_rows", [1, 10**9], ids=["tree by tree", "one call"])
def test_attributions_are_the_shap_librarys_tree_shap_values(predictor, testbed_runs, monkeypatch, per_tree_above_rows):
    shap = pytest.importorskip("shap")
    from predictor import treeshap

    monkeypatch.setattr(treeshap, "PER_TREE_ABOVE_ROWS", per_tree_above_rows)
    rows = testbed_runs.drop(columns=["measured_step_time_s"]).head(30).to_dict("records")
    result = predictor.predict_table(table_from_rows(rows))
    from features.build import physical_features

    frame = physical_features(result.resolved, result.breakdown)
    explainer = shap.TreeExplainer(predictor.artefact.xgboost_booster())
    reference = explainer.shap_values(frame.values)
    families, _ = family_contributions(predictor, result)
    from predictor.explain import family_matrix

    np.testing.assert_allclose(families, reference @ family_matrix(frame.names), atol=1e-4)


def test_saabas_attributions_also_add_up(predictor, testbed_runs):
    rows = testbed_runs.drop(columns=["measured_step_time_s"]).head(40).to_dict("records")
    result = predictor.predict_table(table_from_rows(rows))
    families, base = family_contributions(predictor, result, "saabas")
    residual = result.learned.log_step_time_s - np.log(result.breakdown.step_time_s(predictor.artefact.baseline))
    np.testing.assert_allclose(families.sum(axis=1) + base, residual, atol=1e-4)


def test_a_job_outside_the_training_domain_explains_the_faded_correction(predictor, ps_job):
    """PS/Worker on V100s is outside the testbed model's domain: the parts add up to what the prediction applies."""
    from features.jobspec import flatten
    from predictor.api import as_job

    result = predictor.predict_table(table_from_rows([flatten(as_job(ps_job))]))
    assert "not in the training data" in result.extrapolation[0]
    families, base = family_contributions(predictor, result)
    applied = result.learned.log_step_time_s - np.log(result.breakdown.step_time_s(predictor.artefact.baseline))
    np.testing.assert_allclose(families.sum(axis=1) + base, applied, atol=1e-4)
    e = explain(predictor, ps_job)
    product = e.analytical_step_time_s * e.base_factor * np.prod(list(e.family_factors.values()))
    assert product == pytest.approx(e.step_time_s, rel=1e-4)


def test_an_input_bound_step_is_said_to_be_bound_by_its_input():
    # 1.5 s of the rest (matrix 0.6, memory-bound 0.4, exposed 0.5) and 2 s of prefetched input: input bounds it.
    from predictor.explain import Explanation

    parts = {"matrix operators": 0.6, "memory-bound operators": 0.4, "kernel launches": 0.0, "host overhead": 0.0,
             "exposed communication": 0.5, "input": 0.5}  # fmt: skip
    e = Explanation(name="j", step_time_s=2.0, analytical_step_time_s=2.0, shares={}, seconds={}, bottleneck="io",
                    bottleneck_link="pcie-gen3", base_factor=None, family_factors={}, physics_seconds=parts)  # fmt: skip
    assert e.summary() == (
        "input over pcie-gen3 bounds the step: the prefetched input takes the whole analytical step (2 s), 0.5 s longer than the rest"
    )
    parts.update({"input": 0.0, "matrix operators": 1.1})
    assert e.summary() == "matrix operators dominate: 55% of the analytical step (2 s)"


def test_a_speedup_explanation_names_the_throughput_where_the_samples_per_step_change():
    predictor = Predictor()
    single = "examples/jobs/resnet50-single.json"
    steps = ["workers=8", "architecture=allreduce-local"]
    why = explain(predictor, single, steps)
    result = predictor.speedup(single, steps)
    assert why.samples_per_step_ratio == 8.0 and why.speedup == pytest.approx(result.speedup, rel=1e-12)
    assert why.summary().endswith(f"; that is per step: with 8x the samples per step, {result.throughput_ratio:.2f}x the throughput")
    assert why.to_dict()["throughput_ratio"] == pytest.approx(result.throughput_ratio, rel=1e-12)
    assert "samples per step" not in explain(predictor, "examples/jobs/resnet50-ps.json", ["allreduce-nvlink"]).summary()
