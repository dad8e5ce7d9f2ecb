"""Flat job tables: type checks and defaults, one column at a time.

A fleet of a million jobs cannot go through a per-row validator, so the rules
of the job spec (:data:`features.fields.FIELDS`) are applied to whole columns
with numpy. A single job takes the same path as a
one-row table, so a job file and a fleet row are judged by the same rules.

A row that breaks a rule keeps its place: its first problem is recorded in
``errors`` (one message per row, ``None`` where the row is fine) and its values
are left as they are; nothing is dropped.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from features.errors import MISSING, SpecError
from features.fields import FIELDS_BY_LEAF, FLAT_FIELDS, Field

#: The rule of every flat column, from the job spec's one description of its fields.
RULES: dict[str, Field] = FIELDS_BY_LEAF


@dataclass
class JobTable:
    """Validated flat columns (numpy arrays, one entry per job) and one error slot per row.

    String columns are object arrays holding ``str`` or ``None``; numeric
    columns are float arrays with NaN where a value was not given and the
    field has no default of its own (it is filled in from the catalogues).
    A column is replaced, never written in place (a scenario assigns a new
    array), so :meth:`codes` can factorize each column array once.
    """

    columns: dict[str, np.ndarray]
    errors: np.ndarray
    failed: np.ndarray | None = None
    _codes: dict[str, tuple[np.ndarray, np.ndarray, list]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.failed is None:
            self.failed = np.fromiter((e is not None for e in self.errors), bool, len(self.errors))

    def __len__(self) -> int:
        return len(self.errors)

    @property
    def ok(self) -> np.ndarray:
        return ~self.failed

    def fail(self, mask: np.ndarray, message: Any) -> None:
        """Record ``message`` (a string, or a callable of the row index) on rows of ``mask`` still without an error."""
        rows = np.flatnonzero(mask & ~self.failed)
        if callable(message):
            for row in rows:
                self.errors[row] = message(row)
        else:
            self.errors[rows] = message
        self.failed[rows] = True

    def codes(self, leaf: str) -> tuple[np.ndarray, list]:
        """:func:`factorize` of the column ``leaf``, computed once per column array.

        Resolution, features, domain checks and calibration bins all ask for
        the same text columns; a million-job table factorizes each once.
        """
        values = self.columns[leaf]
        cached = self._codes.get(leaf)
        if cached is None or cached[0] is not values:
            cached = self._codes[leaf] = (values, *factorize(values))
        return cached[1], cached[2]

    def map_column(self, leaf: str, mapping: dict[Any, Any], default: Any, dtype: Any = float) -> np.ndarray:
        """:func:`map_values` of the column ``leaf``, on its cached codes."""
        codes, uniques = self.codes(leaf)
        return np.array([mapping.get(u, default) for u in uniques] or [default], dtype)[codes]

    def copy(self) -> "JobTable":
        """A table whose columns and errors can change without touching this one's.

        Columns are replaced, never written in place, so the copy shares the
        column arrays (and their codes) until it replaces them.
        """
        return JobTable(dict(self.columns), self.errors.copy(), self.failed.copy(), dict(self._codes))


def is_missing(values: np.ndarray) -> np.ndarray:
    """True where a value was not given: None, NaN or an empty string."""
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "iub":
        return np.zeros(len(values), bool)
    if len(values) <= 1000 and "pandas" not in sys.modules:  # pandas stays off the single-job path
        return np.fromiter(
            (v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()) for v in values),
            bool,
            len(values),
        )
    import pandas as pd

    # None and NaN in C; only the values left are looked at one by one, for blank strings.
    missing = np.asarray(pd.isna(values), bool)
    given = np.flatnonzero(~missing)
    if len(given):
        blank = np.fromiter((isinstance(v, str) and not v.strip() for v in values[given]), bool, len(given))
        missing[given[blank]] = True
    return missing


def _as_float(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numeric view of a column and a mask of entries that are not numbers at all (text, and booleans:
    a Parquet ``true`` in a count is not the number 1)."""
    if values.dtype.kind == "b":
        return np.full(len(values), np.nan), np.ones(len(values), bool)
    if values.dtype.kind in "fiu":
        return values.astype(float), np.zeros(len(values), bool)
    if values.dtype == object and len(values):
        booleans = np.fromiter((isinstance(v, (bool, np.bool_)) for v in values), bool, len(values))
        if booleans.any():
            numbers, bad = _as_float(np.where(booleans, None, values))
            return np.where(booleans, np.nan, numbers), bad | booleans
    try:
        return values.astype(float), np.zeros(len(values), bool)
    except (TypeError, ValueError, OverflowError):
        out = np.full(len(values), np.nan)
        bad = np.zeros(len(values), bool)
        for i, v in enumerate(values):
            try:
                out[i] = float(v)
            except (TypeError, ValueError, OverflowError):  # text, or an integer beyond float range
                bad[i] = True
        return out, bad


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds, for messages ("-1.0", not "np.float64(-1.0)")."""
    return value.item() if isinstance(value, np.generic) else value


def bound_text(rule: Field) -> str:
    what = "a whole number" if rule.kind == "int" else "a finite number"
    upper = "" if rule.upper is None else f"{rule.upper:.0f}" if rule.upper < 1e9 else f"{rule.upper:g}"
    if rule.lower is not None and rule.upper is not None and rule.lower_inclusive:
        return f"allowed: {what} from {rule.lower:g} to {upper}"
    if rule.lower is not None and rule.upper is not None:
        return f"allowed: {what} > {rule.lower:g} and <= {upper}"
    if rule.lower is not None:
        return f"allowed: {what} {'>=' if rule.lower_inclusive else '>'} {rule.lower:g}"
    return f"allowed: {what}"


def check_column(table: JobTable, rule: Field, raw: np.ndarray) -> np.ndarray:
    if rule.kind == "str":
        return _check_text_column(table, rule, raw)[0]
    if rule.kind == "bool":
        return _check_bool_column(table, rule, raw)
    missing = is_missing(raw)
    if rule.required:
        table.fail(missing, str(SpecError(rule.path, MISSING, "this field is required")))
    numbers, not_numeric = _as_float(raw)
    not_numeric &= ~missing
    bad = not_numeric | (~missing & ~np.isfinite(numbers))
    if rule.kind == "int":
        with np.errstate(invalid="ignore"):
            bad |= ~missing & np.isfinite(numbers) & (numbers != np.round(numbers))
    if rule.lower is not None:
        with np.errstate(invalid="ignore"):
            below = numbers < rule.lower if rule.lower_inclusive else numbers <= rule.lower
        bad |= ~missing & below
    if rule.upper is not None:
        with np.errstate(invalid="ignore"):
            bad |= ~missing & (numbers > rule.upper)
    table.fail(bad, lambda i: str(SpecError(rule.path, _plain(raw[i]), bound_text(rule))))
    numbers = np.where(bad, np.nan, numbers)
    if rule.default is not None:
        numbers = np.where(missing, float(rule.default), numbers)
    return numbers


_BOOLEANS = {"true": 1.0, "false": 0.0, "1": 1.0, "0": 0.0, "1.0": 1.0, "0.0": 0.0}


def _check_bool_column(table: JobTable, rule: Field, raw: np.ndarray) -> np.ndarray:
    """Booleans as 1.0 / 0.0 (NaN where not given): true/false, 1/0, in any case."""
    missing = is_missing(raw)
    values = np.full(len(raw), np.nan)
    for i, value in enumerate(raw):
        if missing[i]:
            continue
        number = _BOOLEANS.get(str(value).strip().lower())
        if number is None:
            table.fail(np.arange(len(raw)) == i, str(SpecError(rule.path, _plain(value), "allowed: true or false")))
        else:
            values[i] = number
    return values


def _check_text_column(table: JobTable, rule: Field, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """Text columns are judged once per distinct value, then mapped back to the rows.

    Returns the checked column with its codes and distinct values, as
    :func:`factorize` of it would give them (two raw spellings of one name
    share a code).
    """
    codes, uniques = factorize(raw)
    values = np.empty(len(uniques), object)
    messages: list[str | None] = [None] * len(uniques)
    for u, value in enumerate(uniques):
        if value is None or (isinstance(value, float) and math.isnan(value)) or not str(value).strip():
            values[u] = rule.default
            if rule.required:
                messages[u] = str(SpecError(rule.path, MISSING, "this field is required"))
            continue
        text = str(value).strip()
        if rule.allowed is not None:
            if text.lower() in rule.allowed:
                text = text.lower()
            else:
                messages[u] = str(SpecError(rule.path, text, f"allowed: {', '.join(rule.allowed)}"))
        values[u] = text
    for u, message in enumerate(messages):
        if message is not None:
            table.fail(codes == u, message)
    checked_codes, checked = factorize(values)
    return values[codes], checked_codes[codes], checked


def validate_columns(raw: Mapping[str, Sequence[Any]], n_rows: int | None = None) -> JobTable:
    """Check every known column against the job spec's rules and fill plain defaults.

    Unknown columns are ignored here (a fleet may carry its own, which the
    caller passes through); missing columns count as all-missing.
    """
    if n_rows is None:
        n_rows = len(next(iter(raw.values()))) if raw else 0
    table = JobTable({}, np.full(n_rows, None, object), np.zeros(n_rows, bool))
    for leaf, rule in RULES.items():
        column = raw.get(leaf)
        values = np.full(n_rows, None, object) if column is None else np.asarray(column)
        if rule.kind == "str":  # the codes found while checking serve every later look-up
            checked, codes, uniques = _check_text_column(table, rule, values)
            table.columns[leaf] = checked
            table._codes[leaf] = (checked, codes, uniques)
        else:
            table.columns[leaf] = check_column(table, rule, values)
    return table


def map_values(values: np.ndarray, mapping: dict[Any, Any], default: Any, dtype: Any = float) -> np.ndarray:
    """``mapping[value]`` for every entry of a column, looked up once per distinct value
    (:meth:`JobTable.map_column` for a table's column)."""
    codes, uniques = factorize(values)
    return np.array([mapping.get(u, default) for u in uniques] or [default], dtype)[codes]


def table_from_rows(rows: Sequence[Mapping[str, Any]]) -> JobTable:
    """Validate a few flat rows (dicts keyed by leaf name)."""
    raw = {leaf: np.array([row.get(leaf) for row in rows], object) for leaf in FLAT_FIELDS}
    return validate_columns(raw, len(rows))


def factorize(values: np.ndarray) -> tuple[np.ndarray, list]:
    """Integer codes and the distinct values of a column (missing values kept as values).

    Checks and catalogue look-ups run once per distinct value, not once per
    row. Large columns use pandas' hash-based factorize; a few rows (one job)
    a plain dict, which keeps pandas off the single-job path.
    """
    if len(values) > 1000 or "pandas" in sys.modules:
        import pandas as pd

        # Missing values (None, NaN) get pandas' sentinel code -1 and become one
        # None value at the end, as the small-table path keeps them.
        values = np.asarray(values)
        # Numbers hash as numbers (NaN is missing there too); only text and mixed columns go as objects.
        codes, uniques = pd.factorize(values if values.dtype.kind in "biuf" else values.astype(object))
        codes, uniques = np.asarray(codes), list(uniques)
        missing = codes < 0
        if missing.any():
            codes = np.where(missing, len(uniques), codes)
            uniques.append(None)
        return codes, uniques
    seen: dict[Any, int] = {}
    codes = np.empty(len(values), int)
    for i, value in enumerate(values):
        codes[i] = seen.setdefault(None if _is_nan(value) else value, len(seen))
    return codes, list(seen)


def _is_nan(value: Any) -> bool:
    """None, or a float NaN of any kind (pandas turns missing text into NaN)."""
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))
