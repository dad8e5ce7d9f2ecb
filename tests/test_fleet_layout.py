"""Layout jobs in a fleet: each row gets the single-job layout answer, the rest of the fleet is untouched."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from features.jobspec import flatten, job_from_dict, load_job
from features.layout import LAYOUT_LEAVES, SHAPE_LEAVES, step_breakdown
from features.layout_spec import layout_job_from_row
from predictor.fleet import read_fleet, score_fleet, score_fleet_dask, summarize, write_atomic
from predictor.fleet_columns import FLEET_BOTTLENECKS
from predictor.fleet_layout import LAYOUT_NOTE, LAYOUT_PARTS, layout_configs
from predictor.fleet_report import write_report
from predictor.layout import predict_layout, speedup_layout

LLAMA = "examples/jobs/llama-70b-512-h100.json"
GPT3 = "examples/jobs/gpt3-175b-1024-h100.json"
PS = "examples/jobs/resnet50-ps.json"


def _rows(*paths: str) -> list[dict]:
    return [flatten(load_job(p)) for p in paths]


@pytest.fixture
def mixed() -> pd.DataFrame:
    """Data-parallel and layout jobs interleaved; a layout job that does not fit; one with a bad TP."""
    rows = _rows(PS, LLAMA, PS, GPT3, LLAMA, LLAMA)
    rows[2]["gpu"] = "A100-SXM4-80GB"
    rows[4]["activation_recompute"], rows[4]["sharding"], rows[4]["micro_batch_size"] = "none", "none", 8  # 80 GB is not enough
    rows[5]["tensor_parallel"] = 3  # 64 heads do not split 3 ways
    frame = pd.DataFrame(rows)
    frame["owner"] = [f"team-{i}" for i in range(len(frame))]
    return frame


def test_each_layout_row_gets_the_single_job_answer_and_data_parallel_rows_are_untouched(mixed):
    scored = score_fleet(mixed, ["gpu=H800"], progress=False)
    assert list(scored["owner"]) == list(mixed["owner"])
    for i in (1, 3):
        job = load_job(LLAMA if i == 1 else GPT3)
        single = speedup_layout(job, ["gpu=H800"])
        assert scored["step_time_s"][i] == single.baseline.step_time_s
        assert scored["target_step_time_s"][i] == single.target.step_time_s
        assert scored["speedup"][i] == pytest.approx(single.speedup, rel=1e-12)
        b = single.baseline.breakdown
        assert scored["throughput_samples_per_s"][i] == pytest.approx(single.baseline.job.layout.global_batch_size / b.step_time_s)
        assert scored["total_gpus"][i] == single.baseline.job.layout.gpus
        assert scored["bottleneck"][i] == b.bottleneck
        # The floor is the step at a model FLOPs utilisation of 1: the step times its MFU.
        assert scored["arithmetic_floor_s"][i] == pytest.approx(b.mfu * b.step_time_s, rel=1e-12)
        assert scored["arithmetic_floor_s"][i] < scored["step_time_s"][i]
        c = b.components_s
        assert scored["compute_s"][i] == pytest.approx(c["compute"] + c["memory"] + c["optimizer"])
        assert scored["comm_s"][i] == pytest.approx(c["tp_communication"] + c["cp_communication"] + c["pipeline_transfers"] + c["dp_communication"])
        assert np.isnan(scored["io_s"][i]) and np.isnan(scored["memory_s"][i]) and np.isnan(scored["lower_s"][i])
        assert scored["extrapolation"][i] == LAYOUT_NOTE and pd.isna(scored["error"][i])
    # The H100 -> H800 what-if costs the TP8 Llama its NVLink: slower, as one job says (1.16x).
    assert scored["speedup"][1] == pytest.approx(1 / 1.16, abs=0.01)
    alone = score_fleet(mixed.iloc[[0, 2]], ["gpu=H800"], progress=False)
    pd.testing.assert_frame_equal(scored.iloc[[0, 2]], alone)


def test_a_layout_that_does_not_fit_or_is_invalid_fails_its_row_only(mixed):
    scored = score_fleet(mixed, progress=False)
    assert "does not fit" in scored["error"][4] and "GB" in scored["error"][4]
    assert "tensor_parallel" in scored["error"][5]
    for i in (4, 5):
        assert np.isnan(scored["step_time_s"][i]) and pd.isna(scored["bottleneck"][i]) and pd.isna(scored["extrapolation"][i])
    assert np.isfinite(scored["step_time_s"][[0, 1, 2, 3]]).all()
    summary = summarize(scored, method="learned")
    assert (summary.failed_rows, summary.layout_rows) == (2, 2)
    assert "layout jobs: 2 of the predicted" in "\n".join(summary.lines())


def test_a_what_if_a_layout_job_does_not_use_keeps_its_baseline_and_says_why(mixed):
    scored = score_fleet(mixed.iloc[:2], ["batch_size_per_gpu=128"], progress=False)
    assert np.isfinite(scored["speedup"][0])
    assert np.isfinite(scored["step_time_s"][1]) and np.isnan(scored["speedup"][1]) and pd.isna(scored["target_bottleneck"][1])
    assert "a layout job does not use batch_size_per_gpu" in scored["error"][1]


def test_a_model_family_name_alone_makes_a_layout_job():
    distinct = {
        "model": np.array(["llama", " GPT ", "resnet50", None], object),
        "tensor_parallel": np.array([np.nan, np.nan, np.nan, 4.0]),
        "pipeline_schedule": np.array([None, "", None, None], object),
    }
    assert list(layout_configs(distinct, 4)) == [True, True, False, True]


def test_layout_labels_cover_every_component():
    b = step_breakdown(layout_job_from_row(load_job(LLAMA).row))
    assert list(LAYOUT_PARTS) == list(b.components_s)
    assert set(b.components_s) <= set(FLEET_BOTTLENECKS)


def test_dask_engine_equals_the_local_engine_with_layout_rows_a_learned_model_and_explanations(tmp_path, mixed):
    path = tmp_path / "fleet.parquet"
    write_atomic(pd.concat([mixed] * 2, ignore_index=True), path, row_group_rows=4)  # three partitions
    local = score_fleet(read_fleet(path), ["gpu=H800"], progress=False, explain=True)
    distributed = score_fleet_dask(path, ["gpu=H800"], n_workers=2, explain=True)
    pd.testing.assert_frame_equal(distributed, local)
    assert local["why_dominant"][[1, 3]].isna().all() and local["why_dominant"][[0, 2]].notna().all()


def test_report_gives_layout_jobs_their_own_shares(tmp_path, mixed):
    scored = score_fleet(mixed, progress=False)
    report = write_report(scored, tmp_path / "report", method="learned")
    (layout,) = report.layout_shares
    assert (layout.group, layout.jobs) == ("layout jobs", 2)
    assert sum(layout.per_job.values()) == pytest.approx(1.0)
    # The per-job shares are the mean of the two jobs' own component shares.
    expected = np.mean([[v / p.step_time_s for v in p.breakdown.components_s.values()]
                        for p in (predict_layout(load_job(LLAMA)), predict_layout(load_job(GPT3)))], axis=0)
    assert list(layout.per_job.values()) == pytest.approx(list(expected))
    # The data-parallel tables hold the two data-parallel jobs only.
    assert report.shares[0].jobs == 2 and report.roofline_shares[0].jobs == 2
    text = (tmp_path / "report" / "report.md").read_text()
    assert "## Layout jobs: where the step time goes" in text and "layout_shares.png" in report.files
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["layout_shares"][0]["jobs"] == 2


def test_a_fleet_without_layout_jobs_has_no_layout_section(tmp_path):
    scored = score_fleet(pd.DataFrame(_rows(PS, PS)), progress=False, model="none")
    report = write_report(scored, tmp_path / "report")
    assert report.layout_shares == [] and "layout_shares.png" not in report.files
    assert "Layout jobs" not in (tmp_path / "report" / "report.md").read_text()


def test_a_single_job_file_and_its_fleet_row_agree_on_the_job_fields():
    """The fleet reads a layout row as the job file's flat row: nothing is lost on the way to a table."""
    row = flatten(job_from_dict(json.loads(open(LLAMA).read())))
    assert predict_layout(load_job(LLAMA)).step_time_s == score_fleet(pd.DataFrame([row]), progress=False)["step_time_s"][0]


@pytest.mark.parametrize(
    ("leaf", "value", "message"),
    [
        ("hidden_size", "abc", "workload.hidden_size: 'abc' is not valid; allowed: a whole number"),
        ("layers", 1e30, "workload.layers: 1e+30 is not valid"),
        ("sequence_length", float("inf"), "workload.sequence_length: inf is not valid"),
        ("tensor_parallel", 0, "parallelism.tensor_parallel: 0 is not valid"),
        ("pipeline_schedule", "zigzag", "allowed: gpipe, 1f1b, interleaved"),
        ("sequence_parallel", "maybe", "allowed: true or false"),
        ("gpu", "V10", "unknown gpu 'V10' at cluster.gpu"),
        ("hidden_size", 8191, "must be divisible by workload.attention_heads = 64"),
        ("layers", "", "workload.layers is missing"),
    ],
)
def test_a_hostile_layout_field_fails_its_row_with_one_line(leaf, value, message):
    """Layout rows pass the same field rules as any job before the layout model sees them."""
    good, bad = _rows(LLAMA, LLAMA)
    bad[leaf] = value
    scored = score_fleet(pd.DataFrame([good, bad]).astype(object), ["gpu=H800"], progress=False)
    assert message in scored["error"][1] and "\n" not in scored["error"][1]
    assert np.isnan(scored["step_time_s"][1]) and np.isnan(scored["speedup"][1])
    assert np.isfinite(scored["speedup"][0])


@pytest.mark.parametrize(("leaf", "value"), [("tensor_parallel", "8"), ("tensor_parallel", "8.0"), ("sequence_parallel", "true"), ("model", "LLAMA")])
def test_text_cells_a_table_reads_as_numbers_or_names_give_the_job_answer(leaf, value):
    good, text = _rows(LLAMA, LLAMA)
    text[leaf] = value
    scored = score_fleet(pd.DataFrame([good, text]).astype(object), progress=False)
    assert scored["step_time_s"][1] == scored["step_time_s"][0]


_hostile = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20), st.text(max_size=6),
    st.sampled_from([True, None, "", " ", "8", "1e308", "\x1b[31m"]),
)


@given(changes=st.lists(st.tuples(st.sampled_from([*SHAPE_LEAVES, *LAYOUT_LEAVES, "gpu", "nodes", "precision"]), _hostile), min_size=1, max_size=3))
def test_hostile_layout_rows_never_break_the_fleet(changes):
    """Whatever a layout row holds, the fleet answers it or flags it alone, and no number is NaN-or-inf-as-answer."""
    good, bad = _rows(LLAMA, LLAMA)
    for leaf, value in changes:
        bad[leaf] = value
    scored = score_fleet(pd.DataFrame([good, bad]).astype(object), ["gpu=H800"], progress=False)
    assert np.isfinite(scored["step_time_s"][0]) and pd.isna(scored["error"][0])
    step, error = scored["step_time_s"][1], scored["error"][1]
    if np.isfinite(step):
        assert np.isfinite(scored["throughput_samples_per_s"][1]) and step > 0
    else:
        assert isinstance(error, str) and "\n" not in error and np.isnan(scored["speedup"][1])
