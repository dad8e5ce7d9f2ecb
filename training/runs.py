"""The run table: measured training runs, one row per measured configuration.

A run row is a flattened job (the columns of :data:`features.jobspec.FLAT_FIELDS`,
with ``measured_step_time_s`` the median step time in seconds) plus where the
measurement came from:

* ``source`` (e.g. ``lambdal/deeplearning-benchmark``, ``testbed``) and
  ``source_id``, the row's stable id in that source; together they are unique.
* ``system`` (machine or system name), ``collected_at`` (ISO date), ``host``,
  ``software`` (versions).
* ``repeats``: timed steps or runs behind the median; ``spread_rel``:
  interquartile range / median (NaN when unknown).
* optional ``measured_compute_s`` and ``measured_comm_s``: the split of the
  step the processes themselves observed, in seconds.

:func:`load_runs` reads CSV or Parquet files and judges every row by the job
spec's rules (:mod:`features.table`, :mod:`features.resolve`: names resolve in
the catalogues, links fit the GPU, parallelism fits the node) and the run
rules below; a row that fails is kept, with its first problem as ``reason``,
in the rejected table. Nothing is dropped silently. All checks are column
operations (catalogue names are looked up once per distinct value), so a
table of 10^5 rows loads in about a second.

Run rules on top of the job rules: the configuration must be stated, not
defaulted (model, batch_size_per_gpu, precision, framework, architecture,
workers, gpus_per_worker, gpu and measured_step_time_s are required);
``gpus_per_worker <= gpus_per_node``; single and allreduce-local runs use one
node; ``repeats`` is a whole number >= 1; ``spread_rel``,
``measured_compute_s`` and ``measured_comm_s`` are finite and >= 0;
``collected_at`` parses as an ISO date; (source, source_id) is unique; a
GPU run's step is no shorter than its arithmetic at the GPU's dense peak
(:func:`features.physics.arithmetic_floor_s`: a faster step was measured on
another precision, batch or GPU count than the row states); and a
data-parallel run on several GPUs is no faster per step than the same job
(every job column but the GPU count and how the GPUs are joined, the same
source and software) on one GPU, beyond the spread between hosts
(:data:`ONE_GPU_STEP_SPREAD`, :func:`faster_than_one_gpu`): each GPU does the
one-GPU work at the same per-GPU batch, plus its share of the all-reduce.
Accepted rows carry catalogue names (``V100 16GB`` becomes ``V100-SXM2-16GB``)
and lower-case choices; values a row leaves empty stay empty (the job spec's
defaults apply when the row is used).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from features import physics
from features.errors import MISSING, SpecError
from features.hardware import HardwareCatalog
from features.fields import FLAT_FIELDS, field_path
from features.resolve import CatalogArrays, catalog_arrays, resolve
from features.table import RULES, validate_columns
from features.workloads import WorkloadCatalog

JOB_COLUMNS: tuple[str, ...] = tuple(FLAT_FIELDS)
PROVENANCE_COLUMNS = ("source", "source_id", "system", "collected_at", "host", "software", "repeats", "spread_rel")
MEASURED_SPLIT_COLUMNS = ("measured_compute_s", "measured_comm_s")
#: Every column of a run table, in the order files are written.
RUN_COLUMNS: tuple[str, ...] = JOB_COLUMNS + PROVENANCE_COLUMNS + MEASURED_SPLIT_COLUMNS

#: A measured run states these; the job spec's defaults do not stand in for them.
REQUIRED_VALUES = (
    "model", "batch_size_per_gpu", "precision", "framework", "architecture",
    "workers", "gpus_per_worker", "gpu", "measured_step_time_s", "source", "source_id",
)  # fmt: skip
#: Columns a run file must have (the others may be left out and count as empty).
REQUIRED_COLUMNS = REQUIRED_VALUES

TEXT_COLUMNS = tuple(c for c in JOB_COLUMNS if RULES[c].kind == "str") + (
    "source", "source_id", "system", "collected_at", "host", "software",
)  # fmt: skip
INT_COLUMNS = tuple(c for c in JOB_COLUMNS if RULES[c].kind == "int") + ("repeats",)
FLOAT_COLUMNS = tuple(c for c in RUN_COLUMNS if c not in TEXT_COLUMNS and c not in INT_COLUMNS)

#: Workload figures that stand in, for the check only, when a model is not yet in the catalogue.
_PLACEHOLDER_FIGURES = ("flops_per_sample", "param_count", "memory_bytes_per_sample", "input_bytes_per_sample")

_FIELD_OF_MESSAGE = re.compile(r"^unknown \w+ .*? at ([\w.]+);|^([\w.]+)(?::| is missing)")


@dataclass(frozen=True)
class LoadedRuns:
    """The outcome of loading run tables: accepted rows, rejected rows with a reason, and counts.

    ``accepted`` has exactly :data:`RUN_COLUMNS`. ``rejected`` holds the rows
    as read, plus ``reason`` (the row's first problem), ``source_file`` and
    ``source_row`` (0-based data row in that file).
    """

    accepted: pd.DataFrame
    rejected: pd.DataFrame

    @property
    def n_rows(self) -> int:
        return len(self.accepted) + len(self.rejected)

    @property
    def n_accepted(self) -> int:
        return len(self.accepted)

    @property
    def n_rejected(self) -> int:
        return len(self.rejected)

    def rejected_by_field(self) -> dict[str, int]:
        """How many rows were rejected, keyed by the field of their first problem."""
        return dict(Counter(reason_field(r) for r in self.rejected["reason"]).most_common())

    def counts(self) -> dict[str, object]:
        return {
            "rows": self.n_rows,
            "accepted": self.n_accepted,
            "rejected": self.n_rejected,
            "rejected_by_field": self.rejected_by_field(),
        }


def reason_field(reason: str) -> str:
    """The field a rejection message is about ("cluster.gpu", "source_id" ...)."""
    match = _FIELD_OF_MESSAGE.match(reason)
    if match is None:
        return "other"
    return match.group(1) or match.group(2)


def load_runs(
    paths: str | Path | Iterable[str | Path],
    *,
    hardware: HardwareCatalog | None = None,
    workloads: WorkloadCatalog | None = None,
) -> LoadedRuns:
    """Read run tables (``.csv`` or ``.parquet``) and judge every row.

    Several files are judged together, so a (source, source_id) repeated
    across files is caught. A file that cannot be a run table at all (unknown
    or missing columns, unreadable) raises ``SpecError``.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = []
    for path in paths:
        frame = read_run_file(path)
        frame.insert(0, "_source_row", np.arange(len(frame)))
        frame.insert(0, "_source_file", str(path))
        frames.append(frame)
    if not frames:
        return LoadedRuns(empty_run_table(), _empty_rejected())
    table = pd.concat(frames, ignore_index=True)
    result = validate_runs(table.drop(columns=["_source_file", "_source_row"]), hardware=hardware, workloads=workloads)
    rejected = result.rejected
    rows = rejected.pop("source_row").to_numpy()
    rejected["source_file"] = table["_source_file"].to_numpy()[rows]
    rejected["source_row"] = table["_source_row"].to_numpy()[rows]
    return LoadedRuns(result.accepted, rejected.reset_index(drop=True))


def read_run_file(path: str | Path) -> pd.DataFrame:
    """One run file as read (text columns as text), after checking its columns."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            header = pd.read_csv(path, nrows=0).columns
            frame = pd.read_csv(path, dtype={c: str for c in header if c in TEXT_COLUMNS}, keep_default_na=False, na_values=[""])
        elif suffix == ".parquet":
            frame = pd.read_parquet(path)
        else:
            raise SpecError("runs", str(path), "a run table is a .csv or .parquet file")
    except (OSError, ValueError) as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError("runs", str(path), f"cannot read it ({exc})") from None
    check_columns(frame.columns, str(path))
    return frame


def check_columns(columns: Iterable[str], where: str = "runs") -> None:
    """Raise ``SpecError`` when a table has columns a run table does not, or lacks required ones."""
    columns = list(columns)
    unknown = [c for c in columns if c not in RUN_COLUMNS]
    if unknown:
        raise SpecError(f"{where} columns", unknown, f"allowed: {', '.join(RUN_COLUMNS)}")
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise SpecError(f"{where} columns", MISSING, f"a run table needs {', '.join(missing)}")


def validate_runs(
    table: pd.DataFrame,
    *,
    hardware: HardwareCatalog | None = None,
    workloads: WorkloadCatalog | None = None,
    require_known_models: bool = True,
) -> LoadedRuns:
    """Judge every row of a run table (columns named as in :data:`RUN_COLUMNS`).

    With ``require_known_models=False`` a row whose model is not (yet) in the
    workload catalogue is checked for everything else; importers use this so
    that their output does not depend on how complete the catalogue is today.
    The rejected table has ``source_row`` (position in ``table``) and ``reason``.
    """
    check_columns(table.columns)
    table = table.reset_index(drop=True)
    n = len(table)
    cat = catalog_arrays(hardware, workloads)
    raw = {c: _column(table, c) for c in RUN_COLUMNS}
    missing = {c: _missing(raw[c]) for c in RUN_COLUMNS}

    job_raw = {c: raw[c] for c in JOB_COLUMNS}
    unknown_model = ~missing["model"] & ~_known_names(raw["model"], cat.workloads)
    if not require_known_models and unknown_model.any():
        for figure in _PLACEHOLDER_FIGURES:
            values = job_raw[figure].astype(object).copy()
            values[unknown_model & missing[figure]] = 1.0
            job_raw[figure] = values

    # An empty intra_node_link means the GPU's own; it is spelled out for the
    # check so that empty entries never reach the name look-up as NaN.
    job_raw["intra_node_link"] = _with_default_links(raw["gpu"], raw["intra_node_link"], missing["intra_node_link"], cat)
    jobs = validate_columns(job_raw, n)
    for column in REQUIRED_VALUES:
        where = field_path(column) if column in FLAT_FIELDS else column
        jobs.fail(missing[column], str(SpecError(where, MISSING, "a measured run states it")))
    _check_provenance(jobs, raw, missing)
    resolved = resolve(jobs, cat)
    _check_run_parallelism(jobs, missing)
    _check_arithmetic_floor(jobs, resolved, cat)
    _check_data_parallel_floor(jobs, raw, missing, resolved)
    _check_unique_ids(jobs, raw, missing)

    ok = jobs.ok
    rejected = table.loc[~ok].copy()
    rejected["source_row"] = np.flatnonzero(~ok)
    rejected["reason"] = jobs.errors[~ok].astype(str)
    accepted = _accepted_rows(raw, missing, jobs, resolved, cat, ok)
    return LoadedRuns(accepted, rejected.reset_index(drop=True))


def save_runs(table: pd.DataFrame, path: str | Path) -> Path:
    """Write a run table as CSV or Parquet (by extension), columns in :data:`RUN_COLUMNS` order.

    Columns the table lacks are written empty; a column that is not a run
    column raises ``SpecError`` rather than being dropped.
    """
    path = Path(path)
    extra = [c for c in table.columns if c not in RUN_COLUMNS]
    if extra:
        raise SpecError("run table columns", extra, f"allowed: {', '.join(RUN_COLUMNS)}")
    out = table.reindex(columns=list(RUN_COLUMNS))
    suffix = path.suffix.lower()
    if suffix == ".csv":
        out.to_csv(path, index=False)
    elif suffix == ".parquet":
        out.to_parquet(path, index=False)
    else:
        raise SpecError("--out", str(path), "write a .csv or .parquet file")
    return path


def empty_run_table() -> pd.DataFrame:
    """A run table with no rows and the run columns' types."""
    return _typed(pd.DataFrame({c: pd.Series([], dtype=object) for c in RUN_COLUMNS}))


def _empty_rejected() -> pd.DataFrame:
    return pd.DataFrame(columns=[*REQUIRED_COLUMNS, "reason", "source_file", "source_row"])


def _column(table: pd.DataFrame, column: str) -> np.ndarray:
    """A column as numpy: floats for numeric columns, objects (None for missing) otherwise."""
    if column not in table.columns:
        return np.full(len(table), None, object)
    series = table[column]
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        return series.to_numpy(dtype=float, na_value=np.nan)
    values = series.astype(object)
    return values.where(series.notna(), None).to_numpy()


def _missing(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return np.isnan(values)
    blank = np.char.str_len(np.char.strip(values.astype(str))) == 0
    return pd.isna(values) | blank


def _with_default_links(gpus: np.ndarray, links: np.ndarray, empty: np.ndarray, cat: CatalogArrays) -> np.ndarray:
    """The intra-node link column with empty entries replaced by each GPU's default link."""
    codes, uniques = pd.factorize(pd.Series(gpus, dtype=object), use_na_sentinel=False)
    defaults = []
    for gpu in uniques:
        device = cat.hardware.devices.find(str(gpu)) if isinstance(gpu, str) else None
        defaults.append(None if device is None else device.default_intra_node_link)
    filled = np.asarray(links, dtype=object).copy()
    filled[empty] = np.array(defaults + [None], object)[codes][empty]
    return filled


def _known_names(values: np.ndarray, workloads: WorkloadCatalog) -> np.ndarray:
    codes, uniques = pd.factorize(pd.Series(values, dtype=object), use_na_sentinel=False)
    known = np.array([u is not None and workloads.workloads.find(str(u)) is not None for u in uniques] or [False])
    return known[codes]


def _numbers(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numeric view of a column and a mask of given entries that are not numbers."""
    if values.dtype.kind == "f":
        return values, np.zeros(len(values), bool)
    numbers = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)
    return numbers, np.isnan(numbers) & ~_missing(values)


def _scalar(value):
    """A numpy scalar as the plain Python value, so messages read 0.5, not np.float64(0.5)."""
    return value.item() if isinstance(value, np.generic) else value


def _check_provenance(jobs, raw: dict[str, np.ndarray], missing: dict[str, np.ndarray]) -> None:
    repeats, not_number = _numbers(raw["repeats"])
    with np.errstate(invalid="ignore"):
        bad = not_number | (~missing["repeats"] & ~((repeats >= 1) & (repeats == np.round(repeats))))
    jobs.fail(bad, lambda i: str(SpecError("repeats", _scalar(raw["repeats"][i]), "allowed: a whole number >= 1, or empty")))
    for column in ("spread_rel", *MEASURED_SPLIT_COLUMNS):
        values, not_number = _numbers(raw[column])
        with np.errstate(invalid="ignore"):
            bad = not_number | (~missing[column] & ~(np.isfinite(values) & (values >= 0)))
        jobs.fail(bad, lambda i, c=column: str(SpecError(c, _scalar(raw[c][i]), "allowed: a finite number >= 0, or empty")))
    dates = pd.to_datetime(pd.Series(raw["collected_at"], dtype=object), errors="coerce", format="ISO8601", utc=True)
    jobs.fail(
        dates.isna().to_numpy() & ~missing["collected_at"],
        lambda i: str(SpecError("collected_at", raw["collected_at"][i], "allowed: an ISO date (2023-11-08), or empty")),
    )


def _check_run_parallelism(jobs, missing: dict[str, np.ndarray]) -> None:
    """A worker's GPUs sit in one node; single and allreduce-local jobs use one node."""
    cols = jobs.columns
    gpus_per_worker, gpus_per_node = cols["gpus_per_worker"], cols["gpus_per_node"]
    jobs.fail(
        gpus_per_worker > gpus_per_node,
        lambda i: str(SpecError(
            "parallelism.gpus_per_worker", int(gpus_per_worker[i]),
            f"a worker's GPUs sit in one node: at most cluster.gpus_per_node = {gpus_per_node[i]:.0f}",
        )),
    )  # fmt: skip
    one_node = np.isin(cols["architecture"], ["single", "allreduce-local"])
    nodes = cols["nodes"]
    with np.errstate(invalid="ignore"):
        several = one_node & ~missing["nodes"] & (nodes > 1)
    jobs.fail(
        several,
        lambda i: str(SpecError("parallelism.nodes", int(nodes[i]), f"{cols['architecture'][i]} runs on one node; use allreduce-cluster")),
    )


def _check_arithmetic_floor(jobs, resolved, cat: CatalogArrays) -> None:
    """A GPU step no shorter than its arithmetic at the hardware's dense peak (:func:`features.physics.arithmetic_floor_s`)."""
    if resolved.matrix_flops_per_sample is None:
        return
    floor_s = physics.arithmetic_floor_s(resolved.device_inputs())
    measured_s = jobs.columns["measured_step_time_s"].astype(float)
    with np.errstate(invalid="ignore"):
        too_fast = jobs.ok & (measured_s < floor_s)
    cols = jobs.columns
    jobs.fail(
        too_fast,
        lambda i: str(SpecError(
            field_path("measured_step_time_s"), float(f"{measured_s[i]:.4g}"),
            f"a step of {cols['model'][i]} at batch {cols['batch_size_per_gpu'][i]:.0f} needs at least {floor_s[i]:.3g} s "
            f"on {cat.device_names[resolved.device_index[i]]}, every FLOP at its dense {cols['precision'][i]} peak "
            f"({floor_s[i] / measured_s[i]:.2f}x the measured rate): a mislabelled precision, batch or GPU count",
        )),
    )  # fmt: skip


#: How much shorter than its configuration's one-GPU step a data-parallel step may be before it cannot
#: be what it says. On n GPUs each GPU does the one-GPU work at the same per-GPU batch plus its share
#: of the all-reduce, so the step is never shorter; two runs of one configuration on different
#: hosts differ, though: Lambda's configurations measured on three hosts or more keep 99% of their
#: runs within 1.12x of the configuration's median, so a ratio of two runs may reach about 1.25x.
ONE_GPU_STEP_SPREAD = 1.25

#: Job columns that say how many GPUs run a data-parallel job and how they are joined; the job's
#: configuration is every other job column.
_SCALE_COLUMNS = (
    "name", "architecture", "workers", "gpus_per_worker", "parameter_servers", "nodes", "gpus_per_node",
    "intra_node_link", "network", "nics_per_node", "measured_step_time_s", "global_batch_size",
)  # fmt: skip
#: A tensor-, pipeline- or context-parallel layout splits a GPU's work: the rule is for data parallelism only.
_LAYOUT_COLUMNS = (
    "tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel", "pipeline_schedule",
    "virtual_stages", "sequence_parallel", "activation_recompute", "sharding",
)  # fmt: skip


def faster_than_one_gpu(keys: np.ndarray, gpus: np.ndarray, step_time_s: np.ndarray, standing: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Multi-GPU rows whose step is shorter than their configuration's one-GPU step beyond :data:`ONE_GPU_STEP_SPREAD`.

    ``keys`` names each row's configuration without its GPU count; the one-GPU
    step is the median over the ``standing`` one-GPU rows of that key. Returns
    the flags and each row's one-GPU step (NaN where its key has none: such a
    row is never flagged).
    """
    frame = pd.DataFrame({"key": np.asarray(keys, object), "step": np.asarray(step_time_s, float)})
    single = np.asarray(standing, bool) & (np.asarray(gpus) == 1) & np.isfinite(frame["step"].to_numpy())
    one_gpu_s = frame["key"].map(frame[single].groupby("key")["step"].median()).to_numpy(float)
    with np.errstate(invalid="ignore"):
        flagged = (np.asarray(gpus) > 1) & (one_gpu_s > ONE_GPU_STEP_SPREAD * frame["step"].to_numpy())
    return flagged, one_gpu_s


def _check_data_parallel_floor(jobs, raw: dict[str, np.ndarray], missing: dict[str, np.ndarray], resolved) -> None:
    """A data-parallel step on several GPUs no shorter than the same job's one-GPU step of the same source (:func:`faster_than_one_gpu`)."""
    layout = np.zeros(len(jobs.ok), bool)
    for column in _LAYOUT_COLUMNS:
        layout |= ~missing[column]
    judged = jobs.ok & ~layout
    columns = [c for c in JOB_COLUMNS if c not in _SCALE_COLUMNS and c not in _LAYOUT_COLUMNS]
    frame = pd.DataFrame({"source": raw["source"], "software": raw["software"], **{c: jobs.columns[c] for c in columns}})
    keys = frame.groupby(list(frame.columns), dropna=False, sort=False).ngroup().to_numpy()
    measured_s = jobs.columns["measured_step_time_s"].astype(float)
    gpus = np.nan_to_num(resolved.total_gpus)
    flagged, one_gpu_s = faster_than_one_gpu(keys, gpus, measured_s, judged)
    jobs.fail(
        flagged & judged,
        lambda i: str(SpecError(
            field_path("measured_step_time_s"), float(f"{measured_s[i]:.4g}"),
            f"{gpus[i]:.0f} GPUs take a step {one_gpu_s[i] / measured_s[i]:.2f}x shorter than the same job on one GPU of this "
            f"source ({one_gpu_s[i]:.4g} s), more than the {ONE_GPU_STEP_SPREAD}x hosts differ by: data parallelism does each "
            "GPU's one-GPU work, so a mislabelled GPU count, batch or throughput",
        )),
    )  # fmt: skip


def _check_unique_ids(jobs, raw: dict[str, np.ndarray], missing: dict[str, np.ndarray]) -> None:
    keys = pd.DataFrame({"source": raw["source"], "source_id": raw["source_id"]}, dtype=object)
    repeated = keys.duplicated(keep="first").to_numpy() & ~missing["source"] & ~missing["source_id"]
    jobs.fail(
        repeated,
        lambda i: str(SpecError("source_id", raw["source_id"][i], f"unique within source {raw['source'][i]!r}; it repeats an earlier row")),
    )


def _accepted_rows(raw, missing, jobs, resolved, cat: CatalogArrays, ok: np.ndarray) -> pd.DataFrame:
    """The accepted rows: validated values, catalogue names, and empty where the row gave nothing."""
    out: dict[str, np.ndarray] = {}
    for column in RUN_COLUMNS:
        if column in FLAT_FIELDS:
            values = jobs.columns[column]
        elif column in TEXT_COLUMNS:
            values = raw[column]
        else:
            values = _numbers(raw[column])[0]
        empty = None if column in TEXT_COLUMNS else np.nan
        out[column] = np.where(missing[column], empty, np.asarray(values, dtype=object))[ok]
    # Catalogue names for what resolved (a model outside the catalogue keeps its given name).
    device_names = np.array(cat.device_names + [None], object)
    link_names = np.array(cat.link_names + [None], object)
    workload_names = np.array(cat.workload_names + [None], object)
    model_index = resolved.workload_index[ok]
    canonical = {
        "gpu": device_names[resolved.device_index[ok]],
        "model": np.where(model_index >= 0, workload_names[model_index], out["model"]),
        "intra_node_link": link_names[resolved.intra_link_index[ok]],
        "network": link_names[resolved.network_link_index[ok]],
    }
    for column, names in canonical.items():
        out[column] = np.where(missing[column][ok], None, names)
    return _typed(pd.DataFrame(out, columns=list(RUN_COLUMNS)))


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    for column in INT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").round().astype("Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    for column in TEXT_COLUMNS:
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame
