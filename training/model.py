"""The residual estimator: XGBoost on physical features, with conformal calibration.

``ResidualRegressor`` follows the scikit-learn contract: ``__init__`` only
stores keyword parameters, ``fit`` validates and trains, fitted state ends in
an underscore. Its protocol is ``fit`` -> ``calibrate`` -> ``predict_interval``;
calling out of order raises :class:`ProtocolError` naming the missing call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_array, check_is_fitted

from features.build import monotone_constraints
from training.calibration import fit_table

from predictor.calibration import CalibrationTable

#: XGBoost settings used when tuning has not chosen others. 200 rounds at eta 0.1 held out as
#: well as 400 at 0.05 did (`predict evaluate`: Lambda leave-one-GPU-type-out 14.8% against 14.9%,
#: cross-source 35.2% against 34.8%) with half the trees, so predictions and TreeSHAP cost half.
DEFAULT_PARAMS = {
    "max_depth": 5,
    "eta": 0.1,
    "min_child_weight": 3.0,
    "subsample": 0.8,
    "colsample_bytree": 0.8,
    "lambda": 1.0,
    "alpha": 1e-3,
}
DEFAULT_ROUNDS = 200


class ProtocolError(NotFittedError):
    """A method called before the step it depends on (fit -> calibrate -> predict_interval)."""


class ResidualRegressor(RegressorMixin, BaseEstimator):
    """Gradient-boosted trees on the log residual of the analytical model.

    Parameters
    ----------
    params : dict, optional
        XGBoost booster parameters (``max_depth``, ``eta`` ...); defaults in :data:`DEFAULT_PARAMS`.
    num_boost_round : int
        Number of boosting rounds.
    n_jobs : int
        Threads XGBoost may use.
    seed : int
        Seed for XGBoost's row and column sampling.
    """

    def __init__(self, *, params: dict | None = None, num_boost_round: int = DEFAULT_ROUNDS, n_jobs: int = 2, seed: int = 0):
        self.params = params
        self.num_boost_round = num_boost_round
        self.n_jobs = n_jobs
        self.seed = seed

    def _booster_params(self) -> dict:
        params = {**DEFAULT_PARAMS, **(self.params or {})}
        # 64 histogram bins: the features take few distinct values (runs share configurations),
        # and fits are 1.5x faster than with the default 256.
        params.update(objective="reg:squarederror", max_bin=64, nthread=self.n_jobs, seed=self.seed, verbosity=0)
        if getattr(self, "feature_names_", None):
            # The physics' signs (features.build.MONOTONE_SIGNS): more bandwidth or peak FLOP/s never slower.
            params.update(tree_method="hist", monotone_constraints=str(monotone_constraints(self.feature_names_)))
        return params

    def fit(self, X, y, sample_weight=None, feature_names: Sequence[str] | None = None):
        """Train on features ``X`` (n x d) and log residuals ``y``."""
        import xgboost as xgb

        X = check_array(X, ensure_all_finite="allow-nan", dtype=float)
        y = np.asarray(y, float)
        if y.shape != (X.shape[0],) or not np.isfinite(y).all():
            raise ValueError("y must be one finite log residual per row of X")
        names = list(feature_names) if feature_names is not None else None
        self.feature_names_ = names
        dtrain = xgb.DMatrix(X, label=y, weight=sample_weight, feature_names=names)
        self.booster_ = xgb.train(self._booster_params(), dtrain, num_boost_round=self.num_boost_round)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X) -> np.ndarray:
        """Predicted log residual per row."""
        check_is_fitted(self, "booster_")
        X = check_array(X, ensure_all_finite="allow-nan", dtype=float)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features; the model was fitted on {self.n_features_in_}")
        return self.booster_.inplace_predict(X)

    def calibrate(self, residuals: np.ndarray, keys: Sequence[Sequence[str]], pair_residuals=None, pair_keys=None, pair_weights=None, weights=None):
        """Conformal tables from out-of-fold residuals (measured minus predicted, log scale).

        ``keys`` holds each row's Mondrian bin chain, finest first. Optional
        ``pair_residuals``/``pair_keys`` calibrate the log speedup of pairs of
        runs directly (not as a ratio of two intervals), weighted by
        ``pair_weights`` where given; ``weights`` weigh the step-time residuals likewise.
        """
        if not hasattr(self, "booster_"):
            raise ProtocolError("calibrate() needs a fitted model: call fit() first")
        self.calibration_ = fit_table(residuals, keys, weights)
        self.speedup_calibration_ = fit_table(pair_residuals, pair_keys, pair_weights) if pair_residuals is not None and len(pair_residuals) else None
        return self

    def predict_interval(self, X, keys: Sequence[Sequence[str]], confidence_level: float = 0.9):
        """Predicted log residual and its conformal interval at ``confidence_level``."""
        if not hasattr(self, "booster_"):
            raise ProtocolError("predict_interval() needs a fitted model: call fit() then calibrate()")
        if not hasattr(self, "calibration_"):
            raise ProtocolError("predict_interval() needs calibration: call calibrate() after fit()")
        if not 0.0 < confidence_level < 1.0:
            raise ValueError(f"confidence_level {confidence_level!r}; allowed: strictly between 0 and 1")
        y_hat = self.predict(X)
        table: CalibrationTable = self.calibration_
        low, high = table.interval(y_hat, table.bin_for(keys), confidence_level)
        return y_hat, low, high
