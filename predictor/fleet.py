"""Score a whole fleet of jobs: every row predicted, every row kept, output written atomically.

A fleet is a table (Parquet or CSV) with the flat job columns of
:mod:`features.jobspec`; other columns (job ids, owners, GPU-hours) pass
through untouched, except columns named like a prediction column, which a
fresh scoring replaces. Rows come out in the order they went in; a row that
breaks a rule keeps its place with its message in ``error`` and NaN
predictions.

:func:`score_configs` is the one scoring function: it predicts each distinct
job configuration once. The local engine hands it every distinct configuration
of the whole fleet and spreads the answers over the rows chunk by chunk; the
Dask engine calls :func:`score_frame` (the same, for one frame) on every
partition. A fleet where many jobs look alike costs what its distinct
configurations cost; a row's predictions depend only on its own job columns,
so the result is the same as scoring row by row.

Output columns:

* ``step_time_s`` (and ``lower_s``/``upper_s`` when a learned model gives
  intervals), ``throughput_samples_per_s`` (global batch / step time),
  ``io_s``, ``compute_s``, ``memory_s``, ``comm_s``, ``bottleneck``,
  ``bottleneck_link``, ``total_gpus``;
* with a scenario: ``target_step_time_s``, ``speedup`` (baseline / target
  time; ``speedup_lower``, ``speedup_upper``, ``p_speedup_gt_1`` with a
  learned model), ``target_bottleneck``, ``target_total_gpus``; a row whose
  target fails (say, ``allreduce-nvlink`` on a GPU without NVLink) keeps its
  baseline and gets NaN here, with the reason in ``error``;
* ``extrapolation``: with a learned model, why a job lies outside its
  training data (its interval is then the pooled one);
* ``error``: missing where the row is fine.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from features import scenarios
from features.analytical import COMPONENTS
from features.errors import SpecError
from features.hardware import hardware_catalog
from features.fields import FLAT_FIELDS
from features.table import RULES, JobTable, check_column, validate_columns

#: Job columns that decide a prediction (the job's name and measured time do not).
SCORED_FIELDS = tuple(leaf for leaf in FLAT_FIELDS if leaf not in ("name", "measured_step_time_s"))

BASELINE_COLUMNS = (
    "step_time_s",
    "lower_s",
    "upper_s",
    "throughput_samples_per_s",
    "io_s",
    "compute_s",
    "memory_s",
    "comm_s",
    "bottleneck",
    "bottleneck_link",
    "total_gpus",
)
SCENARIO_COLUMNS = (
    "target_step_time_s",
    "speedup",
    "speedup_lower",
    "speedup_upper",
    "p_speedup_gt_1",
    "target_bottleneck",
    "target_total_gpus",
)
#: Every column a scoring may write; input columns with these names are replaced.
OUTPUT_COLUMNS = (*BASELINE_COLUMNS, *SCENARIO_COLUMNS, "extrapolation", "error")

DEFAULT_CHUNK_ROWS = 200_000
FAN_IN_SUFFIX = " (parameter-server fan-in)"

FLEET_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


# -- reading -----------------------------------------------------------------


def fleet_format(path: Path, field: str) -> str:
    """``parquet`` or ``csv`` from the file name; anything else is a ``SpecError``."""
    kind = FLEET_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise SpecError(field, str(path), "allowed: a .parquet (or .pq) or .csv file")
    return kind


def read_fleet(path: str | Path) -> pd.DataFrame:
    """The fleet table at ``path`` (Parquet or CSV), checked to have at least a ``gpu`` column."""
    path = Path(path)
    kind = fleet_format(path, "--jobs")
    if not path.is_file():
        raise SpecError("--jobs", str(path), "no such file")
    try:
        if kind == "parquet":
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path, engine="pyarrow")
    except Exception as exc:  # pyarrow and pandas raise many types for a file they cannot parse
        raise SpecError("--jobs", str(path), f"cannot read it as {kind.upper()} ({type(exc).__name__}: {_first_line(exc)})") from None
    check_fleet_columns(frame.columns, path)
    return frame


def check_fleet_columns(columns: Iterable[str], path: str | Path) -> None:
    """A fleet needs a ``gpu`` column; any other job column may be left out (its default applies)."""
    columns = list(columns)
    if "gpu" not in columns:
        shown = ", ".join(map(str, columns[:12])) + (" ..." if len(columns) > 12 else "")
        raise SpecError("--jobs", str(path), f"a fleet table needs a gpu column; its columns: {shown or 'none'}")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


# -- scoring -----------------------------------------------------------------


@lru_cache(maxsize=8)
def predictor_for(overlap: str = "none", model: str = "default", confidence_level: float = 0.9):
    """The predictor a scoring uses, built once per process (a Dask worker loads the model once).

    ``model`` is a model directory, ``"default"`` (the shipped model, or the
    analytical model alone when there is none) or ``"none"``.
    """
    from predictor.api import Predictor

    return Predictor(model=None if model == "none" else model, overlap=overlap, confidence_level=confidence_level)


@lru_cache(maxsize=1)
def _link_categories() -> tuple[str, ...]:
    names = [link.name for link in hardware_catalog().links]
    return (*names, *(name + FAN_IN_SUFFIX for name in names))


def _column_codes(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of a column and its distinct values (None for missing), as a plain array."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy().astype(np.int64)
        categories = np.asarray(series.cat.categories, dtype=object)
        return np.where(codes < 0, len(categories), codes), np.append(categories, None)
    codes, uniques = pd.factorize(series, use_na_sentinel=False)
    return np.asarray(codes, np.int64), _plain_values(uniques)


def _plain_values(uniques: Any) -> np.ndarray:
    """Distinct values as float (numbers) or object (anything else, None for missing) numpy arrays."""
    if isinstance(uniques, np.ndarray) and uniques.dtype.kind in "fiub":
        return uniques.astype(float)
    array = pd.array(uniques)
    if pd.api.types.is_numeric_dtype(array.dtype) or pd.api.types.is_bool_dtype(array.dtype):
        return array.to_numpy(dtype=float, na_value=np.nan)
    values = np.asarray(array.to_numpy(dtype=object, na_value=None), dtype=object)
    values[pd.isna(values)] = None
    return values


def _distinct_rows(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per row, the index of its distinct job configuration, and those configurations' columns.

    Each column's codes are combined into one integer key (mixed radix,
    re-compacted before it could overflow) and the key factorized once.
    """
    n = len(frame)
    per_column = {leaf: _column_codes(frame[leaf]) for leaf in columns}
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


def _categorical(values: np.ndarray, categories: Sequence[str]) -> pd.Categorical:
    """Labels (None for missing) as a categorical with fixed categories.

    Fixed categories keep every chunk and partition of one fleet the same
    dtype; a label outside them (it should not happen) is added, not lost.
    """
    codes, labels = pd.factorize(np.asarray(values, dtype=object))  # None -> -1
    extra = sorted(set(labels) - set(categories))
    position = {name: i for i, name in enumerate([*categories, *extra])}
    lookup = np.array([position[label] for label in labels] + [-1], np.int16)
    return pd.Categorical.from_codes(lookup[codes], categories=[*categories, *extra])


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


def score_configs(
    distinct: dict[str, np.ndarray],
    k: int,
    steps: Sequence,
    predictor,
    explain: bool | str = False,
) -> ConfigScores:
    """Predictions for ``k`` job configurations given column by column (see :func:`score_frame`)."""
    table = validate_columns(distinct, k)
    if steps:
        result = predictor.speedup_table(table, steps)
        base, target, errors = result.baseline, result.target, result.errors
    else:
        base, target, errors = predictor.predict_table(table), None, table.errors

    b = base.breakdown
    numbers: dict[str, Any] = {"step_time_s": base.step_time_s}
    if base.lower_s is not None:
        numbers.update(lower_s=base.lower_s, upper_s=base.upper_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        numbers["throughput_samples_per_s"] = base.global_batch_size / base.step_time_s
    numbers.update(io_s=b.io_s, compute_s=b.compute_s, memory_s=b.memory_s, comm_s=b.comm_s)
    labels: dict[str, tuple[np.ndarray, Sequence[str]]] = {
        "bottleneck": (base.bottleneck, COMPONENTS),
        "bottleneck_link": (base.bottleneck_link, _link_categories()),
    }
    numbers["total_gpus"] = base.resolved.total_gpus
    if target is not None:
        numbers["target_step_time_s"] = target.step_time_s
        numbers["speedup"] = result.speedup
        for name in ("speedup_lower", "speedup_upper", "p_speedup_gt_1"):
            if getattr(result, name) is not None:
                numbers[name] = getattr(result, name)
        labels["target_bottleneck"] = (target.bottleneck, COMPONENTS)
        numbers["target_total_gpus"] = target.resolved.total_gpus

    columns: dict[str, Any] = {name: np.asarray(values, float) for name, values in numbers.items()}
    for name, (values, categories) in labels.items():
        columns[name] = _categorical(values, categories)
    columns = {name: columns[name] for name in OUTPUT_COLUMNS if name in columns}
    if explain:
        columns.update(_explanation_columns(predictor, base, "treeshap" if explain is True else explain))
    extrapolation = None if base.extrapolation is None else np.asarray(base.extrapolation, dtype=object)
    return ConfigScores(columns, extrapolation, np.asarray(errors, dtype=object))


def score_frame(
    frame: pd.DataFrame,
    to: Sequence[str] = (),
    overlap: str = "none",
    model: str = "default",
    confidence_level: float = 0.9,
    explain: bool | str = False,
) -> pd.DataFrame:
    """Predictions for every row of a fleet frame: its columns, then the prediction columns.

    ``to`` is a scenario (``--to`` values, applied in order); ``overlap``,
    ``model`` and ``confidence_level`` choose the predictor (see
    :func:`predictor_for`). Rows, order and index are kept. The same function
    scores a Dask partition; the local engine scores a whole fleet's distinct
    configurations the same way. With ``explain`` and a learned model, each
    job also gets its residual's factor per bottleneck family
    (``why_<family>``, see :mod:`predictor.explain`) and the family that moves
    it most (``why_dominant``); ``explain`` is True or "treeshap" for exact
    TreeSHAP, "saabas" for XGBoost's approximate attributions.
    """
    steps = scenarios.parse(list(to)) if to else []
    predictor = predictor_for(overlap, model, confidence_level)
    explain = explain if predictor.method == "learned" else False
    if len(frame) == 0:
        return _empty_scored(frame, learned=predictor.method == "learned", scenario=bool(steps), explain=explain)
    inverse, distinct, k = distinct_configs(frame)
    return score_configs(distinct, k, steps, predictor, explain).rows(frame, inverse)


def family_column(family: str) -> str:
    """The fleet column of a bottleneck family's factor ("network communication" -> "why_network_communication")."""
    return "why_" + "".join(c if c.isalnum() else "_" for c in family).replace("__", "_")


def _explanation_columns(predictor, base, method: str) -> dict[str, Any]:
    """Per configuration: each family's factor on the analytical time and the dominant family."""
    from features.build import FAMILIES
    from predictor.explain import family_contributions

    ok = base.resolved.ok
    contributions = np.full((len(ok), len(FAMILIES)), np.nan)
    if ok.any():
        families, _ = family_contributions(predictor, base, method)
        contributions[ok] = families[ok]
    columns: dict[str, Any] = {family_column(f): np.exp(contributions[:, i]) for i, f in enumerate(FAMILIES)}
    dominant = np.where(ok, np.argmax(np.abs(np.nan_to_num(contributions)), axis=1), -1)
    columns["why_dominant"] = pd.Categorical.from_codes(dominant.astype(np.int16), categories=list(FAMILIES))
    return columns


def _empty_scored(frame: pd.DataFrame, learned: bool, scenario: bool, explain: bool = False) -> pd.DataFrame:
    """A scored frame without rows, with the columns and types a non-empty one has (a Dask ``meta``)."""
    labels = {"bottleneck": COMPONENTS, "bottleneck_link": _link_categories(), "target_bottleneck": COMPONENTS}
    text = {"extrapolation", "error"}
    names = [*BASELINE_COLUMNS, *(SCENARIO_COLUMNS if scenario else ()), "extrapolation", "error"]
    if not learned:
        names = [c for c in names if c not in ("lower_s", "upper_s", "speedup_lower", "speedup_upper", "p_speedup_gt_1", "extrapolation")]
    if explain:
        from features.build import FAMILIES

        names += [family_column(f) for f in FAMILIES] + ["why_dominant"]
        labels["why_dominant"] = FAMILIES
    out: dict[str, Any] = {}
    for name in names:
        if name in labels:
            out[name] = pd.Categorical.from_codes(np.zeros(0, np.int16), categories=list(labels[name]))
        elif name in text:
            out[name] = pd.array([], dtype="str")
        else:
            out[name] = np.zeros(0)
    kept = frame.drop(columns=[c for c in frame.columns if c in OUTPUT_COLUMNS])
    return pd.concat([kept, pd.DataFrame(out, index=frame.index)], axis=1)


def iter_scored(
    frame: pd.DataFrame,
    to: Sequence[str] = (),
    overlap: str = "none",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool | None = None,
    model: str = "default",
    confidence_level: float = 0.9,
    explain: bool | str = False,
) -> Iterator[pd.DataFrame]:
    """The local engine: the fleet's rows scored in consecutive chunks of ``chunk_rows`` rows.

    Each distinct job configuration of the whole fleet is scored once (in
    batches of ``chunk_rows`` configurations), as :func:`score_frame` scores
    them, and the chunks spread those predictions over their rows. A progress
    bar (stderr) shows when the fleet spans more than one chunk, unless
    ``progress`` says otherwise.
    """
    from tqdm import tqdm

    n = len(frame)
    steps = scenarios.parse(list(to)) if to else []
    predictor = predictor_for(overlap, model, confidence_level)
    if n == 0:
        yield score_frame(frame, to, overlap, model, confidence_level, explain)
        return
    explain = explain if predictor.method == "learned" else False
    inverse, distinct, k = distinct_configs(frame)
    show = n > chunk_rows if progress is None else progress
    parts = []
    with tqdm(total=k, unit="configs", unit_scale=True, disable=not show, desc="scoring", leave=False) as bar:
        for start in range(0, k, chunk_rows):
            batch = {leaf: values[start : start + chunk_rows] for leaf, values in distinct.items()}
            size = min(chunk_rows, k - start)
            parts.append(score_configs(batch, size, steps, predictor, explain))
            bar.update(size)
    scores = ConfigScores.concat(parts)
    del parts
    for start in range(0, n, chunk_rows):
        yield scores.rows(frame.iloc[start : start + chunk_rows], inverse[start : start + chunk_rows])


def score_fleet(
    frame: pd.DataFrame,
    to: Sequence[str] = (),
    overlap: str = "none",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    progress: bool | None = None,
    model: str = "default",
    confidence_level: float = 0.9,
    explain: bool | str = False,
) -> pd.DataFrame:
    """Every row of ``frame`` scored in process (see :func:`iter_scored`), as one frame."""
    return pd.concat(list(iter_scored(frame, to, overlap, chunk_rows, progress, model, confidence_level, explain)))


# -- Dask ----------------------------------------------------------------------


def read_fleet_dask(path: str | Path, blocksize: str | int | None = "default"):
    """The fleet as a Dask DataFrame: Parquet one partition per row group, CSV per ``blocksize`` bytes.

    Text columns keep pandas' own string type, as the local engine reads
    them. Parquet stores column types; a CSV's are guessed from its first
    block, so Parquet is the safer input for large fleets.
    """
    import dask
    import dask.dataframe as dd

    path = Path(path)
    kind = fleet_format(path, "--jobs")
    if not path.exists():
        raise SpecError("--jobs", str(path), "no such file")
    try:
        with dask.config.set({"dataframe.convert-string": False}):
            if kind == "parquet":
                frame = dd.read_parquet(str(path), split_row_groups=True)
            else:
                frame = dd.read_csv(str(path), blocksize=blocksize)
    except Exception as exc:
        raise SpecError("--jobs", str(path), f"cannot read it as {kind.upper()} ({type(exc).__name__}: {_first_line(exc)})") from None
    check_fleet_columns(frame.columns, path)
    return frame


def iter_scored_dask(
    path: str | Path,
    to: Sequence[str] = (),
    overlap: str = "none",
    scheduler: str | None = None,
    n_workers: int = 2,
    progress: bool | None = None,
    model: str = "default",
    confidence_level: float = 0.9,
    explain: bool | str = False,
) -> Iterator[pd.DataFrame]:
    """The Dask engine: :func:`score_frame` on every partition, handed back in order.

    Runs on the scheduler at ``scheduler`` or, by default, on a local cluster
    of ``n_workers`` worker processes. Partitions are scored in parallel and
    fetched one at a time, so the caller holds one partition at once.
    """
    from dask.distributed import Client, LocalCluster
    from tqdm import tqdm

    fleet = read_fleet_dask(path)
    meta = score_frame(fleet._meta, to, overlap, model, confidence_level, explain)
    scored = fleet.map_partitions(score_frame, list(to), overlap, model, confidence_level, explain, meta=meta)
    if scheduler:
        cluster = None
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        parts = scored.to_delayed()
        futures = client.compute(parts)
        show = len(futures) > 1 if progress is None else progress
        with tqdm(total=len(futures), unit="partitions", disable=not show, desc="scoring", leave=False) as bar:
            for future in futures:
                try:
                    part = future.result()
                except ValueError as exc:
                    if "Mismatched dtypes" not in str(exc):
                        raise
                    raise SpecError("--jobs", str(path), "column types differ between blocks of the CSV; convert it to Parquet") from None
                future.release()
                bar.update(1)
                yield part
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def score_fleet_dask(
    path: str | Path,
    to: Sequence[str] = (),
    overlap: str = "none",
    scheduler: str | None = None,
    n_workers: int = 2,
    model: str = "default",
    confidence_level: float = 0.9,
    explain: bool | str = False,
) -> pd.DataFrame:
    """Every row of the fleet at ``path`` scored with Dask, as one frame (index 0..n-1)."""
    parts = iter_scored_dask(path, to, overlap, scheduler, n_workers, None, model, confidence_level, explain)
    return pd.concat(list(parts)).reset_index(drop=True)


# -- writing -------------------------------------------------------------------


def write_atomic(chunks: Iterable[pd.DataFrame] | pd.DataFrame, path: str | Path, row_group_rows: int | None = None) -> int:
    """Write frames (one or a stream of chunks) to ``path`` as one Parquet or CSV file; the row count.

    Everything goes to a temporary file in the same directory, which is
    flushed, fsynced and then renamed over ``path`` (``os.replace``, atomic on
    POSIX): an interrupted run leaves the old file as it was and no partial
    file. Parquet row groups follow the chunks (or ``row_group_rows``).
    """
    path = Path(path)
    kind = fleet_format(path, "--out")
    if isinstance(chunks, pd.DataFrame):
        frame = chunks
        step = row_group_rows or max(len(frame), 1)
        chunks = (frame.iloc[i : i + step] for i in range(0, max(len(frame), 1), step))
    if not path.parent.is_dir():
        raise SpecError("--out", str(path), f"the directory {path.parent} does not exist")
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    rows = 0
    try:
        with os.fdopen(descriptor, "wb") as handle:
            rows = _write_parquet(chunks, handle) if kind == "parquet" else _write_csv(chunks, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return rows


def _write_parquet(chunks: Iterable[pd.DataFrame], handle) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from concurrent.futures import ThreadPoolExecutor

    writer = None
    schema = None
    rows = 0
    pending = None
    # pyarrow encodes and compresses without the GIL: one chunk is written
    # while the next is scored.
    with ThreadPoolExecutor(max_workers=1) as background:
        try:
            for chunk in chunks:
                table = pa.Table.from_pandas(chunk, preserve_index=False)
                if schema is None:
                    schema = table.schema
                    writer = pq.ParquetWriter(handle, schema)
                elif not table.schema.equals(schema, check_metadata=False):
                    table = table.cast(schema)
                if pending is not None:
                    pending.result()
                pending = background.submit(writer.write_table, table.replace_schema_metadata(schema.metadata))
                rows += len(chunk)
            if pending is not None:
                pending.result()
        finally:
            if pending is not None:
                pending.exception()  # wait: the writer must be idle before it is closed
            if writer is not None:
                writer.close()
    if writer is None:
        raise ValueError("no rows to write")
    return rows


def _write_csv(chunks: Iterable[pd.DataFrame], handle) -> int:
    import io

    text = io.TextIOWrapper(handle, encoding="utf-8", newline="", write_through=True)
    rows = 0
    header = True
    for chunk in chunks:
        chunk.to_csv(text, header=header, index=False)
        header = False
        rows += len(chunk)
    text.flush()
    text.detach()
    return rows


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


# -- summary -------------------------------------------------------------------


@dataclass(frozen=True)
class FleetSummary:
    """What a scoring run found, for the terminal."""

    rows: int
    failed_rows: int
    error_rows: int
    first_errors: tuple[tuple[int, str], ...]
    median_step_time_s: float
    scenario: tuple[str, ...]
    scored_speedups: int
    not_applicable: int
    median_speedup: float
    mean_speedup: float
    share_faster: float
    share_slower: float
    overlap: str
    method: str = "analytical"

    def lines(self) -> list[str]:
        out = [
            f"scored {self.rows:,} jobs ({_METHOD_TEXT.get(self.method, self.method)}, {_OVERLAP_TEXT[self.overlap]}): "
            f"{self.rows - self.failed_rows:,} predicted, {self.failed_rows:,} failed validation",
        ]
        if np.isfinite(self.median_step_time_s):
            out.append(f"median step time: {self.median_step_time_s:.4g} s")
        if self.scenario:
            what = " + ".join(self.scenario)
            if self.scored_speedups:
                out.append(
                    f"{what}: {self.scored_speedups:,} jobs, median speedup {self.median_speedup:.2f}x "
                    f"(mean {self.mean_speedup:.2f}x), {self.share_faster:.0%} faster, {self.share_slower:.0%} slower"
                )
            else:
                out.append(f"{what}: no job could be scored under this scenario")
            if self.not_applicable:
                out.append(f"{what}: does not apply to {self.not_applicable:,} predicted jobs (reason in the error column)")
        if self.first_errors:
            out.append(f"rows with an error: {self.error_rows:,}; the first:")
        for row, message in self.first_errors:
            out.append(f"  row {row}: {message}")
        return out


_OVERLAP_TEXT = {"none": "PAI additive", "overlapped": "overlapped", "roofline": "roofline physics"}
_METHOD_TEXT = {"analytical": "analytical model", "learned": "analytical model x learned residual"}


def summarize(scored: pd.DataFrame, to: Sequence[str] = (), overlap: str = "none", first: int = 5, method: str = "analytical") -> FleetSummary:
    """Rows, failures (the first few errors with their row numbers), median step time and the speedup spread."""
    errors = scored["error"]
    has_error = errors.notna().to_numpy()
    positions = np.flatnonzero(has_error)[:first]
    first_errors = tuple((int(i), str(errors.iloc[i])) for i in positions)
    step = scored["step_time_s"].to_numpy(float)
    predicted = np.isfinite(step)
    speedup = scored["speedup"].to_numpy(float) if "speedup" in scored else np.full(len(scored), np.nan)
    scored_speedup = speedup[np.isfinite(speedup)]
    some = len(scored_speedup) > 0
    return FleetSummary(
        rows=len(scored),
        failed_rows=int((~predicted).sum()),
        error_rows=int(has_error.sum()),
        first_errors=first_errors,
        median_step_time_s=float(np.median(step[predicted])) if predicted.any() else float("nan"),
        scenario=tuple(to),
        scored_speedups=len(scored_speedup),
        not_applicable=int((predicted & ~np.isfinite(speedup)).sum()) if to else 0,
        median_speedup=float(np.median(scored_speedup)) if some else float("nan"),
        mean_speedup=float(np.mean(scored_speedup)) if some else float("nan"),
        share_faster=float(np.mean(scored_speedup > 1.0)) if some else float("nan"),
        share_slower=float(np.mean(scored_speedup < 1.0)) if some else float("nan"),
        overlap=overlap,
        method=method,
    )
