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

import dataclasses
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from features.build import FEATURE_SCHEMA_VERSION
from features.errors import SpecError
from features.analytical import OVERLAP_STRATEGIES
from features.mechanisms import physics_constants
from predictor.calibration import PERCENTILES, POOLED, CalibrationTable

#: Bump when the artefact's files or their meaning change.
ARTEFACT_SCHEMA_VERSION = 1

BOOSTER_FILE = "booster.ubj"
CALIBRATION_FILE = "calibration.json"
METADATA_FILE = "metadata.json"
CARD_FILE = "model_card.md"


class ArtefactError(SpecError):
    """A model directory that is missing, incomplete, corrupt or from another schema version.

    The message names the first file with a problem and what is wrong with it.
    """

    def __init__(self, message: str, path: Path | str | None = None):
        self.field = "--model"
        self.value = None if path is None else str(path)
        self.allowed = message
        ValueError.__init__(self, message)


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
    def pair_shares(self) -> dict[str, float] | None:
        """Per what-if kind, the share of the correction's change a speedup keeps (None: all of it)."""
        return self.metadata.get("pair_shares")

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

    bits = np.ascontiguousarray(data).view(np.uint32)
    if key is None:
        key = _row_hashes(bits)
    codes, uniques = pd.factorize(key)
    codes = np.asarray(codes, np.int64)
    # Codes number keys in order of first appearance: a key's first row is where their running maximum steps up.
    first = np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)
    # Each row as one opaque value, compared byte for byte (a third of the time of a gathered matrix).
    rows = bits.view(np.dtype((np.void, bits.itemsize * bits.shape[1]))).ravel()
    collided = np.flatnonzero(rows[first[codes]] != rows)
    if len(collided):
        codes[collided] = len(first) + np.arange(len(collided))
        first = np.concatenate([first, collided])
    return first, codes


def _row_hashes(bits: np.ndarray, block_rows: int = 8192) -> np.ndarray:
    """A 64-bit FNV-1a style hash of each row of 32-bit words.

    Two columns make one 64-bit word (a view, no copy); an odd last column is
    a word of its own. Rows are hashed a block at a time, so a block stays in
    cache while its words are folded in (three times faster than whole columns).
    """
    even = bits.shape[1] - bits.shape[1] % 2
    wide = bits[:, :even].view(np.uint64)
    key = np.full(len(bits), 0xCBF29CE484222325, dtype=np.uint64)
    prime = np.uint64(0x100000001B3)
    with np.errstate(over="ignore"):
        for start in range(0, len(bits), block_rows):
            block, words = key[start : start + block_rows], wide[start : start + block_rows]
            for j in range(words.shape[1]):
                block ^= words[:, j]
                block *= prime
            if even < bits.shape[1]:
                block ^= bits[start : start + block_rows, -1].astype(np.uint64)
                block *= prime
    return key


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
    (path / CALIBRATION_FILE).write_text(json.dumps(calibration, indent=1, allow_nan=False))
    (path / METADATA_FILE).write_text(json.dumps(_finite_or_null(metadata), indent=2, default=_json_default, allow_nan=False))
    (path / CARD_FILE).write_text(card)
    return path


def _finite_or_null(value: Any) -> Any:
    """Metadata with every NaN or infinite number (an undefined metric) written as null: strict JSON."""
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_null(v) for v in value]
    if isinstance(value, (float, np.floating)) and not np.isfinite(value):
        return None
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def load_artefact(path: Path) -> Artefact:
    """Load a model directory, checking every file it reads; the first problem raises :class:`ArtefactError`.

    Checked: the directory and its files exist; ``metadata.json`` is a JSON
    object of this schema version whose feature list is the one this version
    builds, with a valid baseline and domain; ``booster.ubj`` loads and takes that
    many features; ``calibration.json`` holds
    percentile tables of the right shape.
    """
    path = Path(path)
    if not path.is_dir():
        raise ArtefactError(f"model directory {path} does not exist" if not path.exists() else f"{path} is not a directory", path)
    for name in (BOOSTER_FILE, CALIBRATION_FILE, METADATA_FILE):
        if not (path / name).is_file():
            raise ArtefactError(f"model directory {path} has no {name}", path)
    metadata = read_metadata(path)
    booster = _load_booster(path / BOOSTER_FILE, len(metadata["feature_names"]))
    step, speedup = _read_calibration(path / CALIBRATION_FILE)
    return Artefact(path=path, booster=booster, step_calibration=step, speedup_calibration=speedup, metadata=metadata)


def _read_json(file: Path) -> Any:
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ArtefactError(f"{file}: cannot read it ({exc.strerror})", file) from None
    except UnicodeDecodeError as exc:
        raise ArtefactError(f"{file}: not UTF-8 text (byte {exc.start}); the file is corrupt", file) from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ArtefactError(f"{file}: malformed JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); the file is corrupt or truncated", file) from None
    except (ValueError, RecursionError) as exc:
        raise ArtefactError(f"{file}: unreadable JSON ({exc})", file) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _check_physics_constants(recorded: Any, file: Path) -> None:
    """Refuse a model whose residual corrects the roofline physics with constants other than this version's.

    The residual is learned as measured over physics; under other constants the
    same job's physics moves and the correction no longer applies to it.
    Artefacts written before the constants were recorded are not checked.
    """
    if not isinstance(recorded, dict) or not all(isinstance(k, str) and _is_number(v) for k, v in recorded.items()):
        raise ArtefactError(f"{file}: physics_constants must map constant names to finite numbers", file)
    current = dataclasses.asdict(physics_constants())
    moved = [name for name in sorted(set(recorded) | set(current)) if recorded.get(name) != current.get(name)]
    if moved:
        shown = ", ".join(f"{name} {recorded.get(name)} where this version has {current.get(name)}" for name in moved[:3])
        more = f" and {len(moved) - 3} more" if len(moved) > 3 else ""
        raise ArtefactError(
            f"{file}: the model corrects the roofline physics with other constants ({shown}{more}); retrain it with `predict train`",
            file,
        )


def read_metadata(path: Path, physics: bool = True) -> dict[str, Any]:
    """A model directory's ``metadata.json``, checked against what this version reads.

    ``physics=False`` skips the physics-constants check, for a caller that takes only the
    baseline's name and fits its own constants (the held-out evaluation).
    """
    file = Path(path) / METADATA_FILE
    metadata = _read_json(file)

    def bad(problem: str) -> ArtefactError:
        return ArtefactError(f"{file}: {problem}", file)

    if not isinstance(metadata, dict):
        raise bad(f"a JSON object is expected, found a {type(metadata).__name__}")
    found = (metadata.get("artefact_schema_version"), metadata.get("feature_schema_version"))
    expected = (ARTEFACT_SCHEMA_VERSION, FEATURE_SCHEMA_VERSION)
    if found != expected:
        raise ArtefactError(
            f"model at {path} has schema versions (artefact, features) {found}; this version reads {expected}: "
            "retrain it with `predict train`", file,
        )
    names = metadata.get("feature_names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise bad("feature_names must be a list of feature names")
    wanted = list(feature_names())
    if names != wanted:
        where = next((i for i, (a, b) in enumerate(zip(names, wanted)) if a != b), min(len(names), len(wanted)))
        first = f"position {where}: {names[where] if where < len(names) else None!r} where this version has " \
                f"{wanted[where] if where < len(wanted) else None!r}"
        raise bad(f"lists {len(names)} features, this version builds {len(wanted)} ({first}); retrain it with `predict train`")
    if metadata.get("baseline") not in OVERLAP_STRATEGIES:
        raise bad(f"baseline {metadata.get('baseline')!r} is not one of {', '.join(OVERLAP_STRATEGIES)}")
    if physics and metadata["baseline"] == "roofline" and "physics_constants" in metadata:
        _check_physics_constants(metadata["physics_constants"], file)
    offset = metadata.get("residual_offset", 0.0)
    if not _is_number(offset):
        raise bad(f"residual_offset {offset!r} is not a finite number")
    domain = metadata.get("domain")
    if not isinstance(domain, dict):
        raise bad("domain must be a JSON object (gpus, architectures, ranges)")
    for key in ("gpus", "architectures"):
        if not isinstance(domain.get(key), list):
            raise bad(f"domain.{key} must be a list of names")
    ranges = domain.get("ranges")
    if not isinstance(ranges, dict):
        raise bad("domain.ranges must be a JSON object of feature ranges")
    for feature, bounds in ranges.items():
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(_is_number(v) for v in bounds)):
            raise bad(f"domain.ranges.{feature} must be [low, high], two finite numbers")
    checks = (
        ("domain.shrink", domain.get("shrink", {}), "fact", "the share of the correction an unseen {} keeps"),
        ("pair_shares", metadata.get("pair_shares", {}), "what-if kind", "the share of the correction's change a {} what-if keeps"),
    )
    for field, shares, per, meaning in checks:
        if not isinstance(shares, dict):
            raise bad(f"{field} must be a JSON object of shares, one per {per}")
        for key, share in shares.items():
            if not (_is_number(share) and 0.0 <= share <= 1.0):
                raise bad(f"{field}.{key} must be a number from 0 to 1 ({meaning.format(key)})")
    return metadata


def _is_number(value: Any) -> bool:
    return _finite_numbers([value], 1)


def _finite_numbers(values: Any, length: int) -> bool:
    """``values`` is a list of ``length`` finite numbers (ints or floats, never bools), checked in one pass
    over the types and one numpy pass over the values: a model's calibration holds thousands."""
    if not isinstance(values, list) or len(values) != length:
        return False
    if not set(map(type, values)) <= {int, float}:
        return False
    try:
        return bool(np.isfinite(np.array(values, dtype=float)).all())
    except OverflowError:  # a whole number past any float
        return False


def feature_names() -> tuple[str, ...]:
    """The residual's feature names as this version builds them (from one probe job, computed once)."""
    global _FEATURE_NAMES
    if _FEATURE_NAMES is None:
        from features.build import physical_features
        from features.resolve import resolve
        from features.table import table_from_rows

        resolved = resolve(table_from_rows([{"model": "resnet50", "gpu": "V100-SXM2-16GB"}]))
        _FEATURE_NAMES = physical_features(resolved, resolved.breakdown()).names
    return _FEATURE_NAMES


_FEATURE_NAMES: tuple[str, ...] | None = None


def _load_booster(file: Path, n_features: int):
    """The booster, loaded and checked: it must take ``n_features`` columns.

    Its UBJSON structure is checked first (:mod:`predictor.ubjson_check`): XGBoost's
    reader trusts declared counts, and a truncated file could make it allocate
    without bound.
    """
    from predictor.ubjson_check import ubjson_problem

    try:
        problem = ubjson_problem(file.read_bytes())
    except OSError as exc:
        raise ArtefactError(f"{file}: cannot read it ({exc.strerror})", file) from None
    if problem is not None:
        raise ArtefactError(f"{file}: not a readable XGBoost model ({problem}); the file is corrupt or truncated", file)
    try:
        try:
            from predictor.booster_capi import CApiBooster, CApiUnavailable

            booster = CApiBooster(file)
            count = booster.num_features()
        except CApiUnavailable:
            xgb = import_xgboost()
            booster = xgb.Booster()
            booster.load_model(str(file))
            count = booster.num_features()
    except Exception as exc:  # XGBoost reports a corrupt file as its own error types, which vary by version
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        reason = re.sub(r"^\[[\d:]+\]\s+\S+:\d+:\s*", "", reason)  # XGBoost's "[time] source:line:" prefix
        raise ArtefactError(f"{file}: not a readable XGBoost model ({reason[:200]}); the file is corrupt or truncated", file) from None
    if count != n_features:
        raise ArtefactError(f"{file}: the booster takes {count} features, metadata.json lists {n_features}", file)
    return booster


def _read_calibration(file: Path) -> tuple[CalibrationTable, CalibrationTable | None]:
    calibration = _read_json(file)
    if not isinstance(calibration, dict) or not isinstance(calibration.get("step"), dict):
        raise ArtefactError(f"{file}: a JSON object with a 'step' table is expected", file)
    speedup = calibration.get("speedup")
    if speedup is not None and not isinstance(speedup, dict):
        raise ArtefactError(f"{file}: 'speedup' must be a table or null", file)
    tables = []
    for key, data in (("step", calibration["step"]), ("speedup", speedup)):
        if data is None:
            tables.append(None)
            continue
        problem = calibration_problem(data)
        if problem is not None:
            raise ArtefactError(f"{file}: table '{key}': {problem}", file)
        tables.append(CalibrationTable.from_dict(data))
    return tables[0], tables[1]


def calibration_problem(data: dict) -> str | None:
    """What is wrong with a stored calibration table (None when it is usable)."""
    percentiles = data.get("percentiles")
    if not _finite_numbers(percentiles, len(PERCENTILES)):
        return f"percentiles must be a list of {len(PERCENTILES)} numbers"
    if list(np.round(percentiles, 1)) != list(PERCENTILES):
        return "percentiles differ from this version's"
    bins = data.get("bins")
    if not isinstance(bins, dict) or POOLED not in bins:
        return f"bins must be a JSON object including the pooled bin '{POOLED}'"
    for name, entry in bins.items():
        if not isinstance(entry, dict):
            return f"bin {name!r} must be a JSON object with n, lower and upper"
        n = entry.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            return f"bin {name!r}: n must be a whole number >= 0"
        for side in ("lower", "upper"):
            values = entry.get(side)
            if not _finite_numbers(values, len(PERCENTILES)):
                return f"bin {name!r}: {side} must be a list of {len(PERCENTILES)} finite numbers"
    return None
