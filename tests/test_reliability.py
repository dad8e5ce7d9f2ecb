"""One test per failure found by hostile use: each is one clear line and exit code 2, or a sound answer.

Corrupt model directories are built at test time from the shipped model
(``models/default``), in a temporary directory; none is committed.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from cli.common import echo_json
from cli.main import app
from features.errors import SpecError
from predictor import Predictor
from predictor.api import DEFAULT_MODEL_DIR
from predictor.artefact import ArtefactError, load_artefact

runner = CliRunner()


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def assert_clear_error(result, *fragments: str) -> str:
    """Exit 2, no traceback, exactly one line on stderr containing every fragment."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def job_file(tmp_path, ps_job):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(ps_job))
    return path


def write(tmp_path, content: bytes):
    path = tmp_path / "job.json"
    path.write_bytes(content)
    return path


# -- job files ---------------------------------------------------------------------


def test_job_file_that_is_not_utf8_is_a_clear_error(tmp_path, ps_job):
    path = write(tmp_path, json.dumps({**ps_job, "name": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"))
    assert_clear_error(invoke("time", "--job", path), "--job", "not UTF-8")


def test_job_file_in_utf16_with_a_bom_is_a_clear_error(tmp_path, ps_job):
    path = write(tmp_path, json.dumps(ps_job).encode("utf-16"))
    assert_clear_error(invoke("time", "--job", path), "--job", "UTF-16", "save it as UTF-8")


def test_job_file_with_a_utf8_bom_is_read(tmp_path, ps_job):
    path = write(tmp_path, b"\xef\xbb\xbf" + json.dumps(ps_job).encode())
    assert invoke("breakdown", "--job", path, "--json").exit_code == 0


def test_deeply_nested_json_is_a_clear_error(tmp_path):
    depth = 100_000  # far past Python's recursion limit
    path = write(tmp_path, ('{"workload": ' + "[" * depth + "]" * depth + "}").encode())
    assert_clear_error(invoke("time", "--job", path), "--job", "levels deep")


def test_integer_over_pythons_4300_digit_limit_is_a_clear_error(tmp_path, ps_job):
    text = json.dumps(ps_job).replace('"workers": 8', '"workers": 1' + "0" * 5000)
    assert_clear_error(invoke("time", "--job", write(tmp_path, text.encode())), "--job", "too long")


def test_integer_beyond_float_range_is_a_clear_error(tmp_path, ps_job):
    text = json.dumps(ps_job).replace('"workers": 8', '"workers": 1' + "0" * 400)
    assert_clear_error(invoke("time", "--job", write(tmp_path, text.encode())), "parallelism.workers")


@pytest.mark.parametrize("name", [{"first": "x"}, ["a", "b"], 42, True])
def test_name_that_is_an_object_or_a_list_is_a_clear_error(tmp_path, ps_job, name):
    path = write(tmp_path, json.dumps({**ps_job, "name": name}).encode())
    assert_clear_error(invoke("time", "--job", path), "name", "a name is a JSON string")


# -- numeric range: no silent overflow ----------------------------------------------


CUSTOM = {
    "name": "custom",
    "workload": {"model": "custom-net", "flops_per_sample": 1e10, "param_count": 1e7, "memory_bytes_per_sample": 1e8,
                 "input_bytes_per_sample": 1e5, "batch_size_per_gpu": 32},
    "cluster": {"gpu": "V100"},
}


@pytest.mark.parametrize(
    ("field", "bound"),
    [("flops_per_sample", "1e+21"), ("param_count", "1e+14"), ("memory_bytes_per_sample", "1e+16")],
)
@pytest.mark.parametrize("command", ["time", "speedup", "explain", "breakdown"])
def test_figures_of_1e308_in_a_job_are_a_clear_error(tmp_path, field, bound, command):
    job = json.loads(json.dumps(CUSTOM))
    job["workload"][field] = 1e308
    extra = ["--to", "ethernet-100g"] if command == "speedup" else []
    result = invoke(command, "--job", write(tmp_path, json.dumps(job).encode()), *extra, "--json")
    line = assert_clear_error(result, f"workload.{field}", bound)
    assert json.loads(line)["error"].startswith(f"workload.{field}: 1e+308 is not valid")


def test_to_flops_per_sample_1e308_is_a_clear_error(tmp_path):
    path = write(tmp_path, json.dumps(CUSTOM).encode())
    assert_clear_error(invoke("speedup", "--job", path, "--to", "flops_per_sample=1e308"), "--to flops_per_sample", "1e+21")


def test_figures_at_their_bounds_give_finite_results(tmp_path):
    job = json.loads(json.dumps(CUSTOM))
    job["workload"].update(flops_per_sample=1e21, param_count=1e14, memory_bytes_per_sample=1e16, input_bytes_per_sample=1e13)
    job["workload"]["batch_size_per_gpu"] = 100_000_000
    result = invoke("speedup", "--job", write(tmp_path, json.dumps(job).encode()), "--to", "ethernet-100g", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON output"))
    assert np.isfinite(data["speedup"]) and np.isfinite(data["baseline_step_time_s"]) and data["baseline_step_time_s"] > 1e10


@pytest.mark.parametrize("command", ["time", "breakdown", "explain"])
def test_tiny_figures_are_refused_by_their_bounds(tmp_path, command):
    """A denormal FLOP count would overflow every ratio taken of it: it is refused, with the field named."""
    job = json.loads(json.dumps(CUSTOM))
    job["workload"].update(flops_per_sample=5e-324, param_count=5e-324, memory_bytes_per_sample=0.0, input_bytes_per_sample=0.0)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    line = assert_clear_error(invoke(command, "--job", path, "--json"), "workload.flops_per_sample", "from 1 to 1e+21")
    assert set(json.loads(line)) == {"error"}


def test_a_job_with_next_to_no_matrix_operators_has_a_finite_breakdown(tmp_path):
    """No matrix FLOPs, or a denormal's worth, gives a finite roofline (it was NaN at 0): the matrix
    operators' time grows with their FLOPs from there."""
    matrix_s = []
    for matrix_flops in (0.0, 5e-324, 1.0, 1e6, 1e9):
        job = json.loads(json.dumps(CUSTOM))
        job["workload"]["matrix_flops_per_sample"] = matrix_flops
        path = tmp_path / "job.json"
        path.write_text(json.dumps(job))
        result = invoke("breakdown", "--job", path, "--json", "--overlap", "roofline")
        assert result.exit_code == 0, result.output
        physics = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON output"))["physics"]
        assert all(np.isfinite(v) for v in physics.values()) and physics["roofline_s"] > 0
        matrix_s.append(physics["matrix_s"])
    assert matrix_s == sorted(matrix_s) and matrix_s[-1] > matrix_s[0]


@pytest.mark.parametrize(
    "args, fragments",
    [
        (("time",), ("predict time", "Missing option '--job'")),
        (("speedup", "--job", "examples/jobs/resnet50-ps.json"), ("Missing option '--to'",)),
        (("fleet-example", "--n", "1e3", "--out", "x.csv"), ("'--n'", "'1e3' is not a valid int")),
        (("time", "--job", "examples/jobs/resnet50-ps.json", "--bogus"), ("No such option: --bogus",)),
        (("teleport",), ("No such command 'teleport'",)),
    ],
)
def test_usage_errors_are_one_line_too(args, fragments):
    assert_clear_error(invoke(*args), *fragments)
    line = assert_clear_error(invoke(*args, "--json"))
    assert set(json.loads(line)) == {"error"}


def test_json_output_is_strict():
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        echo_json({"step_time_s": float("nan")})


def test_json_callers_get_the_error_as_a_json_object_on_stderr(tmp_path):
    result = invoke("time", "--job", tmp_path / "missing.json", "--json")
    line = assert_clear_error(result)
    assert set(json.loads(line)) == {"error"} and "--job" in json.loads(line)["error"]
    assert result.stdout == ""


# -- output paths ---------------------------------------------------------------------


def test_out_that_is_a_directory_is_a_clear_error(tmp_path):
    assert_clear_error(invoke("roofline", "--gpu", "V100", "--out", tmp_path), "--out", "is a directory")


def test_out_that_is_unwritable_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_clear_error(invoke("roofline", "--gpu", "V100", "--out", blocker / "x.png"), "--out", "not a directory")
    assert_clear_error(invoke("roofline", "--gpu", "V100", "--out", "/proc/roofline.png"), "/proc/roofline.png")


def test_plot_into_a_missing_directory_is_an_error_and_creates_nothing(tmp_path, job_file):
    target = tmp_path / "no" / "such" / "dir" / "x.png"
    assert_clear_error(invoke("explain", "--job", job_file, "--plot", target), "--plot", "does not exist")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("name", ["x.txt", "x", "x.png.bak"])
def test_an_image_path_without_an_image_extension_is_a_clear_error(tmp_path, job_file, name):
    assert_clear_error(invoke("explain", "--job", job_file, "--plot", tmp_path / name), "--plot", "ending in .png")
    assert_clear_error(invoke("roofline", "--gpu", "V100", "--out", tmp_path / name), "--out", "ending in .png")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["job.json"]  # nothing written


def test_an_svg_roofline_is_written(tmp_path):
    result = invoke("roofline", "--gpu", "V100", "--out", tmp_path / "r.svg")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r.svg").read_text().lstrip().startswith("<?xml")


def test_train_out_that_is_a_file_is_a_clear_error(tmp_path):
    blocker = tmp_path / "model"
    blocker.write_text("")
    assert_clear_error(invoke("train", "--out", blocker, "--trials", "0"), "--out", "is a file")


@pytest.mark.parametrize("contents", ["working-directory", "a-report"])
def test_refit_out_refuses_a_non_empty_directory_not_written_by_predict(tmp_path, contents, testbed_runs):
    out = tmp_path / "out"
    out.mkdir()
    (out / ("README.md" if contents == "a-report" else "precious.txt")).write_text("keep me")
    runs = tmp_path / "runs.csv"
    testbed_runs.head(5).to_csv(runs, index=False)
    assert_clear_error(invoke("refit", "--runs", runs, "--out", out), "--out", "not a model directory written by predict")
    assert (out / ("README.md" if contents == "a-report" else "precious.txt")).read_text() == "keep me"


def test_refit_out_dot_leaves_the_working_directory_alone(tmp_path, testbed_runs, monkeypatch):
    (tmp_path / "mine.txt").write_text("keep me")
    runs = tmp_path / "runs.csv"
    testbed_runs.head(5).to_csv(runs, index=False)
    monkeypatch.chdir(tmp_path)
    assert_clear_error(invoke("refit", "--runs", runs, "--out", "."), "--out", "not a model directory")
    assert (tmp_path / "mine.txt").read_text() == "keep me"


# -- the environment ------------------------------------------------------------------


def test_predict_model_dir_pointing_at_a_missing_directory_is_an_error(tmp_path, job_file):
    result = invoke("time", "--job", job_file, env={"PREDICT_MODEL_DIR": str(tmp_path / "nowhere")})
    assert_clear_error(result, "PREDICT_MODEL_DIR", "nowhere")


# -- names on the terminal ------------------------------------------------------------


def test_job_name_with_terminal_escape_bytes_is_escaped(tmp_path, ps_job):
    path = write(tmp_path, json.dumps({**ps_job, "name": "\x1b[2J\x1b[31mowned\x07"}).encode())
    for args in (["time"], ["speedup", "--to", "allreduce-nvlink"], ["explain"], ["breakdown"]):
        result = invoke(args[0], "--job", path, *args[1:])
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout
        assert "\\x1b[2J\\x1b[31mowned\\x07" in result.stdout


def test_job_name_with_rich_markup_is_printed_literally(tmp_path, ps_job):
    path = write(tmp_path, json.dumps({**ps_job, "name": "[red]fake[/red] [link=file:///etc]x[/link]"}).encode())
    result = invoke("time", "--job", path)
    assert result.exit_code == 0, result.output
    assert "[red]fake[/red] [link=file:///etc]x[/link]" in result.stdout


# -- corrupt model directories ---------------------------------------------------------


def _json_booster(model, _path):
    from predictor.artefact import import_xgboost

    booster = import_xgboost().Booster()
    booster.load_model(str(model / "booster.ubj"))
    (model / "booster.ubj").write_bytes(bytes(booster.save_raw("json")))


def _truncate(name):
    def corrupt(model, _path):
        data = (model / name).read_bytes()
        (model / name).write_bytes(data[: len(data) // 2])

    return corrupt


def _edit_json(name, edit):
    def corrupt(model, _path):
        data = json.loads((model / name).read_text())
        (model / name).write_text(json.dumps(edit(data)))

    return corrupt


def _first_bin_value(value):
    def edit(data):
        next(iter(data["step"]["bins"].values()))["upper"][100] = value
        return data

    return edit


def _shorten_first_bin(data):
    first = next(iter(data["step"]["bins"].values()))
    first["lower"] = first["lower"][:10]
    return data


CORRUPTIONS = {
    "truncated metadata JSON": ("metadata.json", _truncate("metadata.json")),
    "truncated calibration JSON": ("calibration.json", _truncate("calibration.json")),
    "garbage booster": ("booster.ubj", lambda m, p: (m / "booster.ubj").write_bytes(b"\x00garbage\xff" * 100)),
    "truncated booster": ("booster.ubj", _truncate("booster.ubj")),
    "booster cut a quarter of the way in": ("booster.ubj", lambda m, p: (m / "booster.ubj").write_bytes((m / "booster.ubj").read_bytes()[: (m / "booster.ubj").stat().st_size // 4])),
    "booster declaring an array of 2**62 floats": ("booster.ubj", lambda m, p: (m / "booster.ubj").write_bytes(b"{U\x01a[$d#L" + (2**62).to_bytes(8, "big") + b"\x00" * 64 + b"}")),
    "JSON booster where UBJ is expected": ("booster.ubj", _json_booster),
    "calibration table of the wrong shape": ("calibration.json", _edit_json("calibration.json", _shorten_first_bin)),
    "calibration with a true among its offsets": ("calibration.json", _edit_json("calibration.json", _first_bin_value(True))),
    "calibration with a text offset": ("calibration.json", _edit_json("calibration.json", _first_bin_value("0.1"))),
    "calibration with an offset too large for a float": ("calibration.json", _edit_json("calibration.json", _first_bin_value(10**400))),
    "calibration that is a list": ("calibration.json", _edit_json("calibration.json", lambda d: [d])),
    "metadata that is a list": ("metadata.json", _edit_json("metadata.json", lambda d: [d])),
    "feature list of the wrong length": (
        "metadata.json", _edit_json("metadata.json", lambda d: {**d, "feature_names": d["feature_names"][:-1]})),
    "feature list with other names": (
        "metadata.json", _edit_json("metadata.json", lambda d: {**d, "feature_names": [n + "_x" for n in d["feature_names"]]})),
    "metadata that is not UTF-8": ("metadata.json", lambda m, p: (m / "metadata.json").write_bytes(b'{"a": "\xff"}')),
    "missing booster": ("booster.ubj", lambda m, p: (m / "booster.ubj").unlink()),
    "baseline that does not exist": ("metadata.json", _edit_json("metadata.json", lambda d: {**d, "baseline": "magic"})),
    "residual offset too large for a float": ("metadata.json", _edit_json("metadata.json", lambda d: {**d, "residual_offset": 10**400})),
    "what-if share below 0": (
        "metadata.json", _edit_json("metadata.json", lambda d: {**d, "pair_shares": {"gpus": -0.5}})),
    "what-if shares that are a list": ("metadata.json", _edit_json("metadata.json", lambda d: {**d, "pair_shares": [1.0]})),
    "physics constants other than this version's": (
        "metadata.json",
        _edit_json("metadata.json", lambda d: {**d, "physics_constants": {**d["physics_constants"], "overlap_interference": 0.2}})),
    "physics constants that are not numbers": (
        "metadata.json", _edit_json("metadata.json", lambda d: {**d, "physics_constants": {"launch_scale": "fast"}})),
    "shrink share above 1": (
        "metadata.json", _edit_json("metadata.json", lambda d: {**d, "domain": {**d["domain"], "shrink": {"model": 3.0}}})),
    "shrink share that is not a number": (
        "metadata.json", _edit_json("metadata.json", lambda d: {**d, "domain": {**d["domain"], "shrink": {"model": "half"}}})),
}


@pytest.fixture
def corrupt_model(tmp_path, request):
    """A copy of the shipped model with one file corrupted as the parameter says."""
    if not (DEFAULT_MODEL_DIR / "metadata.json").exists():
        pytest.skip("no shipped model to corrupt")
    model = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, model)
    name, corrupt = CORRUPTIONS[request.param]
    corrupt(model, tmp_path)
    return model, name


@pytest.mark.parametrize("corrupt_model", list(CORRUPTIONS), indirect=True)
def test_corrupt_model_directory_is_a_clear_error_naming_the_file(corrupt_model, job_file):
    model, name = corrupt_model
    with pytest.raises(ArtefactError) as info:
        load_artefact(model)
    assert str(model) in str(info.value) and name in str(info.value)
    for command in (["time"], ["speedup", "--to", "allreduce-nvlink"], ["explain"]):
        assert_clear_error(invoke(command[0], "--job", job_file, *command[1:], "--model", model), str(model), name)


def test_the_shipped_model_loads_cleanly():
    artefact = load_artefact(DEFAULT_MODEL_DIR)
    assert len(artefact.feature_names) == artefact.booster.num_features()


# -- the learned model and the physics' signs -------------------------------------------


def test_tacotron2_ps_job_is_not_predicted_faster_on_a_slower_network():
    """Found: 1.14x faster on ethernet-10g from 100 GbE (the analytical model: 1.26x slower)."""
    job = {
        "workload": {"model": "tacotron2"},
        "parallelism": {"architecture": "ps-worker", "workers": 4, "gpus_per_worker": 1},
        "cluster": {"gpu": "A100-PCIE-80GB", "network": "ethernet-100g"},
    }
    predictor = Predictor()
    assert predictor.method == "learned"
    result = predictor.speedup(job, ["ethernet-10g"])
    assert result.speedup <= 1.0
    assert Predictor(model=None).speedup(job, ["ethernet-10g"]).speedup < 1.0


def test_allreduce_cluster_job_is_not_slower_on_400_gbe_than_on_100_gbe():
    """Found: one allreduce-cluster job 12% slower going from 100 to 400 GbE."""
    job = {
        "workload": {"model": "bert-large"},
        "parallelism": {"architecture": "allreduce-cluster", "workers": 4, "gpus_per_worker": 8},
        "cluster": {"gpu": "A100-SXM4-80GB", "network": "ethernet-100g"},
    }
    assert Predictor().speedup(job, ["ethernet-400g"]).speedup >= 1.0


def test_network_change_on_a_one_gpu_job_gives_exactly_one():
    """Found: 0.99987x; a one-GPU job sends nothing over the network, so no feature may move."""
    job = {"workload": {"model": "resnet50"}, "cluster": {"gpu": "V100", "network": "ethernet-25g"}}
    for network in ("ethernet-10g", "ethernet-100g", "infiniband-ndr"):
        assert Predictor().speedup(job, [network]).speedup == 1.0


def test_doubling_every_peak_flops_of_a_gpu_is_never_slower():
    """Found: speedups as low as 0.71x when every peak FLOP/s of the GPU doubled."""
    import dataclasses

    from features.resolve import resolve
    from features.table import table_from_rows
    from predictor.learned import predict_times

    artefact = load_artefact(DEFAULT_MODEL_DIR)
    rows = [{"model": m, "gpu": g, "precision": p} for m in ("resnet50", "bert-large", "ncf", "tacotron2")
            for g in ("V100", "A100-SXM4-80GB", "H100-SXM", "RTX-4090") for p in ("fp32", "fp16")]
    resolved = resolve(table_from_rows(rows))
    doubled = dataclasses.replace(resolved, peak_flops_per_s=resolved.peak_flops_per_s * 2,
                                  fp32_peak_flops_per_s=resolved.fp32_peak_flops_per_s * 2)
    before = predict_times(artefact, resolved, resolved.breakdown(), 0.9).log_step_time_s
    after = predict_times(artefact, doubled, doubled.breakdown(), 0.9).log_step_time_s
    assert resolved.ok.all() and np.all(after <= before)


def test_fleet_out_that_is_a_directory_is_a_clear_error(tmp_path):
    fleet = tmp_path / "fleet.csv"
    assert invoke("fleet-example", "--n", "5", "--out", fleet).exit_code == 0
    (tmp_path / "scored.csv").mkdir()
    assert_clear_error(invoke("fleet", "--jobs", fleet, "--out", tmp_path / "scored.csv"), "--out", "is a directory")
    assert_clear_error(invoke("fleet-example", "--n", "5", "--out", tmp_path / "scored.csv"), "--out", "is a directory")


def test_an_empty_model_directory_variable_is_as_if_unset(monkeypatch):
    monkeypatch.setenv("PREDICT_MODEL_DIR", "")
    assert Predictor().method == "learned"
