"""Conformal calibration tables as the runtime reads them, and the Mondrian bins of a job.

A table stores, per bin, the conformal predictive distribution of the log
residual at y_hat = 0 as percentiles (fitted by :mod:`training.calibration`);
answering any confidence level is a table look-up, so prediction needs neither
crepes nor scipy. A job's bin chain runs from its finest bin to the pooled one
("ps-worker|ethernet-25g" -> "ps-worker" -> "all"); the first bin with a
table answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Percentiles stored per bin (0.5 % steps).
PERCENTILES = np.round(np.arange(0.5, 100.0, 0.5), 1)
POOLED = "all"


@dataclass(frozen=True)
class CalibrationTable:
    """Per bin: conservative lower and upper percentile offsets of the log residual."""

    lower: dict[str, np.ndarray]
    upper: dict[str, np.ndarray]
    counts: dict[str, int]

    def bin_for(self, keys: Sequence[Sequence[str]]) -> np.ndarray:
        """The first key of each row's fallback chain that has a table (else the pooled bin)."""
        out = np.empty(len(keys), object)
        for i, chain in enumerate(keys):
            out[i] = next((k for k in chain if k in self.lower), POOLED)
        return out

    def interval(self, y_hat: np.ndarray, bins: np.ndarray, confidence_level: float) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds of ``y_hat`` (log scale) at ``confidence_level``."""
        alpha = 100.0 * (1.0 - confidence_level) / 2.0
        low = np.empty(len(y_hat))
        high = np.empty(len(y_hat))
        for name, rows in _bin_rows(bins):
            low[rows] = y_hat[rows] + np.interp(alpha, PERCENTILES, self.lower[name])
            high[rows] = y_hat[rows] + np.interp(100.0 - alpha, PERCENTILES, self.upper[name])
        return low, high

    def probability_above(self, y_hat: np.ndarray, bins: np.ndarray, threshold: float | np.ndarray) -> np.ndarray:
        """P(y > threshold) under each row's conformal predictive distribution (one threshold, or one per row)."""
        out = np.empty(len(y_hat))
        thresholds = np.broadcast_to(np.asarray(threshold, float), np.shape(y_hat))
        for name, rows in _bin_rows(bins):
            middle = (self.lower[name] + self.upper[name]) / 2.0
            below = np.interp(thresholds[rows] - y_hat[rows], middle, PERCENTILES, left=0.0, right=100.0)
            out[rows] = 1.0 - below / 100.0
        return out

    def to_dict(self) -> dict:
        return {
            "percentiles": PERCENTILES.tolist(),
            "bins": {
                name: {"n": self.counts[name], "lower": _finite(self.lower[name]), "upper": _finite(self.upper[name])}
                for name in self.lower
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> "CalibrationTable":
        if list(np.round(data["percentiles"], 1)) != list(PERCENTILES):
            raise ValueError("calibration table percentiles differ from this version's")
        bins = data["bins"]
        return cls(
            lower={k: np.array(v["lower"], float) for k, v in bins.items()},
            upper={k: np.array(v["upper"], float) for k, v in bins.items()},
            counts={k: int(v["n"]) for k, v in bins.items()},
        )



#: From this many rows bins are factorized by pandas (imported then), below by numpy.
FACTORIZE_ABOVE_ROWS = 10_000


def _bin_rows(bins: np.ndarray):
    """Each distinct bin name with the mask of its rows.

    A large table is factorized by pandas (no sort, no copy as text); a small
    one by ``np.unique`` with the inverse, since without it numpy imports
    ``numpy.ma`` (0.2 s of a one-job command's start) to ask whether the
    array is masked.
    """
    if len(bins) >= FACTORIZE_ABOVE_ROWS:
        import pandas as pd

        inverse, names = pd.factorize(bins, use_na_sentinel=False)
    else:
        names, inverse = np.unique(bins.astype(str), return_inverse=True)
    for i, name in enumerate(names):
        yield str(name), inverse == i


def _finite(values: np.ndarray) -> list[float]:
    return [float(v) for v in values]


# -- Mondrian bins ------------------------------------------------------------

#: Architectures whose step crosses the network, so the tier can be its own bin.
_NETWORKED = ("allreduce-cluster", "ps-worker")


def step_bin_keys(
    architecture: np.ndarray, network: np.ndarray, software_stack: np.ndarray | None = None, framework: np.ndarray | None = None
) -> list[tuple[str, ...]]:
    """Each job's bin chain for step-time intervals, finest first, ending at the pooled bin.

    Networked architectures bin by tier ("ps-worker|ethernet-25g", "ps-worker");
    one-host architectures by framework ("single|pytorch", "single"): how far
    the physics is off differs more between frameworks than between hosts.
    Jobs on a vendor-tuned software stack (``software_stack`` "tuned", such as
    MLPerf submissions) have chains of their own ("tuned|allreduce-local",
    "tuned"), so their larger residuals do not widen stock jobs' intervals.
    """
    n = len(architecture)
    stacks = software_stack if software_stack is not None else [None] * n
    frameworks = framework if framework is not None else [None] * n
    keys = []
    for arch, net, stack, fw in zip(architecture, network, stacks, frameworks):
        if stack == "tuned":
            keys.append((f"tuned|{arch}", "tuned", POOLED))
        elif arch in _NETWORKED:
            keys.append((f"{arch}|{net}", str(arch), POOLED))
        elif fw is not None:
            keys.append((f"{arch}|{fw}", str(arch), POOLED))
        else:
            keys.append((str(arch), POOLED))
    return keys


def run_bin_keys(runs) -> list[tuple[str, ...]]:
    """:func:`step_bin_keys` of a run table's rows (a missing stack is the default, stock)."""
    stack = runs["software_stack"].to_numpy(object) if "software_stack" in runs.columns else None
    framework = runs["framework"].to_numpy(object) if "framework" in runs.columns else None
    return step_bin_keys(runs["architecture"].to_numpy(), runs["network"].to_numpy(), stack, framework)


#: Kinds of what-if a speedup is calibrated for, as changed job fields.
PAIR_KINDS = ("architecture", "network", "gpus", "intra_node_link", "gpu", "precision", "batch_size_per_gpu", "software_year")
IDENTITY = "identity"
MIXED = "mixed"


def step_bins(table: CalibrationTable, jobs) -> np.ndarray:
    """Each job's step-time bin in ``table``, resolved once per distinct (architecture, network, stack,
    framework) of the job table ``jobs`` (a :class:`features.table.JobTable`)."""
    columns = ("architecture", "network", "software_stack", "framework")
    codes, names = zip(*(jobs.codes(column) for column in columns))
    combo = np.zeros(len(codes[0]), np.int64)
    for code, name in zip(codes, names):
        combo = combo * len(name) + code
    distinct, inverse = np.unique(combo, return_inverse=True)
    parts = []
    for name in reversed(names):
        distinct, part = np.divmod(distinct, len(name))
        parts.append([name[c] for c in part])
    arch, net, stack, framework = reversed(parts)
    return table.bin_for(step_bin_keys(arch, net, stack, framework))[inverse]


def pair_bins(table: CalibrationTable, kinds: np.ndarray) -> np.ndarray:
    """Each what-if's speedup bin in ``table``, resolved once per kind."""
    from features.table import factorize

    inverse, distinct = factorize(kinds)
    return table.bin_for(pair_bin_keys(distinct))[inverse]


def pair_kind(base: dict[str, np.ndarray], target: dict[str, np.ndarray]) -> np.ndarray:
    """What each what-if changes: one kind from :data:`PAIR_KINDS`, ``identity`` or ``mixed``.

    A change of architecture counts as one kind whatever else moves with it
    (PS/Worker to AllReduce over NVLink changes the link and the node count too).
    ``base`` and ``target`` hold flat job columns plus ``total_gpus``. Only a
    what-if that changes no column is the identity; one that changes columns
    outside the measured kinds alone (the software stack, the framework) is
    ``mixed``, calibrated on the pooled pairs. Such columns moving with one
    kind leave it that kind (more GPUs change ``workers`` too).
    """
    n = len(base["architecture"])

    def differs(column: str) -> np.ndarray:
        if column not in base and column not in target:  # a table from before the field: unchanged
            return np.zeros(n, bool)
        a, b = np.asarray(base[column]), np.asarray(target[column])
        if a is b:  # a column the what-if left alone (job tables share unchanged columns)
            return np.zeros(n, bool)
        if a.dtype.kind == "f" and b.dtype.kind == "f":
            return ~((a == b) | (np.isnan(a) & np.isnan(b)))
        return np.asarray(a != b, bool)  # text or None, compared as objects

    changed = {kind: differs("total_gpus" if kind == "gpus" else kind) for kind in PAIR_KINDS}
    kind_columns = {"total_gpus" if kind == "gpus" else kind for kind in PAIR_KINDS}
    other = np.zeros(n, bool)
    for column in base.keys() & target.keys() - kind_columns:
        other |= differs(column)
    count = sum(changed[k].astype(int) for k in PAIR_KINDS if k != "architecture")
    out = np.full(n, MIXED, object)
    out[(count == 0) & ~other] = IDENTITY
    for kind in PAIR_KINDS[1:]:
        out[(count == 1) & changed[kind]] = kind
    out[changed["architecture"]] = "architecture"
    return out


def pair_share(shares: dict[str, float] | None, kinds: np.ndarray) -> np.ndarray:
    """The share of the learned correction's change each what-if keeps (``training.shrink.pair_shares``):
    its kind's, else the pooled one; 1 without estimates (a model trained before they were)."""
    kinds = np.asarray(kinds, object)
    if not shares:
        return np.ones(len(kinds))
    pooled = shares.get(POOLED, 1.0)
    return np.array([shares.get(str(kind), pooled) for kind in kinds], float)


def pair_bin_keys(kinds: np.ndarray) -> list[tuple[str, ...]]:
    return [(str(kind), POOLED) if kind not in (MIXED, IDENTITY) else (POOLED,) for kind in kinds]
