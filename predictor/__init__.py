"""Where a training job's step time goes, and how fast it would run elsewhere."""

from predictor.api import Predictor
from predictor.results import Breakdown, Prediction, SpeedupPrediction

__all__ = ["Predictor", "Prediction", "SpeedupPrediction", "Breakdown"]
