"""Fleet scoring: rows kept and flagged, pass-through columns, atomic output, engines, CLI, generator, report."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from features import physics
from features.jobspec import flatten, job_from_dict
from predictor import Predictor
from cli.main import app
from predictor.fleet import (
    BASELINE_COLUMNS,
    OUTPUT_COLUMNS,
    read_fleet,
    score_fleet,
    score_fleet_dask,
    score_frame,
    summarize,
    write_atomic,
)
from predictor.fleet_example import ARCHITECTURE_MIX, SOURCE, example_fleet
from predictor.explain import explain
from predictor.fleet_report import PAI_COMMUNICATION_SHARE, write_report
from predictor.fleet_report_views import roofline_parts_s

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def fleet() -> pd.DataFrame:
    return example_fleet(300, seed=7)


@pytest.fixture
def bad_fleet(ps_job) -> pd.DataFrame:
    """Twenty copies of the PS example job with extra columns; five rows broken on purpose."""
    row = flatten(job_from_dict(ps_job))
    frame = pd.DataFrame([row] * 20).astype({"model": object, "gpu": object})
    frame["name"] = [f"job-{i}" for i in range(20)]
    frame["owner"] = [f"team-{i % 3}" for i in range(20)]
    frame["gpu_hours"] = np.arange(20, dtype=float) + 0.5
    frame.loc[3, "model"] = None  # a missing field
    frame.loc[7, "gpu"] = "V10"  # an unknown GPU
    frame.loc[11, "batch_size_per_gpu"] = -64  # a negative batch
    frame.loc[13, "gpu"] = np.nan  # a NaN where a name is required
    frame.loc[17, "measured_step_time_s"] = -1.0  # a bad measurement fails its row too
    return frame


BAD_ROWS = {
    3: "workload.model",
    7: "unknown gpu 'V10' at cluster.gpu",
    11: "workload.batch_size_per_gpu: -64",
    13: "cluster.gpu is missing",
    17: "measured.step_time_s: -1.0",
}


ANALYTICAL = {"model": "none"}  # the analytical model alone: these tests check its answers


def test_rows_in_equal_rows_out_and_bad_rows_are_flagged(bad_fleet):
    scored = score_frame(bad_fleet, ["allreduce-nvlink"], **ANALYTICAL)
    assert len(scored) == len(bad_fleet)
    assert list(scored["name"]) == list(bad_fleet["name"])
    for row, message in BAD_ROWS.items():
        assert message in scored.loc[row, "error"], scored.loc[row, "error"]
        assert np.isnan(scored.loc[row, "step_time_s"]) and np.isnan(scored.loc[row, "speedup"])
        assert pd.isna(scored.loc[row, "bottleneck"])
    good = ~scored.index.isin(list(BAD_ROWS))
    assert scored.loc[good, "error"].isna().all()
    assert np.isfinite(scored.loc[good, ["step_time_s", "speedup", "comm_s"]].to_numpy()).all()


def test_extra_columns_pass_through_untouched(bad_fleet):
    scored = score_frame(bad_fleet, **ANALYTICAL)
    for column in bad_fleet.columns:
        pd.testing.assert_series_equal(scored[column], bad_fleet[column])
    assert list(scored.columns) == [*bad_fleet.columns, *BASELINE_COLUMNS_ANALYTICAL, "error"]


BASELINE_COLUMNS_ANALYTICAL = [c for c in BASELINE_COLUMNS if c not in ("lower_s", "upper_s")]


def test_a_fleet_row_gets_the_single_job_answer(ps_job):
    """Scoring distinct configurations once must not mix rows: each row equals the one-job API."""
    other = {**ps_job, "cluster": {**ps_job["cluster"], "gpu": "A100-SXM4-80GB", "network": "ethernet-100g"}}
    jobs = [ps_job, other, ps_job, other, ps_job]
    frame = pd.DataFrame([flatten(job_from_dict(j)) for j in jobs])
    scored = score_frame(frame, ["allreduce-nvlink"], **ANALYTICAL)
    predictor = Predictor(model=None)
    for i, job in enumerate(jobs):
        single = predictor.speedup(job, ["allreduce-nvlink"])
        assert scored.loc[i, "step_time_s"] == pytest.approx(single.baseline.step_time_s, rel=1e-12)
        assert scored.loc[i, "speedup"] == pytest.approx(single.speedup, rel=1e-12)
        assert scored.loc[i, "bottleneck"] == single.baseline.breakdown.bottleneck
        assert scored.loc[i, "throughput_samples_per_s"] == pytest.approx(8 * 64 / single.baseline.step_time_s)


def test_a_fleet_scenario_that_changes_the_samples_per_step_gives_the_single_jobs_throughput_ratio(ps_job):
    """Twice the workers at the same per-GPU batch: the throughput ratio is the step speedup x 2, as one job's."""
    frame = pd.DataFrame([flatten(job_from_dict(ps_job))] * 2)
    predictor = Predictor()
    scored = score_frame(frame, ["workers=16"])
    single = predictor.speedup(ps_job, ["workers=16"])
    assert single.samples_per_step_ratio == 2.0
    assert scored["throughput_ratio"].tolist() == pytest.approx([single.throughput_ratio] * 2, rel=1e-9)
    assert scored["throughput_ratio"].tolist() == pytest.approx((2 * scored["speedup"]).tolist(), rel=1e-12)
    lines = summarize(scored, ["workers=16"]).lines()
    assert lines[2].startswith("workers=16: 2 jobs, median speedup per step")
    assert lines[3] == f"workers=16: changes the samples per step; median throughput ratio {single.throughput_ratio:.2f}x"
    # A scenario that keeps the samples per step reads as before and its throughput ratio is the speedup.
    same = score_frame(frame, ["allreduce-nvlink"])
    assert (same["throughput_ratio"] == same["speedup"]).all()
    assert not any("samples per step" in line for line in summarize(same, ["allreduce-nvlink"]).lines())


def test_a_scale_out_report_counts_gpu_time_for_the_same_samples(tmp_path, ps_job):
    """Eight workers to sixteen at the same per-GPU batch: twice the GPUs and twice the samples per step. The
    report compares throughput, and a job's GPU time for the same samples changes by 2 / throughput ratio."""
    frame = pd.DataFrame([flatten(job_from_dict(ps_job))] * 3).assign(name=["a", "b", "c"], gpu_hours=[10.0, 20.0, 30.0])
    scored = score_frame(frame, ["workers=16"])
    report = write_report(scored, tmp_path / "report", ["workers=16"])
    throughput = scored["throughput_ratio"].to_numpy(float)
    assert report.scenario.measure == "throughput ratio"
    assert report.scenario.median_speedup == pytest.approx(float(np.median(throughput)))
    saved = np.array([10.0, 20.0, 30.0]) * (1.0 - 2.0 / throughput)
    assert report.total_gain == pytest.approx(float(saved.sum()))
    assert report.scenario.gpu_time_speedup == pytest.approx(60.0 / float(np.sum(np.array([10.0, 20.0, 30.0]) * 2.0 / throughput)))
    text = (tmp_path / "report" / "report.md").read_text()
    assert "The scenario changes the samples per step, so the figures compare throughput" in text
    assert "Median throughput ratio" in text


def test_chunks_and_shuffles_do_not_change_answers(fleet):
    whole = score_frame(fleet, ["ethernet-100g"], **ANALYTICAL)
    chunked = score_fleet(fleet, ["ethernet-100g"], chunk_rows=70, progress=False, **ANALYTICAL)
    pd.testing.assert_frame_equal(chunked, whole)
    order = np.random.default_rng(0).permutation(len(fleet))
    shuffled = score_frame(fleet.iloc[order], ["ethernet-100g"], **ANALYTICAL)
    pd.testing.assert_frame_equal(shuffled.sort_index(), whole)


def test_chunked_scoring_keeps_bad_rows_and_learned_columns(bad_fleet):
    """Configurations scored fleet-wide, then spread chunk by chunk, give score_frame's answer."""
    mixed = pd.concat([bad_fleet, bad_fleet.assign(gpu="A100-SXM4-80GB")], ignore_index=True)
    mixed.loc[25, "gpu"] = "V10"
    whole = score_frame(mixed, ["allreduce-nvlink"], explain="saabas")
    chunked = score_fleet(mixed, ["allreduce-nvlink"], chunk_rows=3, progress=False, explain="saabas")
    pd.testing.assert_frame_equal(chunked, whole)
    assert "unknown gpu 'V10'" in chunked.loc[25, "error"] and np.isnan(chunked.loc[25, "step_time_s"])
    assert "measured.step_time_s: -1.0" in chunked.loc[37, "error"]
    assert {"lower_s", "speedup_lower", "why_dominant"} <= set(chunked.columns)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_output_round_trips_in_both_formats(tmp_path, fleet, suffix):
    scored = score_fleet(fleet, ["allreduce-nvlink"], progress=False, **ANALYTICAL)
    path = tmp_path / f"scored{suffix}"
    assert write_atomic(scored, path) == len(fleet)
    back = read_fleet(path)
    assert len(back) == len(fleet) and list(back["name"]) == list(fleet["name"])
    np.testing.assert_allclose(back["step_time_s"], scored["step_time_s"], rtol=1e-12)
    np.testing.assert_allclose(back["speedup"], scored["speedup"], rtol=1e-12)
    assert list(back["error"].isna()) == list(scored["error"].isna())


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, fleet, suffix):
    path = tmp_path / f"scored{suffix}"
    write_atomic(fleet.iloc[:10], path)
    before = path.read_bytes()

    def interrupted():
        yield score_frame(fleet.iloc[:100], **ANALYTICAL)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(interrupted(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_full_disk_is_one_error_naming_out_and_keeps_the_old_file(tmp_path, fleet):
    import errno

    from features.errors import SpecError

    path = tmp_path / "scored.csv"
    write_atomic(fleet.iloc[:10], path)
    before = path.read_bytes()

    def full_disk():
        yield fleet.iloc[:10]
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(SpecError, match=r"--out.*cannot write it \(No space left on device\); the old file, if any, is unchanged"):
        write_atomic(full_disk(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_dask_engine_equals_the_local_engine(tmp_path, fleet):
    path = tmp_path / "fleet.parquet"
    write_atomic(fleet, path, row_group_rows=100)  # three partitions
    local = score_fleet(read_fleet(path), ["allreduce-nvlink"], progress=False, **ANALYTICAL)
    distributed = score_fleet_dask(path, ["allreduce-nvlink"], n_workers=2, **ANALYTICAL)
    pd.testing.assert_frame_equal(distributed, local)


def test_generator_is_deterministic_and_labelled():
    a, b = example_fleet(400, seed=3), example_fleet(400, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert not example_fleet(400, seed=4).equals(a)
    assert a["synthetic"].all() and (a["source"] == SOURCE).all()
    assert score_frame(a, **ANALYTICAL)["error"].isna().all()  # every generated job is valid


def test_generator_mix_follows_its_stated_shares():
    shares = example_fleet(20_000, seed=1)["architecture"].value_counts(normalize=True)
    for architecture, share in ARCHITECTURE_MIX.items():
        assert shares[architecture] == pytest.approx(share, abs=0.015)


def test_summary_counts_failures_and_scenario_misses(bad_fleet):
    bad_fleet.loc[5, "gpu"] = "T4"  # valid, but without NVLink: the scenario does not apply
    summary = summarize(score_frame(bad_fleet, ["allreduce-nvlink"], **ANALYTICAL), ["allreduce-nvlink"])
    assert (summary.rows, summary.failed_rows, summary.not_applicable) == (20, 5, 1)
    assert summary.error_rows == 6 and summary.first_errors[0][0] == 3
    assert summary.share_faster == 1.0


def test_report_files_and_pai_views(tmp_path, fleet):
    scored = score_fleet(fleet, ["allreduce-nvlink"], progress=False, **ANALYTICAL)
    report = write_report(scored, tmp_path / "report", ["allreduce-nvlink"], **ANALYTICAL)
    for name in report.files:
        assert (tmp_path / "report" / name).stat().st_size > 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    shares = {row["group"]: row for row in summary["shares"]}
    for row in shares.values():
        assert sum(row["per_job"].values()) == pytest.approx(1.0)
        assert sum(row["gpu_time"].values()) == pytest.approx(1.0)
    assert shares["single"]["per_job"]["communication"] == 0.0
    assert shares["ps-worker"]["per_job"]["communication"] > shares["allreduce-local"]["per_job"]["communication"]
    assert summary["study_communication_share"] == PAI_COMMUNICATION_SHARE
    ps, ethernet = summary["ps_to_allreduce"], summary["ethernet_upgrade"]
    assert ps["jobs"] + ps["not_applicable"] == int((fleet["architecture"] == "ps-worker").sum())
    assert 0.0 <= ps["share_faster"] <= 1.0
    assert ethernet["jobs"] == int(fleet["architecture"].isin(["ps-worker", "allreduce-cluster"]).sum())
    assert ethernet["mean_speedup"] >= 1.0 and ethernet["share_faster"] == 1.0  # more bandwidth is never slower
    assert summary["weight_unit"] == "GPU-hours" and "steps" in summary["weight_basis"]
    assert summary["top_gains"] and summary["top_gains"][0]["GPU-hours saved"] > 0


@pytest.mark.parametrize(
    "column, cells, field, shown",
    [
        ("model", [["resnet50"], ["resnet50", "bert-large"]], "workload.model", "['resnet50', 'bert-large']"),
        ("gpu", [{"name": "V100"}, {"name": "A100"}], "cluster.gpu", "{'name': 'A100'}"),
    ],
)
def test_nested_parquet_cells_fail_their_rows_with_the_field_named(tmp_path, ps_job, column, cells, field, shown):
    """Lists and mappings in a job column (Parquet's nested types) are bad values like any other."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = {k: v for k, v in flatten(job_from_dict(ps_job)).items() if v is not None and k != column}
    table = pa.Table.from_pandas(pd.DataFrame([row, row]), preserve_index=False).append_column(column, pa.array(cells))
    pq.write_table(table, tmp_path / "nested.parquet")
    scored = score_frame(read_fleet(tmp_path / "nested.parquet"), **ANALYTICAL)
    assert len(scored) == 2 and scored["step_time_s"].isna().all()
    assert all(field in error for error in scored["error"])
    assert shown in scored["error"][1]


@pytest.mark.parametrize("dtype", [bool, "boolean", object])
def test_a_boolean_where_a_count_is_due_fails_its_row(dtype):
    """Parquet's true is not the number 1: a boolean batch or worker count is refused, with the field named."""
    frame = pd.DataFrame({"model": ["resnet50"] * 3, "gpu": ["V100"] * 3, "batch_size_per_gpu": [64, 64, 64]})
    frame["batch_size_per_gpu"] = pd.array([True, False, True], dtype=dtype)
    scored = score_frame(frame, **ANALYTICAL)
    assert scored["step_time_s"].isna().all()
    assert all(error.startswith("workload.batch_size_per_gpu: True") or error.startswith("workload.batch_size_per_gpu: False")
               for error in scored["error"])


def test_a_boolean_among_counts_is_refused_apart_from_the_count_1():
    """Python's True == 1: a boolean cell in an object column of counts is refused on its row, and the
    rows holding the number 1 (or 0) are still scored as 1 (or refused as 0), not merged with it."""
    frame = pd.DataFrame({"model": ["resnet50"] * 4, "gpu": ["V100"] * 4})
    frame["batch_size_per_gpu"] = pd.Series([True, 1, 64, False], dtype=object)
    scored = score_frame(frame, **ANALYTICAL)
    assert scored["error"][0].startswith("workload.batch_size_per_gpu: True")
    assert scored["error"][3].startswith("workload.batch_size_per_gpu: False")
    assert scored["error"][1:3].isna().all() and scored["step_time_s"][1:3].notna().all()
    one = score_frame(frame.iloc[[1]].astype({"batch_size_per_gpu": int}).reset_index(drop=True), **ANALYTICAL)
    assert scored["step_time_s"][1] == pytest.approx(one["step_time_s"][0])


def test_report_roofline_shares(tmp_path, fleet):
    scored = score_fleet(fleet, progress=False, **ANALYTICAL)
    report = write_report(scored, tmp_path / "report", **ANALYTICAL)
    assert "roofline_shares.png" in report.files
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    shares = {row["group"]: row for row in summary["roofline_shares"]}
    assert set(shares) == {row["group"] for row in summary["shares"]}
    for row in shares.values():
        assert list(row["per_job"]) == list(physics.STEP_PARTS)
        assert sum(row["per_job"].values()) == pytest.approx(1.0)
        assert sum(row["gpu_time"].values()) == pytest.approx(1.0)
    assert shares["single"]["per_job"]["exposed communication"] == 0.0  # nothing to communicate
    assert shares["ps-worker"]["per_job"]["exposed communication"] > shares["allreduce-local"]["per_job"]["exposed communication"]
    assert shares["all jobs"]["per_job"]["kernel launches"] > 0.0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Where the step time goes on the roofline physics" in text
    dispatch = shares["all jobs"]["per_job"]["kernel launches"] + shares["all jobs"]["per_job"]["host overhead"]
    assert f"Dispatch (kernel launches and host overhead) takes **{dispatch:.0%}** of a job's step" in text


def test_roofline_parts_are_the_explained_physics_and_bad_rows_have_none(bad_fleet, ps_job):
    scored = score_frame(bad_fleet, **ANALYTICAL)
    parts = roofline_parts_s(scored)
    assert parts.shape == (20, len(physics.STEP_PARTS))
    bad = sorted(BAD_ROWS)
    assert np.isnan(parts[bad]).all()
    good = np.setdiff1d(np.arange(20), bad)
    expected = explain(Predictor(model=None, overlap="roofline"), ps_job).physics_seconds
    np.testing.assert_allclose(parts[good], np.tile([expected[p] for p in physics.STEP_PARTS], (len(good), 1)), rtol=1e-12)


def test_cli_example_then_fleet_with_report(tmp_path):
    fleet_csv, scored, report = tmp_path / "fleet.csv", tmp_path / "scored.parquet", tmp_path / "report"
    result = invoke("fleet-example", "--n", 200, "--out", fleet_csv, "--seed", 1)
    assert result.exit_code == 0, result.output
    assert "wrote 200 synthetic jobs" in result.stdout
    result = invoke("fleet", "--jobs", fleet_csv, "--to", "allreduce-nvlink", "--out", scored, "--report", report, "--model", "none")
    assert result.exit_code == 0, result.output
    assert "scored 200 jobs" in result.stdout and "median step time" in result.stdout
    assert len(pd.read_parquet(scored)) == 200
    assert (report / "report.md").is_file()
    result = invoke("fleet", "--jobs", fleet_csv)
    assert result.exit_code == 0 and "200 predicted, 0 failed" in result.stdout


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (None, ("--jobs", "missing.csv"), "no such file"),
        ("notparquet.parquet", (), "cannot read it as PARQUET"),
        ("jobs.txt", (), "allowed: a .parquet (or .pq) or .csv file"),
        ("nogpu.csv", (), "a fleet table needs a gpu column"),
        ("fleet.csv", ("--to", "teleport"), "unknown scenario 'teleport'"),
        ("fleet.csv", ("--engine", "spark"), "--engine: 'spark' is not valid"),
        ("fleet.csv", ("--out", "scored.xlsx"), "--out"),
        ("fleet.csv", ("--model", "none", "--explain"), "--explain"),
        (None, ("fleet-example", "--n", 0, "--out", "x.csv"), "--n: 0 is not valid"),
        (None, ("fleet-example", "--n", 10**11, "--out", "x.csv"), "from 1 to 20,000,000"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, setup, args, message):
    monkeypatch.chdir(tmp_path)
    files = {
        "notparquet.parquet": "this is not parquet",
        "jobs.txt": "gpu\nV100\n",
        "nogpu.csv": "model,workers\nresnet50,2\n",
        "fleet.csv": "model,gpu\nresnet50,V100\n",
    }
    if setup is not None:
        (tmp_path / setup).write_text(files[setup])
    command = args if args and args[0] == "fleet-example" else ("fleet", *(("--jobs", setup) if setup else ()), *args)
    result = invoke(*command)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize("to", [[], ["allreduce-nvlink"]])
@pytest.mark.parametrize("scoring", [ANALYTICAL, {}, {"explain": True}], ids=["analytical", "learned", "explained"])
def test_an_empty_fleet_has_the_columns_and_types_of_a_scored_one(fleet, to, scoring):
    """A Dask partition's meta is the empty case: it must match what real partitions return, in order."""
    full, empty = score_frame(fleet.iloc[:20], to, **scoring), score_frame(fleet.iloc[:0], to, **scoring)
    assert len(empty) == 0
    pd.testing.assert_series_equal(empty.dtypes, full.dtypes)
