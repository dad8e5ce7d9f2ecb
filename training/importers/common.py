"""What every importer shares: the result type, row accounting and column helpers.

An importer reads a public table by path (the data is never copied into the
project) and returns an :class:`ImportResult`: a run table
(:mod:`training.runs`) and, for every source row that did not become a run,
the row with a ``reason`` (a fixed category, counted in reports) and a
``detail``. :class:`RowAccounting` keeps one reason slot per source row, so a
row is either mapped or excluded with the first reason that applied, never
dropped silently. Mapped rows are checked with the run-table rules except that
a model may still be missing from the workload catalogue
(:func:`training.runs.load_runs` then rejects those until the catalogue has
them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from features.errors import SpecError
from features.hardware import DeviceSpec, HardwareCatalog
from features.workloads import WorkloadCatalog
from training.runs import RUN_COLUMNS, empty_run_table, reason_field, validate_runs

#: Throughput units that count the samples a batch counts.
SAMPLE_UNITS = frozenset({"images/s", "sequences/s", "samples/s"})
#: Units that need the workload's tokens_per_sample (units per sample) to become a step time.
PER_SAMPLE_UNITS = frozenset({"tokens/s", "mel-frames/s", "audio-samples/s"})


class ImportResult(NamedTuple):
    """Mapped runs and the source rows that were not mapped, each with a reason."""

    runs: pd.DataFrame
    excluded: pd.DataFrame

    def counts(self) -> dict[str, object]:
        return {
            "rows": len(self.runs) + len(self.excluded),
            "mapped": len(self.runs),
            "excluded": len(self.excluded),
            "excluded_by_reason": self.excluded["reason"].value_counts().to_dict(),
        }


@dataclass(frozen=True)
class Importer:
    """One public source: its name on the command line, the file it reads and the function that maps it."""

    name: str
    default_file: str
    description: str
    function: Callable[..., ImportResult]

    def __call__(self, path: str | Path, **catalogues) -> ImportResult:
        return self.function(path, **catalogues)


class RowAccounting:
    """A source table being mapped: one reason slot per row, the first reason kept."""

    def __init__(self, source: pd.DataFrame):
        self.source = source.reset_index(drop=True)
        n = len(self.source)
        self.reason = np.full(n, None, object)
        self.detail = np.full(n, None, object)

    @property
    def ok(self) -> np.ndarray:
        return pd.isna(pd.Series(self.reason, dtype=object)).to_numpy()

    def exclude(self, mask, reason: str, detail) -> None:
        """Exclude the rows of ``mask`` that are still standing, with ``reason`` and a per-row or shared ``detail``."""
        mask = np.asarray(mask, bool) & self.ok
        self.reason[mask] = reason
        self.detail[mask] = np.asarray(detail, object)[mask] if isinstance(detail, (np.ndarray, pd.Series)) else detail

    def result(self, runs: dict[str, np.ndarray], source_id: np.ndarray, hardware, workloads) -> ImportResult:
        """Assemble the run table for the rows still standing and check it against the run rules."""
        ok = self.ok
        table = empty_run_table() if not ok.any() else pd.DataFrame({c: runs.get(c, np.full(len(ok), None, object))[ok] for c in RUN_COLUMNS})
        rows = np.flatnonzero(ok)
        checked = validate_runs(table, hardware=hardware, workloads=workloads, require_known_models=False)
        if len(checked.rejected):
            failed = rows[checked.rejected["source_row"].to_numpy()]
            self.reason[failed] = ["fails run-table rules: " + reason_field(r) for r in checked.rejected["reason"]]
            self.detail[failed] = checked.rejected["reason"].to_numpy()
        excluded = self.source.loc[~self.ok].copy()
        excluded.insert(0, "source_row", np.flatnonzero(~self.ok))
        excluded.insert(1, "source_id", np.asarray(source_id, object)[~self.ok])
        excluded.insert(2, "reason", self.reason[~self.ok])
        excluded.insert(3, "detail", self.detail[~self.ok])
        return ImportResult(checked.accepted, excluded.reset_index(drop=True))


def read_source(path: str | Path, columns: tuple[str, ...], text_columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A source CSV as read, after checking that it has ``columns``; ``text_columns`` stay text."""
    path = Path(path)
    text = {"suspect", "intra_node_link", "host_networking", "framework", *text_columns}
    try:
        frame = pd.read_csv(path, dtype={c: str for c in text})
    except (OSError, ValueError) as exc:
        raise SpecError("path", str(path), f"cannot read it as CSV ({exc})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SpecError("path", str(path), f"the table lacks columns {', '.join(missing)}")
    return frame


def given(series: pd.Series) -> np.ndarray:
    """True where a cell holds something other than blanks."""
    return (series.notna() & (series.astype(str).str.strip() != "")).to_numpy()


def numbers(series: pd.Series) -> np.ndarray:
    """A column as floats, NaN where it is not a number."""
    return pd.to_numeric(series, errors="coerce").to_numpy(float)


def map_unique(series: pd.Series, lookup) -> np.ndarray:
    """``lookup(value)`` for every row, called once per distinct value (None where missing)."""
    codes, uniques = pd.factorize(series.astype(object), use_na_sentinel=True)
    found = [lookup(str(u)) for u in uniques]
    return np.array(found + [None], object)[codes]


def attribute(devices: np.ndarray, name: str) -> np.ndarray:
    """One attribute of each row's device (None where the row has none)."""
    return np.array([None if d is None else getattr(d, name) for d in devices], object)


def has_precision(devices: np.ndarray, precision: str) -> np.ndarray:
    """True where the row's device has a fast path at ``precision``."""
    return ~pd.isna(attribute(devices, f"peak_{precision}_flops_per_s"))


def text(*parts) -> np.ndarray:
    """Row-wise concatenation of strings and arrays, for detail messages."""
    n = max(len(p) for p in parts if isinstance(p, np.ndarray))
    out = pd.Series([""] * n, dtype=object)
    for part in parts:
        if isinstance(part, np.ndarray):
            series = pd.Series(part, dtype=object)
            out = out + series.map(lambda v: f"{v:g}" if isinstance(v, float) else str(v))
        else:
            out = out + part
    return out.to_numpy(object)


def units_per_sample(models: pd.Series | np.ndarray, workloads: WorkloadCatalog) -> np.ndarray:
    """The workload catalogue's ``tokens_per_sample`` of each row's model (NaN where it has none)."""

    def lookup(name: str):
        spec = workloads.workloads.find(name)
        return None if spec is None else spec.tokens_per_sample

    values = map_unique(pd.Series(models, dtype=object), lookup)
    return np.array([np.nan if v is None else float(v) for v in values], float)


def pcie_link(device: DeviceSpec) -> str:
    """The PCIe link a device's host connection uses."""
    return device.host_link if device.host_link.startswith("pcie") else f"pcie-gen{device.pcie_generation}"


def joined(frame: pd.DataFrame, columns: list[str], sep: str = "/") -> np.ndarray:
    """A row id from several columns (missing cells as '')."""
    values = frame[columns].astype(object).where(frame[columns].notna(), "").astype(str)
    return values.agg(sep.join, axis=1).to_numpy(object)


def step_times(global_batch: np.ndarray, throughput: np.ndarray, per_sample: np.ndarray | float = 1.0) -> np.ndarray:
    """Seconds per step: ``global_batch * per_sample / throughput`` (NaN where it cannot be formed)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.asarray(global_batch, float) * per_sample / np.asarray(throughput, float)
    return np.where(np.isfinite(out) & (out > 0), out, np.nan)


def one_gpu_detail(gpus: np.ndarray, step_time_s: np.ndarray, one_gpu_s: np.ndarray) -> np.ndarray:
    """Why a row is faster per GPU than on one GPU (:func:`training.runs.faster_than_one_gpu`), for the row accounting."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = one_gpu_s / step_time_s
    return text("", np.asarray(gpus, float), " GPUs step ", np.round(step_time_s, 4), " s, one GPU ", np.round(one_gpu_s, 4),
                " s at the same per-GPU batch (", np.round(ratio, 2), "x)")


def catalogues(hardware: HardwareCatalog | None, workloads: WorkloadCatalog | None):
    """The catalogues to map against: the given ones, else the shipped ones."""
    from features.hardware import hardware_catalog
    from features.workloads import workload_catalog

    return hardware or hardware_catalog(), workloads or workload_catalog()
