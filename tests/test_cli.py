"""The CLI in-process: output, JSON keys and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

runner = CliRunner()


@pytest.fixture
def job_file(tmp_path, ps_job):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(ps_job))
    return path


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_time_json_has_the_documented_keys(job_file):
    result = invoke("time", "--job", job_file, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("step_time_s", "throughput_samples_per_s", "breakdown", "bottleneck"):
        assert key in data
    assert set(data["breakdown"]) >= {"io_s", "compute_s", "memory_s", "comm_s"}
    assert data["throughput_samples_per_s"] == pytest.approx(8 * 64 / data["step_time_s"])


def test_a_measured_step_faster_than_the_peak_allows_is_questioned(tmp_path):
    # ResNet-50 at FP16 on a V100 at batch 256: at least 256 x (24.3 - 9.0 x 3/4) GFLOP at 125 TFLOP/s, about 0.036 s.
    job = {"workload": {"model": "resnet50", "batch_size_per_gpu": 256, "precision": "fp16"}, "cluster": {"gpu": "V100-SXM2-32GB"}}
    for measured_s, questioned in ((0.01, True), (0.3, False)):
        path = tmp_path / f"job-{measured_s}.json"
        path.write_text(json.dumps({**job, "measured": {"step_time_s": measured_s}}))
        result = invoke("time", "--job", path, "--json")
        assert result.exit_code == 0, result.output
        warnings = json.loads(result.stdout)["warnings"]
        assert any(w.startswith("measured.step_time_s: 0.01 s is shorter than the 0.0") for w in warnings) is questioned, warnings


def test_speedup_json_has_both_sides(job_file):
    result = invoke("speedup", "--job", job_file, "--to", "allreduce-nvlink", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["speedup"] == pytest.approx(data["baseline_step_time_s"] / data["target_step_time_s"])
    assert data["baseline"]["bottleneck"] == "communication"
    assert data["target"]["breakdown"]["comm_s"] < data["baseline"]["breakdown"]["comm_s"]


def test_speedup_table_is_readable(job_file):
    result = invoke("speedup", "--job", job_file, "--to", "allreduce-nvlink")
    assert result.exit_code == 0
    assert "x faster" in result.stdout and "bottleneck" in result.stdout


def test_time_and_breakdown_tables(job_file):
    result = invoke("time", "--job", job_file)
    assert result.exit_code == 0 and "samples/s" in result.stdout and "communication" in result.stdout
    result = invoke("breakdown", "--job", job_file, "--json")
    assert json.loads(result.stdout)["bottleneck"] == "communication"


@pytest.mark.parametrize(
    ("edit", "args", "message"),
    [
        (lambda j: j["cluster"].update(gpu="V10"), (), "unknown gpu 'V10' at cluster.gpu; did you mean V100-SXM2-16GB"),
        (lambda j: j["workload"].update(batch_size_per_gpu=-64), (), "workload.batch_size_per_gpu: -64"),
        (lambda j: None, ("--to", "teleport"), "unknown scenario 'teleport'"),
        (lambda j: None, ("--to", "workers=-2"), "--to workers: '-2' is not valid"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, ps_job, edit, args, message):
    edit(ps_job)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(ps_job))
    command = ("speedup", "--job", path, *args) if args else ("time", "--job", path)
    if command[0] == "speedup" and "--to" not in args:
        command = (*command, "--to", "allreduce-nvlink")
    result = invoke(*command)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_malformed_json_exit_2(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    result = invoke("time", "--job", path)
    assert result.exit_code == 2 and "malformed JSON" in result.stderr


def test_schema_devices_workloads(tmp_path):
    assert json.loads(invoke("schema").stdout)["title"] == "Job"
    devices = json.loads(invoke("devices", "--json").stdout)
    assert any(d["name"] == "V100-SXM2-16GB" for d in devices["devices"])
    assert all(d["provenance"] and d["source"] for d in devices["devices"] + devices["links"])
    workloads = json.loads(invoke("workloads", "--json").stdout)["workloads"]
    assert any(w["name"] == "resnet50" for w in workloads)


def test_roofline_writes_a_png(tmp_path):
    out = tmp_path / "roof.png"
    result = invoke("roofline", "--gpu", "V100", "--model", "resnet50", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_roofline_unknown_gpu_is_exit_2(tmp_path):
    result = invoke("roofline", "--gpu", "Voodoo", "--out", tmp_path / "r.png")
    assert result.exit_code == 2 and "unknown gpu 'Voodoo' at --gpu" in result.stderr


def test_every_command_has_help():
    for command in [c.name for c in app.registered_commands]:
        result = invoke(command, "--help")
        assert result.exit_code == 0 and "Example:" in result.stdout


def test_every_help_example_names_files_that_exist():
    """A help example a user copies must run: every examples/ file it names is in the repository."""
    import re

    root = Path(__file__).resolve().parents[1]
    named = set()
    for command in app.registered_commands:
        doc = command.callback.__doc__ or ""
        named |= set(re.findall(r"examples/[\w./-]+\.\w+", doc))
    assert named, "no help example names an example file"
    assert [path for path in sorted(named) if not (root / path).is_file()] == []
