"""Measured runs as a learning problem: features, the residual target and CV groups.

The target is the log of measured over analytical step time; a prediction is
the analytical time times exp(predicted residual). Groups keep related rows
together in cross-validation, each source by what varies most between its
rows: a benchmark (model family) for MLPerf rows of every round (mostly A100
and H100 on tuned stacks), a topology for testbed rows, and for every other
public source (Lambda, DeepLearningExamples, DLPerf, the TensorFlow
benchmarks) the GPU type, shared across those sources: the same GPU measured
by two sources is one group, so no fold trains on a GPU type's runs from one
source and validates on its runs from another.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from features.analytical import BreakdownArrays
from features.build import FeatureFrame, physical_features, raw_features
from features.fields import FLAT_FIELDS
from features.mechanisms import PhysicsConstants
from features.resolve import ResolvedJobs, resolve
from features.table import validate_columns
from features.workloads import workload_catalog
from training.importers.mlperf import is_mlperf

#: The analytical total the residual corrects: "roofline" (op-class rooflines, launches,
#: host overhead, bucketed overlap, NCCL collectives), "overlapped" or "none" (PAI
#: additive). The roofline physics is the closest start on every source (all runs:
#: MAPE 26.5% against 63.1% overlapped and 48.5% additive), so the residual has least
#: to learn and least to memorise.
DEFAULT_BASELINE = "roofline"


@dataclass
class Dataset:
    """Runs that resolved, with everything a fit, a CV split or an evaluation needs."""

    runs: pd.DataFrame  # the accepted rows, index reset
    resolved: ResolvedJobs
    breakdown: BreakdownArrays
    features: FeatureFrame
    raw: FeatureFrame
    baseline: str
    log_measured_s: np.ndarray
    log_analytical_s: np.ndarray
    group: np.ndarray
    #: The roofline physics' constants (None: the shipped ones, ``catalog/physics_constants.json``).
    constants: PhysicsConstants | None = None
    #: Candidate features (features.build.CANDIDATE_GROUPS) added for an ablation; none when shipping.
    candidates: tuple[str, ...] = ()
    #: Shipped features (features.build.REMOVABLE_GROUPS) taken out for an ablation; none when shipping.
    without: tuple[str, ...] = ()

    @property
    def residual(self) -> np.ndarray:
        """Target of the residual model: log(measured / analytical)."""
        return self.log_measured_s - self.log_analytical_s

    def __len__(self) -> int:
        return len(self.runs)

    def subset(self, mask: np.ndarray, constants: PhysicsConstants | None = None) -> "Dataset":
        """The rows of ``mask`` (a boolean array), recomputed from their runs (with other physics constants if given)."""
        runs = self.runs[mask].reset_index(drop=True)
        return build_dataset(runs, self.baseline, constants or self.constants, self.candidates, self.without)


def table_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The flat job columns of a frame as numpy arrays (absent columns stay absent)."""
    return {leaf: frame[leaf].to_numpy() for leaf in FLAT_FIELDS if leaf in frame.columns}


def text_keys(frame: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """Every cell as text, '' where missing (``astype(str)`` keeps NaN as NaN)."""
    return frame.astype(object).where(frame.notna(), "").astype(str)


def joined_keys(frame: pd.DataFrame, columns: list[str], sep: str = "|") -> np.ndarray:
    """One text key per row from ``columns`` (missing values as '')."""
    present = [c for c in columns if c in frame.columns]
    if not present:
        return np.full(len(frame), "", object)
    return text_keys(frame[present]).agg(sep.join, axis=1).to_numpy(object)


def network_of(models) -> np.ndarray:
    """Each run's network: its workload name, or for a workload that trains another's network on another
    layout of the same data (the catalogue's ``network_of``: BERT-large unpadded, in length bins or at 128 tokens) that
    workload's name, so a held-out model leaves training with all its layouts."""
    same = {w.name: w.network_of for w in workload_catalog().workloads if w.network_of is not None}
    return np.array([same.get(m, m) for m in np.asarray(models, object)], object)


def cv_groups(runs: pd.DataFrame) -> np.ndarray:
    """The cross-validation group of each run.

    Testbed rows: the topology (architecture, workers, servers). MLPerf rows
    of any round: the benchmark (model family), since their GPUs are mostly
    A100s and H100s. Other public rows: the GPU type, the same key whichever
    source measured it.
    """
    source = text_keys(runs["source"]).to_numpy(object) if "source" in runs.columns else np.full(len(runs), "", object)
    topology = "testbed:" + joined_keys(runs, ["architecture", "workers", "parameter_servers"], ":")
    benchmark = "mlperf:" + network_of(text_keys(runs["model"]).to_numpy(object))
    gpu = text_keys(runs["gpu"]).to_numpy(object)
    return np.select([source == "testbed", is_mlperf(source)], [topology, benchmark], gpu).astype(object)


def build_dataset(
    runs: pd.DataFrame,
    baseline: str = DEFAULT_BASELINE,
    constants: PhysicsConstants | None = None,
    candidates: tuple[str, ...] = (),
    without: tuple[str, ...] = (),
) -> Dataset:
    """Features and targets of measured runs; rows that fail to resolve raise (load them through ``training.runs`` first).

    ``constants`` replaces the shipped physics constants (a held-out
    evaluation fits them without the held-out group); ``candidates`` adds
    features the shipped set leaves out (:data:`features.build.CANDIDATE_GROUPS`, for an ablation)
    and ``without`` takes shipped ones out (:data:`features.build.REMOVABLE_GROUPS`).
    """
    runs = runs.reset_index(drop=True)
    table = validate_columns(table_columns(runs), len(runs))
    resolved = resolve(table)
    bad = ~resolved.ok
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{bad.sum()} runs do not resolve; first (row {first}): {resolved.errors[first]}")
    breakdown = resolved.breakdown()
    if constants is not None:
        comm, io = breakdown.comm, breakdown.io_s
        breakdown = dataclasses.replace(breakdown, physics_fn=lambda: resolved.physics(comm, io, constants))
    measured = runs["measured_step_time_s"].to_numpy(float)
    return Dataset(
        runs=runs,
        resolved=resolved,
        breakdown=breakdown,
        features=physical_features(resolved, breakdown, candidates, without),
        raw=raw_features(resolved),
        baseline=baseline,
        log_measured_s=np.log(measured),
        log_analytical_s=np.log(breakdown.step_time_s(baseline)),
        group=cv_groups(runs),
        constants=constants,
        candidates=tuple(candidates),
        without=tuple(without),
    )


def fingerprint(runs: pd.DataFrame) -> str:
    """SHA-256 of the runs' job fields and measured times, independent of row order."""
    columns = sorted(c for c in [*FLAT_FIELDS, "source", "source_id"] if c in runs.columns)
    row_hashes = np.sort(pd.util.hash_pandas_object(runs[columns], index=False).to_numpy())
    return hashlib.sha256(row_hashes.tobytes()).hexdigest()
