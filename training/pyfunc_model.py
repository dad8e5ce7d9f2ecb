"""The MLflow pyfunc model, logged as code (no pickle).

``mlflow.pyfunc.load_model(uri).predict(frame)`` answers a frame of jobs
given by their flat job columns (any optional column may be left out, in a
row or in the whole frame), and so does MLflow's scoring server
(``mlflow models serve``). Each row's answer is what ``predict time --json``
prints for that job: step time, its interval, breakdown and bottleneck; a
row that breaks a rule answers ``{"name": ..., "error": "<the message>"}``
instead, and the other rows are answered as usual. Answers are strict JSON:
a value that is not a finite number is null, never NaN.
"""

from __future__ import annotations

import math
from typing import Any

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

from features.errors import SpecError
from features.fields import FIELDS


def job_from_row(row: dict[str, Any]) -> dict[str, Any]:
    """A flat job row (leaf name -> value; missing, None or NaN where left out) as a nested job object."""
    job: dict[str, Any] = {}
    for field in FIELDS:
        value = row.get(field.leaf)
        if _missing(value):
            continue
        if hasattr(value, "item"):
            value = value.item()
        if field.kind == "int" and isinstance(value, float) and value.is_integer():
            value = int(value)  # a JSON number read into a float column
        if field.section is None:
            job[field.name] = value
        else:
            job.setdefault(field.section, {})[field.name] = value
    return job


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def strict_json(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, infinities) replaced by None."""
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class StepTimeModel(PythonModel):
    def load_context(self, context) -> None:
        from predictor.api import Predictor

        self.predictor = Predictor(model=context.artifacts["model_dir"])

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> list[dict[str, Any]]:
        frame = pd.DataFrame(model_input)
        answers = []
        for row in frame.to_dict(orient="records"):
            job = job_from_row(row)
            try:
                answer = self.predictor.time(job).to_dict()
            except SpecError as exc:
                answer = {"name": job.get("name"), "error": str(exc)}
            answers.append(strict_json(answer))
        return answers


mlflow.models.set_model(StepTimeModel())
