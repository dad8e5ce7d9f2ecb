"""Job files and fleet rows: each kind of bad input names the field, the value and what is allowed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from features.errors import SpecError
from features.jobspec import FLAT_FIELDS, flatten, job_from_dict, json_schema, load_job
from features.resolve import resolve
from features.table import table_from_rows, validate_columns


def test_the_reference_example_is_accepted_exactly(ps_job):
    row = flatten(job_from_dict(ps_job))
    assert row["architecture"] == "ps-worker" and row["parameter_servers"] == 2
    assert row["measured_step_time_s"] == 0.42
    assert list(row) == list(FLAT_FIELDS)


@pytest.mark.parametrize(
    ("section", "field", "value", "expected"),
    [
        ("workload", "batch_size_per_gpu", -1, "workload.batch_size_per_gpu: -1 is not valid"),
        ("workload", "batch_size_per_gpu", 1.5, "batch_size_per_gpu: 1.5 is not valid; allowed: a whole number from 1"),
        ("workload", "batch_size_per_gpu", "lots", "batch_size_per_gpu: 'lots' is not valid; a JSON number without quotes; allowed: a whole number"),
        # What the schema says is a number must be one: "64" in quotes is text, like "6 4".
        ("workload", "batch_size_per_gpu", "64", "batch_size_per_gpu: '64' is not valid; a JSON number without quotes; allowed: a whole number from 1"),
        ("measured", "step_time_s", "0.42", "measured.step_time_s: '0.42' is not valid; a JSON number without quotes"),
        ("workload", "precision", "fp64", "allowed: fp32, tf32, fp16, bf16, fp8"),
        ("workload", "flops_per_sample", float("nan"), "workload.flops_per_sample: nan is not valid; a finite number"),
        ("workload", "param_count", -3.0, "workload.param_count: -3.0 is not valid; allowed: a finite number from 1 to 1e+14"),
        ("parallelism", "architecture", "ring", "allowed: single, allreduce-local, allreduce-cluster, ps-worker"),
        ("parallelism", "workers", 0, "parallelism.workers: 0"),
        ("cluster", "colour", "blue", "cluster.colour: 'blue' is not valid; unknown field; allowed here: gpu"),
    ],
)
def test_schema_errors_name_field_value_and_allowed(ps_job, section, field, value, expected):
    ps_job[section][field] = value
    with pytest.raises(SpecError) as caught:
        job_from_dict(ps_job)
    assert expected in str(caught.value)


def test_measured_needs_its_step_time(ps_job):
    ps_job["measured"] = {}
    with pytest.raises(SpecError, match="measured.step_time_s is missing"):
        job_from_dict(ps_job)


def test_a_section_must_be_an_object(ps_job):
    ps_job["cluster"] = "V100"
    with pytest.raises(SpecError, match="cluster: 'V100' is not valid; a JSON object with fields: gpu"):
        job_from_dict(ps_job)


def test_missing_required_section(ps_job):
    del ps_job["cluster"]
    with pytest.raises(SpecError, match="cluster is missing; this field is required"):
        job_from_dict(ps_job)


def test_not_an_object():
    with pytest.raises(SpecError, match="a job is a JSON object"):
        job_from_dict([1, 2])


def test_malformed_json_names_line_and_column(tmp_path):
    path = tmp_path / "job.json"
    path.write_text('{"workload": {"model": "resnet50",}}')
    with pytest.raises(SpecError, match="malformed JSON at line 1 column 35"):
        load_job(path)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read the file"):
        load_job(tmp_path / "nope.json")


def test_choices_are_case_insensitive_in_files_and_tables(ps_job):
    ps_job["workload"]["precision"] = "FP16"
    assert table_from_rows([flatten(job_from_dict(ps_job))]).columns["precision"][0] == "fp16"
    table = table_from_rows([{"gpu": "V100", "model": "resnet50", "precision": "FP16"}])
    assert table.columns["precision"][0] == "fp16"


def resolved_errors(rows):
    resolved = resolve(table_from_rows(rows))
    return [e for e in resolved.errors]


def test_unknown_gpu_suggests_the_nearest_names():
    (error,) = resolved_errors([{"gpu": "V10", "model": "resnet50"}])
    assert error.startswith("unknown gpu 'V10' at cluster.gpu; did you mean V100-SXM2-16GB")


def test_unknown_model_suggests_names_and_the_explicit_figures():
    (error,) = resolved_errors([{"gpu": "V100", "model": "resnt50"}])
    assert "unknown model 'resnt50' at workload.model; did you mean resnet50," in error
    assert "flops_per_sample is missing" in error


def test_a_model_outside_the_catalogue_with_its_figures_is_fine():
    row = dict(
        gpu="V100", model="my-net", batch_size_per_gpu=32, flops_per_sample=3e9,
        param_count=5e6, memory_bytes_per_sample=2e7, input_bytes_per_sample=4096,
    )
    resolved = resolve(table_from_rows([row]))
    assert resolved.errors[0] is None
    assert resolved.gradient_bytes[0] == pytest.approx(5e6 * 4)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"architecture": "single", "workers": 2}, "single runs 1 worker on 1 GPU"),
        ({"architecture": "allreduce-local", "gpus_per_worker": 16}, "use allreduce-cluster"),
        ({"architecture": "allreduce-cluster", "workers": 12, "nodes": 5}, "must spread evenly"),
        ({"architecture": "ps-worker", "workers": 2, "gpus_per_worker": 16}, "a worker is one node"),
        ({"network": "pcie-gen3"}, "cluster.network: 'pcie-gen3' is not valid; a network link is needed"),
        ({"intra_node_link": "ethernet-25g"}, "an intra-node link is needed"),
    ],
)
def test_parallelism_and_link_rules(row, expected):
    (error,) = resolved_errors([{"gpu": "V100", "model": "resnet50", **row}])
    assert expected in error


def test_bad_rows_keep_their_place_and_good_rows_resolve():
    rows = [
        {"gpu": "V100", "model": "resnet50"},
        {"gpu": "V100", "model": "resnet50", "batch_size_per_gpu": -4},
        {"model": "resnet50"},
        {"gpu": "V100", "model": "resnet50", "workers": "many"},
        {"gpu": "V100", "model": "resnet50", "batch_size_per_gpu": 32},
    ]
    resolved = resolve(table_from_rows(rows))
    errors = list(resolved.errors)
    assert errors[0] is None and errors[4] is None
    assert "batch_size_per_gpu: -4" in errors[1]
    assert errors[2] == "cluster.gpu is missing; this field is required"
    assert "parallelism.workers: 'many'" in errors[3]
    step = resolved.breakdown().additive_s
    assert np.isfinite(step[[0, 4]]).all() and np.isnan(step[[1, 2, 3]]).all()


def test_columns_of_a_fleet_validate_like_rows():
    table = validate_columns({"gpu": np.array(["V100", "V100"], object), "batch_size_per_gpu": np.array([8.0, np.nan])})
    assert list(table.columns["batch_size_per_gpu"][:1]) == [8.0]
    assert np.isnan(table.columns["batch_size_per_gpu"][1])  # filled from the catalogue later
    assert table.columns["network"].tolist() == ["ethernet-25g", "ethernet-25g"]


def test_defaults_come_from_the_catalogues():
    resolved = resolve(table_from_rows([{"gpu": "V100", "model": "resnet50", "architecture": "allreduce-cluster", "workers": 16}]))
    assert resolved.errors[0] is None
    assert resolved.nodes[0] == 2  # 16 GPUs at 8 per node
    assert resolved.batch_size_per_gpu[0] > 0


def test_schema_is_json_schema_of_the_job():
    schema = json_schema()
    assert schema["required"] == ["workload", "cluster"]
    json.dumps(schema)


def test_a_bad_name_repeated_down_a_fleet_is_matched_once():
    from features.errors import _nearest_names

    _nearest_names.cache_clear()
    rows = [{"gpu": "V100", "model": "resnt50", "batch_size_per_gpu": b} for b in range(1, 201)]
    errors = resolved_errors(rows)
    # Every row keeps its own message (the same one), while difflib ran once for the name.
    assert len(errors) == 200 and len(set(errors)) == 1 and "did you mean resnet50," in errors[0]
    info = _nearest_names.cache_info()
    assert info.misses == 1 and info.hits >= 199


def test_a_huge_bad_name_gets_one_readable_line():
    (error,) = resolved_errors([{"gpu": "V100", "model": "resnt50" + "x" * 100_000}])
    assert error.startswith("unknown model 'resnt50xxx")
    assert "... (100,007 characters) at workload.model; known: " in error and "flops_per_sample is missing" in error
    assert len(error) < 600 and "\n" not in error
    (error,) = resolved_errors([{"gpu": "V10" + "0" * 5000, "model": "resnet50"}])
    assert "(5,003 characters) at cluster.gpu" in error and len(error) < 600


def test_a_key_given_twice_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "job.json"
    path.write_text('{"workload": {"model": "resnet50", "model": "bert-large"}, "cluster": {"gpu": "V100"}}')
    with pytest.raises(SpecError, match="names 'model' twice in one object"):
        load_job(path)


@pytest.mark.parametrize("text, kind", [("null", "null"), ("[1]", "array"), ('"x"', "string"), ("3", "number"), ("true", "boolean")])
def test_a_job_that_is_no_object_says_what_it_is(tmp_path, text, kind):
    path = tmp_path / "job.json"
    path.write_text(text)
    with pytest.raises(SpecError, match=f"a JSON {kind}"):
        load_job(path)
