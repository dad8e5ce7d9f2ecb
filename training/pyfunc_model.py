"""The MLflow pyfunc model, logged as code (no pickle).

``mlflow.pyfunc.load_model(uri).predict(frame)`` scores a pandas frame of
jobs (the flat job columns) with the saved artefact and returns the fleet
columns: predicted step time, its interval, bottleneck and an error column
for rows that fail validation.
"""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel


class StepTimeModel(PythonModel):
    def load_context(self, context) -> None:
        from predictor.api import Predictor

        self.predictor = Predictor(model=context.artifacts["model_dir"])

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        from features.table import validate_columns
        from training.dataset import table_columns

        frame = pd.DataFrame(model_input)
        result = self.predictor.predict_table(validate_columns(table_columns(frame), len(frame)))
        return pd.DataFrame(
            {
                "step_time_s": result.step_time_s,
                "lower_s": result.lower_s if result.lower_s is not None else np.nan,
                "upper_s": result.upper_s if result.upper_s is not None else np.nan,
                "bottleneck": result.bottleneck,
                "error": result.errors,
            },
            index=frame.index,
        )


mlflow.models.set_model(StepTimeModel())
