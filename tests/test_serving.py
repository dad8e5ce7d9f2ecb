"""The registered pyfunc model answers over HTTP with MLflow's own scoring server, as `predict time --json` does."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

pytestmark = pytest.mark.slow
runner = CliRunner()

# A PS/Worker job over 25 GbE with the optional fields the signature must accept;
# batch_size_per_gpu is left out (its catalogue default applies).
VALID_JOB = {
    "name": "resnet-ps-2w",
    "workload": {"model": "testbed-resnet", "precision": "fp32"},
    "parallelism": {"architecture": "ps-worker", "workers": 2, "parameter_servers": 1},
    "cluster": {"gpu": "cpu-host", "gpus_per_node": 1, "network": "ethernet-25g"},
}
UNKNOWN_GPU_JOB = {"name": "no-such-gpu", "workload": {"model": "resnet50"}, "cluster": {"gpu": "V10"}}


def _flat(job: dict) -> dict:
    row = {"name": job["name"]}
    for section in ("workload", "parallelism", "cluster"):
        row.update(job.get(section, {}))
    return row


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _post(port: int, body: dict, timeout_s: float = 60) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/invocations", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read().decode(), parse_constant=_reject)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode())


def _reject(constant: str):
    raise AssertionError(f"the answer is not strict JSON: it holds {constant}")


@pytest.fixture(scope="module")
def server(trained, tmp_path_factory):
    """`mlflow models serve` of the registered model on a free port; stopped after the tests."""
    import mlflow

    tmp_path = tmp_path_factory.mktemp("serve")
    result, uri = trained
    mlflow.set_tracking_uri(uri)
    version = max(int(v.version) for v in mlflow.MlflowClient().search_model_versions("name='step-time-predictor'"))
    port = _free_port()
    # The server runs uvicorn from the environment's own bin directory.
    bin_dir = str(Path(sys.executable).parent)
    mlflow_cli = shutil.which("mlflow", path=bin_dir) or "mlflow"
    log = open(tmp_path / "server.log", "wb")
    process = subprocess.Popen(
        [mlflow_cli, "models", "serve", "-m", f"models:/step-time-predictor/{version}", "--env-manager", "local",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env={**os.environ, "MLFLOW_TRACKING_URI": uri, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("the scoring server did not start:\n" + (tmp_path / "server.log").read_text()[-3000:])
            time.sleep(1)
        yield port, result
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
        log.close()


def test_serving_answers_as_predict_time_json_and_keeps_a_bad_rows_error(server, tmp_path):
    port, result = server
    status, body = _post(port, {"dataframe_records": [_flat(VALID_JOB), _flat(UNKNOWN_GPU_JOB)]})
    assert status == 200, body
    valid, bad = body["predictions"]

    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(VALID_JOB))
    cli = runner.invoke(app, ["time", "--job", str(job_file), "--json", "--model", str(result.path)])
    assert cli.exit_code == 0, cli.output
    assert valid == json.loads(cli.stdout)
    assert valid["method"] == "learned" and valid["lower_s"] < valid["step_time_s"] < valid["upper_s"]

    job_file.write_text(json.dumps(UNKNOWN_GPU_JOB))
    cli = runner.invoke(app, ["time", "--job", str(job_file), "--json", "--model", str(result.path)])
    assert cli.exit_code == 2
    assert bad["name"] == "no-such-gpu" and "unknown gpu 'V10'" in bad["error"]
    assert bad["error"] in cli.stderr
    assert set(bad) == {"name", "error"}


def test_serving_rejects_a_request_without_the_required_gpu(server):
    port, _ = server
    status, body = _post(port, {"dataframe_records": [{"name": "x", "model": "resnet50"}]})
    assert status == 400 and "gpu" in json.dumps(body)
