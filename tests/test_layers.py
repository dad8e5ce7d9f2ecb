"""The house's layers: the runtime loads without the trainer or its heavy libraries, and the contracts hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Libraries a prediction never needs; importing them costs seconds.
HEAVY = ("training", "mlflow", "optuna", "shap", "matplotlib", "torch", "sklearn", "scipy", "pydantic")


def _modules_after(statement: str) -> set[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    return {name.split(".")[0] for name in json.loads(out.stdout)}


@pytest.mark.parametrize(
    "statement",
    [
        "import predictor",
        "import predictor.api, predictor.learned, predictor.artefact, predictor.calibration",
        "import predictor.fleet, predictor.explain",
    ],
)
def test_importing_the_runtime_loads_no_trainer_and_no_heavy_library(statement):
    loaded = _modules_after(statement)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_a_prediction_with_the_shipped_model_loads_no_trainer_and_no_heavy_library():
    loaded = _modules_after(
        "from predictor import Predictor; Predictor().speedup('examples/jobs/resnet50-ps.json', ['allreduce-nvlink'])"
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("lint-imports is not installed (the dev extra brings it)")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
