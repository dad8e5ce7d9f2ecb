"""The saved model: a directory of safe-to-load files, no pickles.

* ``booster.ubj``: the XGBoost booster (UBJSON);
* ``calibration.json``: conformal percentile tables for step times and speedups;
* ``metadata.json``: schema versions, feature names, the analytical baseline,
  the training data's fingerprint and domain, metrics and hyperparameters;
* ``model_card.md``: what it was trained on, where it is valid, where not.

Loading needs numpy and libxgboost only (not the xgboost package) and checks the
schema versions.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from features.build import FEATURE_SCHEMA_VERSION
from predictor.calibration import CalibrationTable

#: Bump when the artefact's files or their meaning change.
ARTEFACT_SCHEMA_VERSION = 1

BOOSTER_FILE = "booster.ubj"
CALIBRATION_FILE = "calibration.json"
METADATA_FILE = "metadata.json"
CARD_FILE = "model_card.md"


class ArtefactError(ValueError):
    """A model directory that is missing, incomplete or from another schema version."""


def import_xgboost():
    """Import xgboost without letting it pull in scikit-learn.

    xgboost imports scikit-learn (about 2 s) only for its scikit-learn-style
    wrappers, which loading a booster and predicting never use. Where nothing
    has imported scikit-learn yet, it is hidden while xgboost loads, keeping
    ``predict time`` and ``predict speedup`` within a second. Training imports
    scikit-learn first and gets the full package.
    """
    if "xgboost" in sys.modules or "sklearn" in sys.modules:
        import xgboost

        return xgboost
    sys.modules["sklearn"] = None  # type: ignore[assignment]
    try:
        import xgboost
    finally:
        del sys.modules["sklearn"]
    return xgboost


@dataclass
class Artefact:
    """A loaded model directory.

    ``booster`` predicts (through XGBoost's C API where it loads, see
    :mod:`predictor.booster_capi`); :meth:`xgboost_booster` gives the full
    xgboost Booster for SHAP values and saving.
    """

    path: Path
    booster: Any
    step_calibration: CalibrationTable
    speedup_calibration: CalibrationTable | None
    metadata: dict[str, Any]

    def xgboost_booster(self):
        """The booster as an ``xgboost.Booster`` (loads the xgboost package)."""
        if not hasattr(self, "_xgboost_booster"):
            xgb = import_xgboost()
            booster = xgb.Booster()
            booster.load_model(str(self.path / BOOSTER_FILE))
            self._xgboost_booster = booster
        return self._xgboost_booster

    @property
    def feature_names(self) -> list[str]:
        return self.metadata["feature_names"]

    @property
    def baseline(self) -> str:
        return self.metadata["baseline"]

    def predict_residual(self, features: np.ndarray) -> np.ndarray:
        """Log residual per row, plus a refit cluster's offset where there is one.

        Large inputs go through the trees once per distinct feature row (see
        :func:`distinct_feature_rows`): jobs that differ only in fields the
        model does not see, or that a what-if leaves unchanged, cost one
        traversal.
        """
        data = np.ascontiguousarray(features, dtype=np.float32)  # XGBoost splits on float32 values
        offset = self.metadata.get("residual_offset", 0.0)
        if len(data) < DEDUPLICATE_ABOVE_ROWS:
            return self.booster.inplace_predict(data) + offset
        first, inverse = distinct_feature_rows(data)
        return self.booster.inplace_predict(data[first])[inverse] + offset


#: Below this many rows the trees are cheaper than finding repeated rows.
DEDUPLICATE_ABOVE_ROWS = 10_000


def distinct_feature_rows(data: np.ndarray, key: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rows to predict and, per input row, which of them holds its answer: ``data[first][inverse] == data``.

    Rows are keyed by a 64-bit FNV-1a style hash of their float32 bits, then
    every row is checked bit for bit against the row it was matched with; a
    row whose hash collides with a different row keeps its own entry, so the
    result is exact whatever the hash does (``key`` replaces it, for tests).
    """
    import pandas as pd

    bits = data.view(np.uint32)
    if key is None:
        # Two float32 columns per 64-bit word (a zero column pads an odd count).
        words = np.ascontiguousarray(np.pad(bits, ((0, 0), (0, bits.shape[1] % 2)))).view(np.uint64)
        key = np.full(len(data), 0xCBF29CE484222325, dtype=np.uint64)
        prime = np.uint64(0x100000001B3)
        with np.errstate(over="ignore"):
            for j in range(words.shape[1]):
                key ^= words[:, j]
                key *= prime
    codes, uniques = pd.factorize(key)
    codes = np.asarray(codes, np.int64)
    # Codes number keys in order of first appearance: a key's first row is where their running maximum steps up.
    first = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
    collided = np.flatnonzero((bits[first[codes]] != bits).any(axis=1))
    if len(collided):
        codes[collided] = len(first) + np.arange(len(collided))
        first = np.concatenate([first, collided])
    return first, codes


def save_artefact(path: Path, booster, step: CalibrationTable, speedup: CalibrationTable | None, metadata: dict, card: str) -> Path:
    """Write the model directory (files replaced one by one; the directory is created if needed)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    metadata = {
        **metadata,
        "artefact_schema_version": ARTEFACT_SCHEMA_VERSION,
        "feature_schema_version": FEATURE_SCHEMA_VERSION,
    }
    booster.save_model(str(path / BOOSTER_FILE))
    calibration = {"step": step.to_dict(), "speedup": speedup.to_dict() if speedup is not None else None}
    (path / CALIBRATION_FILE).write_text(json.dumps(calibration, indent=1))
    (path / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=_json_default))
    (path / CARD_FILE).write_text(card)
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def load_artefact(path: Path) -> Artefact:
    """Load a model directory, checking that it is complete and of this schema version."""
    path = Path(path)
    for name in (BOOSTER_FILE, CALIBRATION_FILE, METADATA_FILE):
        if not (path / name).is_file():
            raise ArtefactError(f"model directory {path} has no {name}")
    metadata = json.loads((path / METADATA_FILE).read_text())
    found = (metadata.get("artefact_schema_version"), metadata.get("feature_schema_version"))
    expected = (ARTEFACT_SCHEMA_VERSION, FEATURE_SCHEMA_VERSION)
    if found != expected:
        raise ArtefactError(
            f"model at {path} has schema versions (artefact, features) {found}; this version reads {expected}: "
            "retrain it with `predict train`"
        )
    try:
        from predictor.booster_capi import CApiBooster, CApiUnavailable

        booster = CApiBooster(path / BOOSTER_FILE)
    except CApiUnavailable:
        xgb = import_xgboost()
        booster = xgb.Booster()
        booster.load_model(str(path / BOOSTER_FILE))
    calibration = json.loads((path / CALIBRATION_FILE).read_text())
    speedup = calibration.get("speedup")
    return Artefact(
        path=path,
        booster=booster,
        step_calibration=CalibrationTable.from_dict(calibration["step"]),
        speedup_calibration=CalibrationTable.from_dict(speedup) if speedup else None,
        metadata=metadata,
    )
