"""A fleet's distinct job configurations: rows grouped by their job columns, and scores spread back.

A row's predictions depend only on its own job columns, so a fleet is scored
once per distinct configuration and each row takes its configuration's
answers (:class:`ConfigScores`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from features.table import RULES, JobTable, check_column
from predictor.fleet_columns import OUTPUT_COLUMNS, SCORED_FIELDS

def _column_codes(series: pd.Series, numeric: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of a column and its distinct values (None for missing), as a plain array.

    In the object column of a ``numeric`` field, booleans are kept apart from the numbers 1 and 0.
    """
    if isinstance(series.dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy().astype(np.int64)
        categories = np.asarray(series.cat.categories, dtype=object)
        return np.where(codes < 0, len(categories), codes), np.append(categories, None)
    if series.dtype == object:
        series = _nested_as_text(series)
        if numeric:
            series = _booleans_apart(series)
    codes, uniques = pd.factorize(series, use_na_sentinel=False)
    return np.asarray(codes, np.int64), _plain_values(_booleans_back(uniques))


class _Boolean:
    """A boolean cell of an object column while it is factorized: hashed apart from the numbers 1 and 0,
    which Python's True == 1 would otherwise merge with it (a count of True would pass as 1)."""

    __slots__ = ("value",)

    def __init__(self, value: bool):
        self.value = value


_TRUE, _FALSE = _Boolean(True), _Boolean(False)


def _booleans_apart(series: pd.Series) -> pd.Series:
    values = series.to_numpy()
    booleans = np.fromiter((isinstance(v, (bool, np.bool_)) for v in values), bool, len(values))
    if not booleans.any():
        return series
    keyed = values.copy()
    keyed[booleans] = [_TRUE if v else _FALSE for v in values[booleans]]
    return pd.Series(keyed, index=series.index, dtype=object)


def _booleans_back(uniques: Any) -> Any:
    """Distinct values with the booleans :func:`_booleans_apart` keyed apart back as booleans."""
    if getattr(uniques, "dtype", None) != object:
        return uniques
    values = np.asarray(uniques, dtype=object)
    keyed = np.fromiter((isinstance(v, _Boolean) for v in values), bool, len(values))
    if not keyed.any():
        return uniques
    values = values.copy()
    values[keyed] = [v.value for v in values[keyed]]
    return values


def _nested_as_text(series: pd.Series) -> pd.Series:
    """A job column's lists, arrays and mappings (Parquet's nested cells) as text, which validation refuses
    with the field's name like any other bad value; other cells as they are."""
    values = series.to_numpy()
    nested = np.fromiter((isinstance(v, (list, tuple, dict, set, np.ndarray)) for v in values), bool, len(values))
    if not nested.any():
        return series
    text = values.copy()
    for i in np.flatnonzero(nested):
        value = values[i]
        text[i] = str(value.tolist() if isinstance(value, np.ndarray) else value)
    return pd.Series(text, index=series.index, dtype=object)


def _plain_values(uniques: Any) -> np.ndarray:
    """Distinct values as float (numbers) or object (anything else, None for missing) numpy arrays."""
    if isinstance(uniques, np.ndarray) and uniques.dtype.kind in "fiu":
        return uniques.astype(float)
    array = pd.array(uniques)
    if pd.api.types.is_numeric_dtype(array.dtype) and not pd.api.types.is_bool_dtype(array.dtype):
        return array.to_numpy(dtype=float, na_value=np.nan)
    # Booleans stay booleans (validation refuses them where a number is due); text stays text.
    values = np.asarray(array.to_numpy(dtype=object, na_value=None), dtype=object)
    values[pd.isna(values)] = None
    return values


def _distinct_rows(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per row, the index of its distinct job configuration, and those configurations' columns.

    Each column's codes are combined into one integer key (mixed radix,
    re-compacted before it could overflow) and the key factorized once.
    """
    n = len(frame)
    per_column = {leaf: _column_codes(frame[leaf], leaf in RULES and RULES[leaf].kind in ("int", "float")) for leaf in columns}
    key = np.zeros(n, np.int64)
    size = 1
    for codes, values in per_column.values():
        radix = len(values)
        if size * radix >= 2**62:
            key, size = _compact(key)
        key = key * radix + codes
        size *= radix
    inverse, k = _compact(key)
    # Codes number configurations in order of first appearance, so a
    # configuration's first row is where the running maximum code steps up.
    first = np.flatnonzero(np.diff(np.maximum.accumulate(inverse), prepend=-1) > 0) if n else np.zeros(0, np.int64)
    return inverse, {leaf: values[codes[first]] for leaf, (codes, values) in per_column.items()}


def _compact(key: np.ndarray) -> tuple[np.ndarray, int]:
    codes, uniques = pd.factorize(key)
    return np.asarray(codes, np.int64), len(uniques)


def _measured_errors(frame: pd.DataFrame) -> np.ndarray | None:
    """Per row, the measured time's validation message (None where fine); None when all are fine."""
    if "measured_step_time_s" not in frame.columns or not len(frame):
        return None
    series = frame["measured_step_time_s"]
    if pd.api.types.is_numeric_dtype(series.dtype):
        values = series.to_numpy(dtype=float, na_value=np.nan)
    else:
        values = np.asarray(series.to_numpy(dtype=object, na_value=None), dtype=object)
    table = JobTable({}, np.full(len(frame), None, object), np.zeros(len(frame), bool))
    check_column(table, RULES["measured_step_time_s"], values)
    return table.errors if table.failed.any() else None


@dataclass
class ConfigScores:
    """The predictions of distinct job configurations, before they are spread over rows.

    ``columns`` holds numbers as float arrays and labels as categoricals, in
    output order; ``extrapolation`` and ``errors`` are object arrays (None
    where there is nothing to say).
    """

    columns: dict[str, np.ndarray | pd.Categorical]
    extrapolation: np.ndarray | None
    errors: np.ndarray

    @cached_property
    def _text(self) -> dict[str, Any]:
        """The text columns as pandas string arrays, built once for all chunks."""
        text = {"error": pd.array(self.errors, dtype="str")}
        if self.extrapolation is not None:
            text["extrapolation"] = pd.array(self.extrapolation, dtype="str")
        return text

    @classmethod
    def concat(cls, parts: Sequence[ConfigScores]) -> ConfigScores:
        first = parts[0]
        if len(parts) == 1:
            return first
        columns: dict[str, Any] = {}
        for name, values in first.columns.items():
            pieces = [part.columns[name] for part in parts]
            if isinstance(values, pd.Categorical):
                columns[name] = pd.api.types.union_categoricals(pieces)
            else:
                columns[name] = np.concatenate(pieces)
        extrapolation = None if first.extrapolation is None else np.concatenate([p.extrapolation for p in parts])
        return cls(columns, extrapolation, np.concatenate([p.errors for p in parts]))

    def take(self, index: np.ndarray) -> ConfigScores:
        """The configurations at ``index``, in that order."""
        columns = {
            name: pd.Categorical.from_codes(values.codes[index], categories=values.categories)
            if isinstance(values, pd.Categorical) else values[index]
            for name, values in self.columns.items()
        }
        extrapolation = None if self.extrapolation is None else self.extrapolation[index]
        return ConfigScores(columns, extrapolation, self.errors[index])

    def rows(self, frame: pd.DataFrame, inverse: np.ndarray) -> pd.DataFrame:
        """``frame``'s columns, then the predictions of each row's configuration (``inverse``)."""
        out: dict[str, Any] = {}
        for name, values in self.columns.items():
            if isinstance(values, pd.Categorical):
                out[name] = pd.Categorical.from_codes(values.codes[inverse], categories=values.categories)
            else:
                out[name] = values[inverse]
        if self.extrapolation is not None:
            out["extrapolation"] = self._text["extrapolation"].take(inverse)
        measured = _measured_errors(frame)
        if measured is None:
            out["error"] = self._text["error"].take(inverse)
        else:
            row_errors = self.errors[inverse]
            bad = (measured != None) & (row_errors == None)  # noqa: E711 - elementwise None test
            row_errors[bad] = measured[bad]
            for name, values in out.items():
                if isinstance(values, pd.Categorical):
                    codes = values.codes.copy()
                    codes[bad] = -1
                    out[name] = pd.Categorical.from_codes(codes, categories=values.categories)
                else:
                    values[bad] = np.nan
            out["error"] = pd.array(row_errors, dtype="str")
        kept = frame.drop(columns=[c for c in frame.columns if c in OUTPUT_COLUMNS])
        return pd.concat([kept, pd.DataFrame(out, index=frame.index)], axis=1)


def distinct_configs(frame: pd.DataFrame) -> tuple[np.ndarray, dict[str, np.ndarray], int]:
    """Per row, the index of its job configuration; the configurations' columns; their number."""
    columns = [leaf for leaf in SCORED_FIELDS if leaf in frame.columns]
    inverse, distinct = _distinct_rows(frame, columns)
    k = len(next(iter(distinct.values()))) if distinct else 1
    if not distinct:
        inverse = np.zeros(len(frame), np.int64)
    for leaf, rule in RULES.items():  # an absent number column is all-missing, as a float column
        if leaf not in distinct and rule.kind != "str":
            distinct[leaf] = np.full(k, np.nan)
    return inverse, distinct, k
