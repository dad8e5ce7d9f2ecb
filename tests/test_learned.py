"""The learned layer: estimator protocol, artefact round trip, coverage, MLflow and the Predictor."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.artefact import DEDUPLICATE_ABOVE_ROWS, ArtefactError, distinct_feature_rows, load_artefact, read_metadata
from predictor.calibration import POOLED, CalibrationTable, run_bin_keys, step_bin_keys, step_bins
from training.cv import group_folds
from training.dataset import build_dataset
from training.model import ProtocolError, ResidualRegressor

FAST = {"max_depth": 4, "eta": 0.1}


@pytest.fixture(scope="module")
def dataset(testbed_runs):
    return build_dataset(testbed_runs)


def test_protocol_order_is_enforced(dataset):
    X, y = dataset.features.values, dataset.residual
    keys = run_bin_keys(dataset.runs)
    model = ResidualRegressor(params=FAST, num_boost_round=20)
    with pytest.raises(ProtocolError, match=r"call fit\(\) first"):
        model.calibrate(np.zeros(len(y)), keys)
    with pytest.raises(ProtocolError, match=r"call fit\(\) then calibrate\(\)"):
        model.predict_interval(X, keys)
    model.fit(X, y)
    with pytest.raises(ProtocolError, match=r"call calibrate\(\) after fit\(\)"):
        model.predict_interval(X, keys)
    model.calibrate(y - model.predict(X), keys)
    y_hat, low, high = model.predict_interval(X, keys, confidence_level=0.8)
    assert np.all(low < high)
    assert np.mean((y >= low) & (y <= high)) >= 0.75  # calibrated on these very residuals


def test_bin_chains_split_one_host_jobs_by_framework_and_networked_ones_by_tier():
    keys = step_bin_keys(
        ["single", "allreduce-local", "ps-worker", "allreduce-local"],
        [None, None, "ethernet-25g", None],
        ["stock", "stock", "stock", "tuned"],
        ["tensorflow", "pytorch", "pytorch", "pytorch"],
    )
    assert keys == [
        ("single|tensorflow", "single", POOLED),
        ("allreduce-local|pytorch", "allreduce-local", POOLED),
        ("ps-worker|ethernet-25g", "ps-worker", POOLED),
        ("tuned|allreduce-local", "tuned", POOLED),
    ]


def test_a_job_table_gets_the_bins_its_run_rows_were_calibrated_in():
    """The runtime's bins (from a job table, per distinct combination) are the training's (from run rows)."""
    import pandas as pd

    from features.table import table_from_rows

    rows = [
        {"gpu": "v100", "model": "resnet50", "framework": "tensorflow"},
        {"gpu": "v100", "model": "resnet50"},  # pytorch, stock, single by default
        {"gpu": "v100", "model": "resnet50", "architecture": "ps-worker", "workers": 2, "network": "ethernet-25g"},
        {"gpu": "v100", "model": "resnet50", "software_stack": "tuned", "architecture": "allreduce-local", "gpus_per_worker": 8},
    ]
    table = table_from_rows(rows)
    names = ["single|tensorflow", "single|pytorch", "ps-worker|ethernet-25g", "tuned", "single", POOLED]
    calibration = CalibrationTable({n: np.zeros(3) for n in names}, {n: np.zeros(3) for n in names}, {n: 100 for n in names})
    runs = pd.DataFrame({leaf: table.columns[leaf] for leaf in ("architecture", "network", "software_stack", "framework")})
    expected = ["single|tensorflow", "single|pytorch", "ps-worker|ethernet-25g", "tuned"]
    assert list(step_bins(calibration, table)) == expected
    assert list(calibration.bin_for(run_bin_keys(runs))) == expected


def test_estimator_follows_the_sklearn_contract(dataset):
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    model = ResidualRegressor(params=FAST, num_boost_round=10, seed=3)
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(NotFittedError):
        model.predict(dataset.features.values)
    with pytest.raises(ValueError, match="one finite log residual per row"):
        model.fit(dataset.features.values, np.full(len(dataset), np.nan))


def test_held_out_coverage_is_close_to_nominal(dataset):
    """Split conformal on exchangeable rows: 90% intervals cover 90% of held-out runs.

    Rows are split at random (conformal's exchangeability); with n held-out
    runs the binomial standard deviation is sqrt(0.09 / n): we allow three.
    """
    rng = np.random.default_rng(0)
    order = rng.permutation(len(dataset))
    train, calib, test = np.split(order, [len(order) // 2, 3 * len(order) // 4])
    X, y = dataset.features.values, dataset.residual
    keys = run_bin_keys(dataset.runs)
    model = ResidualRegressor(params=FAST, num_boost_round=100).fit(X[train], y[train])
    model.calibrate(y[calib] - model.predict(X[calib]), [keys[i] for i in calib])
    y_hat, low, high = model.predict_interval(X[test], [keys[i] for i in test], confidence_level=0.9)
    coverage = np.mean((y[test] >= low) & (y[test] <= high))
    tolerance = 3 * np.sqrt(0.09 / len(test))
    assert abs(coverage - 0.9) <= tolerance + 0.05, coverage  # + a bin-size allowance for Mondrian tables


def test_artefact_round_trip_gives_the_same_predictions(trained, dataset):
    result, _ = trained
    artefact = load_artefact(result.path)
    X = dataset.features.values
    assert np.array_equal(artefact.predict_residual(X), result.model.predict(X))
    assert artefact.feature_names == list(dataset.features.names)
    files = {p.name for p in result.path.iterdir()}
    assert files == {"booster.ubj", "calibration.json", "metadata.json", "model_card.md"}


def test_repeated_rows_are_predicted_once_with_the_same_answers(trained, dataset):
    result, _ = trained
    artefact = load_artefact(result.path)
    X = dataset.features.values
    rows = np.random.default_rng(0).integers(0, len(X), DEDUPLICATE_ABOVE_ROWS + 500)
    assert np.array_equal(artefact.predict_residual(X[rows]), result.model.predict(X)[rows])


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=40),
    nan_at=st.integers(0, 17),
    collide=st.booleans(),
)
def test_distinct_feature_rows_are_exact(picks, nan_at, collide):
    """data[first][inverse] is data bit for bit, with NaNs and even when every hash collides."""
    palette = np.arange(6 * 3, dtype=np.float32).reshape(6, 3) * np.float32(0.1)  # an odd width pads the hash
    palette.flat[nan_at] = np.nan
    data = palette[picks]
    key = np.zeros(len(data), np.uint64) if collide else None
    first, inverse = distinct_feature_rows(data, key)
    assert np.array_equal(data[first][inverse].view(np.uint32), data.view(np.uint32))
    if not collide:
        assert len(first) == len({row.tobytes() for row in data})


def test_loading_checks_the_schema_version(trained, tmp_path):
    result, _ = trained
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(result.path, copy)
    meta = json.loads((copy / "metadata.json").read_text())
    meta["feature_schema_version"] = 0
    (copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtefactError, match="schema versions"):
        load_artefact(copy)


def test_a_model_records_the_physics_it_corrects(trained, tmp_path):
    """The constants go into the artefact; one written before they were recorded still loads, unchecked."""
    import dataclasses
    import shutil

    from features.mechanisms import physics_constants

    result, _ = trained
    meta = json.loads((result.path / "metadata.json").read_text())
    assert meta["physics_constants"] == dataclasses.asdict(physics_constants())
    copy = tmp_path / "older"
    shutil.copytree(result.path, copy)
    del meta["physics_constants"]
    (copy / "metadata.json").write_text(json.dumps(meta))
    assert "physics_constants" not in load_artefact(copy).metadata
    # Constants that moved since: refused for predictions, readable for the baseline's name alone.
    meta["physics_constants"] = {**dataclasses.asdict(physics_constants()), "launch_scale": 99.0}
    (copy / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ArtefactError, match="launch_scale 99.0 where this version has"):
        load_artefact(copy)
    assert read_metadata(copy, physics=False)["baseline"] == meta["baseline"]


def test_mlflow_run_and_pyfunc_load(trained, testbed_runs):
    import mlflow

    result, uri = trained
    mlflow.set_tracking_uri(uri)
    run = mlflow.get_run(result.run_id)
    assert run.data.params["data_fingerprint"] == result.metadata["data"]["fingerprint"]
    assert "cv_mape" in run.data.metrics and "fold_mape" in run.data.metrics
    model = mlflow.pyfunc.load_model(f"runs:/{result.run_id}/model")
    jobs = testbed_runs.drop(columns=["measured_step_time_s"]).head(5)
    answers = model.predict(jobs)
    assert len(answers) == 5 and all("error" not in a for a in answers), answers
    assert all(0 < a["lower_s"] <= a["step_time_s"] <= a["upper_s"] for a in answers)
    assert [a["name"] for a in answers] == list(jobs["name"])
    versions = mlflow.MlflowClient().search_model_versions("name='step-time-predictor'")
    assert versions


def test_predictor_uses_the_model_and_flags_unseen_gpus(trained):
    from predictor import Predictor

    result, _ = trained
    p = Predictor(model=result.path)
    job = {
        # The testbed's runs are this year's torch builds: a job on them states it (the default, 2024, is
        # older than anything this model saw).
        "workload": {"model": "testbed-resnet", "batch_size_per_gpu": 32, "software_year": 2026},
        "parallelism": {"architecture": "ps-worker", "workers": 2, "parameter_servers": 1},
        "cluster": {"gpu": "cpu-host", "network": "emulated-250m", "gpus_per_node": 1},
    }
    prediction = p.time(job)
    assert prediction.method == "learned"
    assert prediction.lower_s <= prediction.step_time_s <= prediction.upper_s
    assert not prediction.warnings
    default_year = p.time({**job, "workload": {"model": "testbed-resnet", "batch_size_per_gpu": 32}})
    assert default_year.warnings == (
        "outside the training data: software release year below the training range (2026-2026); the interval is the pooled one",
    )
    moved = p.speedup(job, ["network=emulated-1g"])
    assert moved.speedup_lower <= moved.speedup <= moved.speedup_upper
    assert 0.0 <= moved.p_speedup_gt_1 <= 1.0
    identity = p.speedup(job, ["network=emulated-250m"])
    assert identity.speedup == 1.0 and identity.speedup_lower == identity.speedup_upper == 1.0
    elsewhere = p.time({**job, "cluster": {"gpu": "V100", "network": "ethernet-25g"}})
    assert any("not in the training data" in w for w in elsewhere.warnings)


def test_a_what_if_outside_the_measured_kinds_is_no_identity():
    from predictor.calibration import IDENTITY, MIXED, pair_kind

    base = {"architecture": np.array(["single"] * 3, object), "network": np.array(["ethernet-25g"] * 3, object),
            "total_gpus": np.ones(3), "software_stack": np.array(["stock"] * 3, object)}
    base.update({k: np.array(["x"] * 3, object) for k in ("intra_node_link", "gpu", "precision")})
    base["batch_size_per_gpu"] = np.full(3, 32.0)
    base["software_year"] = np.full(3, 2020.0)
    target = dict(base)
    target["software_stack"] = np.array(["stock", "compiled", "compiled"], object)
    target["network"] = np.array(["ethernet-25g", "ethernet-25g", "ethernet-100g"], object)
    # Columns outside the kinds that move with one kind leave it that kind (more GPUs change `workers`).
    assert list(pair_kind(base, target)) == [IDENTITY, MIXED, "network"]
    target["software_stack"] = base["software_stack"]
    assert list(pair_kind(base, target)) == [IDENTITY, IDENTITY, "network"]
    # A later release alone is a kind of its own, measured on Lambda's suite versions.
    target["software_year"] = np.array([2020.0, 2022.0, 2022.0])
    assert list(pair_kind(base, target)) == [IDENTITY, "software_year", MIXED]


def test_a_software_stack_what_if_gets_an_interval_around_its_speedup():
    from predictor import Predictor

    job = {"workload": {"model": "resnet50", "precision": "fp16", "framework": "tensorflow", "batch_size_per_gpu": 256},
           "cluster": {"gpu": "V100-SXM2-16GB"}}
    compiled = Predictor().speedup(job, ["software_stack=compiled"])
    # Fusion moves a share of ResNet-50's memory-bound traffic: faster, and the interval holds the point.
    assert compiled.speedup > 1.0
    assert compiled.speedup_lower < compiled.speedup < compiled.speedup_upper
    assert 0.5 < compiled.p_speedup_gt_1 <= 1.0


def test_missing_default_model_falls_back_with_a_warning(monkeypatch, tmp_path, ps_job):
    """Without a shipped model (an install without models/) the analytical model answers, with a warning."""
    from predictor import Predictor

    monkeypatch.delenv("PREDICT_MODEL_DIR", raising=False)
    monkeypatch.setattr("predictor.api.DEFAULT_MODEL_DIR", tmp_path / "nothing")
    prediction = Predictor().time(ps_job)
    assert prediction.method == "analytical"
    assert any("analytical model only" in w for w in prediction.warnings)


def test_predict_model_dir_set_to_a_missing_directory_is_an_error(monkeypatch, tmp_path):
    """A directory the user named explicitly is not silently replaced by the analytical model."""
    from features.errors import SpecError
    from predictor import Predictor

    monkeypatch.setenv("PREDICT_MODEL_DIR", str(tmp_path / "nothing"))
    with pytest.raises(SpecError, match="PREDICT_MODEL_DIR"):
        Predictor()


def test_grouped_folds_never_split_a_group(dataset):
    for train, valid in group_folds(dataset.group, 4):
        assert not set(dataset.group[train]) & set(dataset.group[valid])


def test_no_feature_names_a_model_or_a_gpu():
    """Identities do not transfer (features.build docstring): the residual sees mechanisms only."""
    from features.build import physical_features
    from features.resolve import resolve
    from features.table import table_from_rows

    resolved = resolve(table_from_rows([{"model": "resnet50", "gpu": "A100-SXM4-80GB"}]))
    names = physical_features(resolved, resolved.breakdown()).names
    for identity in ("log_flops_per_sample", "log_param_count", "log_peak_flops_per_s", "device_release_year"):
        assert identity not in names
    assert {"log_roofline_s", "log_matrix_s", "log_launch_s"} <= set(names)
    assert "log_exposed_comm_s" not in names  # rises when more peak shortens the backward pass


def test_two_notes_of_a_job_are_joined_and_a_single_note_kept():
    from predictor.learned import _merge_notes

    notes = np.array(["gpu X is not in the training data", None, "a", None], object)
    more = np.array(["framework y is not in the training data", "b", None, None], object)
    merged = _merge_notes(notes, more)
    assert list(merged) == ["gpu X is not in the training data; framework y is not in the training data", "b", "a", None]
    assert _merge_notes(notes, np.full(4, None, object)) is notes


def test_an_unseen_gpu_type_keeps_its_bin_and_an_unseen_architecture_takes_the_pooled_one():
    """Calibration residuals come from folds that hold whole GPU types out, so they already price a new GPU;
    nothing in them prices an architecture never trained on."""
    import copy

    from predictor import Predictor

    shipped = Predictor()
    job = {"workload": {"model": "resnet50", "batch_size_per_gpu": 64}, "parallelism": {"architecture": "single"},
           "cluster": {"gpu": "A100-SXM4-80GB"}}
    seen = shipped.time(job)
    assert not seen.warnings
    for forget, key, pooled in (("A100-SXM4-80GB", "gpus", False), ("single", "architectures", True)):
        p = Predictor()
        p.artefact.metadata = copy.deepcopy(p.artefact.metadata)
        p.artefact.metadata["domain"][key].remove(forget)
        unseen = p.time(job)
        (warning,) = unseen.warnings
        assert f"{forget} is not in the training data" in warning
        assert ("the interval is the pooled one" in warning) is pooled
        assert unseen.step_time_s == pytest.approx(seen.step_time_s)  # neither fact fades the correction
        same = (unseen.lower_s, unseen.upper_s) == pytest.approx((seen.lower_s, seen.upper_s))
        assert same is not pooled
        if pooled:  # the pooled bin holds the MLPerf and testbed residuals too: wider
            assert unseen.upper_s / unseen.lower_s > seen.upper_s / seen.lower_s


@pytest.mark.parametrize("width", [1, 4, 7])
def test_row_hashes_do_not_depend_on_the_block_size(width):
    from predictor.artefact import _row_hashes

    bits = np.random.default_rng(width).integers(0, 2**32, size=(1000, width), dtype=np.uint32)
    whole = _row_hashes(bits, block_rows=10**6)
    assert np.array_equal(_row_hashes(bits, block_rows=7), whole)
    assert len(np.unique(whole)) == 1000  # distinct random rows, distinct hashes


def test_a_speedup_keeps_its_kinds_share_of_the_corrections_change():
    """Hand computed: physics 1.5 s -> 1.2 s (1.25x), learned 2.0 s -> 1.0 s (2x); a link what-if keeping a
    quarter of the correction's change: log speedup = log 1.25 + 0.25 x (log 2 - log 1.25)."""
    from types import SimpleNamespace

    from predictor.learned import LearnedTimes, predict_speedup

    def times(step_s, physics_s):
        return LearnedTimes(np.log([step_s]), np.array([step_s * 0.8]), np.array([step_s * 1.2]), np.array([None], object),
                            np.array([False]), np.log([physics_s]))

    columns = {"architecture": np.array(["allreduce-local"], object), "network": np.array([None], object),
               "total_gpus": np.array([8.0]), "gpu": np.array(["V100"], object), "precision": np.array(["fp16"], object),
               "batch_size_per_gpu": np.array([64.0])}
    base = {**columns, "intra_node_link": np.array(["pcie-gen3"], object)}
    target = {**columns, "intra_node_link": np.array(["nvlink-gen2"], object)}
    artefact = SimpleNamespace(pair_shares={"intra_node_link": 0.25, "all": 1.0}, speedup_calibration=None)
    result = predict_speedup(artefact, times(2.0, 1.5), times(1.0, 1.2), base, target, 0.9)
    expected = np.exp(np.log(1.25) + 0.25 * (np.log(2.0) - np.log(1.25)))
    assert result.speedup[0] == pytest.approx(expected, rel=1e-12)
    # Without estimates (a model trained before them) the learned ratio stands.
    artefact.pair_shares = None
    assert predict_speedup(artefact, times(2.0, 1.5), times(1.0, 1.2), base, target, 0.9).speedup[0] == pytest.approx(2.0)


def test_a_speedup_fades_the_corrections_change_by_the_less_familiar_side():
    """Hand computed: physics 1.5 s -> 1.2 s (1.25x); corrections log 0.3 (baseline) and log 0.1 (target).
    The baseline keeps half of its correction, the target all: the speedup keeps half of the change,
    log 1.25 + 0.5 x (0.3 - 0.1). A side that keeps none leaves the physics' 1.25x, whatever the other's."""
    from types import SimpleNamespace

    from predictor.learned import LearnedTimes, predict_speedup

    def times(physics_s, correction, kept):
        log_step = np.log([physics_s]) + kept * correction
        step_s = float(np.exp(log_step[0]))
        return LearnedTimes(log_step, np.array([step_s * 0.8]), np.array([step_s * 1.2]), np.array([None], object),
                            np.array([False]), np.log([physics_s]), np.array([correction]), np.array([kept]))

    columns = {"architecture": np.array(["ps-worker"], object), "network": np.array(["ethernet-25g"], object),
               "total_gpus": np.array([8.0]), "gpu": np.array(["V100"], object), "precision": np.array(["fp32"], object),
               "batch_size_per_gpu": np.array([64.0]), "intra_node_link": np.array([None], object)}
    target = {**columns, "network": np.array(["ethernet-100g"], object)}
    artefact = SimpleNamespace(pair_shares={"all": 1.0}, speedup_calibration=None)
    half = predict_speedup(artefact, times(1.5, 0.3, 0.5), times(1.2, 0.1, 1.0), columns, target, 0.9)
    assert half.speedup[0] == pytest.approx(np.exp(np.log(1.25) + 0.5 * 0.2), rel=1e-12)
    none = predict_speedup(artefact, times(1.5, 0.3, 0.0), times(1.2, 0.4, 1.0), columns, target, 0.9)
    assert none.speedup[0] == pytest.approx(1.25, rel=1e-12)  # per side it would be 1.25 / exp(0.4) < 1


def test_a_what_ifs_target_time_is_the_baseline_over_the_speedup(ps_job):
    from predictor import Predictor

    for to in (["allreduce-nvlink"], ["intra_node_link=nvlink-gen2"], ["precision=fp32"]):
        result = Predictor().speedup(ps_job, to)
        assert result.baseline.step_time_s / result.target.step_time_s == pytest.approx(result.speedup, rel=1e-9)
        assert result.target.lower_s < result.target.step_time_s < result.target.upper_s


def test_a_what_if_that_changes_the_samples_per_step_is_answered_in_throughput():
    """One V100 at batch 256 to eight: 8x the samples per step, so the throughput ratio is the speedup x 8,
    its interval the speedup's x 8, and more throughput is at least as likely as a faster step."""
    from typer.testing import CliRunner

    from cli.main import app
    from predictor import Predictor

    predictor = Predictor()
    single = "examples/jobs/resnet50-single.json"
    out = predictor.speedup(single, ["workers=8", "architecture=allreduce-local"])
    assert out.samples_per_step_ratio == 8.0 and out.changes_samples_per_step
    assert out.throughput_ratio == pytest.approx(out.target.throughput_samples_per_s / out.baseline.throughput_samples_per_s, rel=1e-9)
    assert out.throughput_ratio == pytest.approx(8 * out.speedup, rel=1e-12)
    as_json = out.to_dict()
    assert as_json["throughput_ratio_lower"] == pytest.approx(8 * out.speedup_lower)
    assert as_json["throughput_ratio_upper"] == pytest.approx(8 * out.speedup_upper)
    assert out.p_more_throughput >= out.p_speedup_gt_1 and out.p_more_throughput > 0.95
    line = CliRunner().invoke(app, ["speedup", "--job", single, "--to", "workers=8", "--to", "architecture=allreduce-local"]).stdout.splitlines()[0]
    assert line.startswith(f"resnet50-single-v100 -> workers=8 + architecture=allreduce-local: {out.throughput_ratio:.2f}x the throughput "
                           "(8x the samples per step, each step ")
    # Half the batch: half the samples per step; a faster step is likelier than more throughput.
    half = predictor.speedup(single, ["batch_size_per_gpu=128"])
    assert half.samples_per_step_ratio == 0.5 and half.p_more_throughput <= half.p_speedup_gt_1
    # A what-if that keeps the samples per step (a link, a GPU) keeps the step's wording and numbers.
    same = predictor.speedup("examples/jobs/resnet50-ps.json", ["allreduce-nvlink"])
    assert not same.changes_samples_per_step and same.throughput_ratio == same.speedup
    assert same.to_dict()["p_throughput_gt_1"] == pytest.approx(same.p_speedup_gt_1)


def test_probability_above_takes_one_threshold_per_row():
    """The shipped speedup calibration, asked at five thresholds at once, answers as asked one by one, and falls."""
    calibration = load_artefact("models/default").speedup_calibration
    y = np.zeros(5)
    bins = np.full(5, POOLED, object)
    thresholds = np.array([-0.5, -0.1, 0.0, 0.1, 0.5])
    per_row = calibration.probability_above(y, bins, thresholds)
    assert per_row.tolist() == [calibration.probability_above(y[:1], bins[:1], t)[0] for t in thresholds]
    assert (np.diff(per_row) <= 0).all() and per_row[0] > per_row[-1]
