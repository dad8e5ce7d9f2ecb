"""Shared fixtures: example jobs and the path to the public measured runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
EXAMPLES = ROOT / "examples" / "jobs"

PS_JOB = {
    "name": "resnet50-ps-8w",
    "workload": {"model": "resnet50", "batch_size_per_gpu": 64, "precision": "fp32", "framework": "tensorflow"},
    "parallelism": {"architecture": "ps-worker", "workers": 8, "gpus_per_worker": 1, "parameter_servers": 2},
    "cluster": {"gpu": "V100-SXM2-16GB", "gpus_per_node": 8, "intra_node_link": "pcie-gen3", "network": "ethernet-25g"},
    "measured": {"step_time_s": 0.42},
}


@pytest.fixture
def ps_job() -> dict:
    """The job spec example the CLI must accept exactly (a fresh copy per test)."""
    return copy.deepcopy(PS_JOB)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public measured runs not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def testbed_runs():
    """The project's own measured runs (always in the repository)."""
    from training.runs import load_runs
    from training.sources import TESTBED_RUNS

    loaded = load_runs(TESTBED_RUNS)
    assert loaded.n_rejected == 0, loaded.rejected["reason"].head().tolist()
    return loaded.accepted


@pytest.fixture(scope="session")
def trained(tmp_path_factory, testbed_runs):
    """A small model trained on the testbed runs (2 tuning trials), tracked in a temporary MLflow store."""
    from training.train import train

    root = tmp_path_factory.mktemp("train")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    result = train(testbed_runs, trials=2, out_dir=root / "model", tracking_uri=uri, register=True, progress=False)
    return result, uri


# Hypothesis profiles. "default" keeps the whole default run within its time budget; "long"
# (pytest --hypothesis-profile=long) runs 2,500 examples per property, which puts 10,000
# generated job files through the four answering commands (tests/test_fuzz_cli.py).
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("default", max_examples=40, deadline=None)
settings.register_profile(
    "long", max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def pytest_configure(config):
    settings.load_profile(config.getoption("hypothesis_profile", None) or "default")
