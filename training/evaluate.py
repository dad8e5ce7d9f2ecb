"""Held-out evaluation: analytical alone, pure ML and physics + residual, side by side.

Every scheme holds out whole groups, trains on the rest (with its own inner
cross-fit for calibration, so no held-out row calibrates its own interval)
and scores the held-out rows:

* ``lambda-gpu``: leave one GPU type out, scored on its Lambda runs (its
  MLPerf runs are held out too);
* ``testbed-tier``: leave one emulated network tier out;
* ``testbed-architecture``: leave one testbed architecture out;
* ``mlperf-benchmark``: leave one MLPerf benchmark out;
* ``generation``: leave one GPU generation (Pascal ... Blackwell) out of every
  source, scored on all its runs; GPU-swap pairs within the held-out generation;
* ``model``: leave one model out of every source, scored on its Lambda and
  DeepLearningExamples runs;
* ``framework``: leave one framework out of every source, scored on its DLPerf
  and DeepLearningExamples runs; their n to 2n pairs (single- and multi-node);
* ``cross-source``: train without any MLPerf round, predict every MLPerf run;
  their n to 2n pairs;
* speedups of pairs of runs, both runs of a pair held out together: n to 2n
  GPUs, PCIe to NVLink and fp32 to fp16 (Lambda, by GPU type); one tier to
  another (testbed, by configuration); PS/Worker to AllReduce (testbed, by
  workload, workers and tier).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from predictor.calibration import POOLED, pair_bin_keys, pair_share, run_bin_keys
from predictor.domain import unseen_facts, unseen_labels
from predictor.learned import domain_notes, faded_prediction, pair_correction_change
from training.cv import ape, sample_weights
from training.model import ResidualRegressor
from training.dataset import Dataset, text_keys
from training.pairs import make_pairs, pair_log_ratios
from training.physics_fit import FoldConstants
from training.shrink import estimate_shrink, shrink_shares
from training.train import fit_calibrated, summarize, training_domain

LAMBDA = "lambdal/deeplearning-benchmark"
TESTBED = "testbed"


@dataclass
class HeldOut:
    """Predictions for every row of a dataset from models that never saw the row's group."""

    scheme: str
    group: np.ndarray  # the held-out group of each scored row (None where not scored)
    log_residual_model_s: np.ndarray
    log_pure_ml_s: np.ndarray
    lower_s: np.ndarray
    upper_s: np.ndarray
    #: The physics alone, with constants fitted without the row's group (the shipped ones where none are fitted).
    log_physics_s: np.ndarray
    pair_frames: list[pd.DataFrame] = field(default_factory=list)

    @property
    def scored(self) -> np.ndarray:
        return self.group != None  # noqa: E711


def source_of(ds: Dataset) -> np.ndarray:
    return text_keys(ds.runs["source"]).to_numpy() if "source" in ds.runs.columns else np.full(len(ds), "")


def held_out(
    ds: Dataset,
    scheme: str,
    groups: np.ndarray,
    scored: np.ndarray,
    params: dict,
    rounds: int,
    confidence_level: float = 0.9,
    exclude: np.ndarray | None = None,
    pair_kinds: tuple[str, ...] = (),
    pair_suffix: str = "",
    pure_ml: bool = True,
    seed: int = 0,
) -> HeldOut:
    """Leave each group of ``groups`` (among ``scored`` rows) out in turn.

    ``exclude[i]`` (optional) names a group key of rows that must leave
    training together with group ``i`` (a GPU type's MLPerf runs when its
    Lambda runs are held out). Pairs of ``pair_kinds`` among each held-out
    group's runs are scored too, their kind named with ``pair_suffix``.
    ``pure_ml=False`` skips the pure-ML baseline (its column stays NaN).
    ``seed`` seeds XGBoost's row and column sampling in every fit of a fold.
    """
    n = len(ds)
    out = HeldOut(scheme, np.full(n, None, object), *(np.full(n, np.nan) for _ in range(5)))
    fold_constants = FoldConstants(ds.resolved, ds.runs, np.exp(ds.log_measured_s)) if ds.baseline == "roofline" else None
    for group in pd.unique(groups[scored]):
        test = scored & (groups == group)
        train = groups != group if exclude is None else (groups != group) & (exclude != group)
        train &= ~test
        # The physics' constants too are fitted without the held-out group.
        constants = fold_constants(train) if fold_constants is not None else None
        sub = ds.subset(train, constants)
        model, _, _, _ = fit_calibrated(sub, params, rounds, seed)
        test_ds = ds.subset(test, constants)
        y_hat, low, high, correction, kept = _scored_as_shipped(model, sub, test_ds, params, rounds, confidence_level, seed)
        rows = np.flatnonzero(test)
        out.group[rows] = group
        out.log_residual_model_s[rows] = y_hat
        out.log_physics_s[rows] = test_ds.log_analytical_s
        out.lower_s[rows], out.upper_s[rows] = np.exp(low), np.exp(high)
        if pure_ml:
            out.log_pure_ml_s[rows] = _pure_ml(sub, test_ds, params, rounds, seed)
        if pair_kinds:
            out.pair_frames.append(_pairs(test_ds, correction, kept, model, pair_kinds, confidence_level, group, pair_suffix))
    return out


def _scored_as_shipped(model, train: Dataset, test: Dataset, params: dict, rounds: int, confidence_level: float, seed: int = 0):
    """Log step times and interval bounds for ``test`` as the shipped model would give them.

    The training fold's domain decides, as an artefact's does, where the
    correction fades toward the physics and the interval falls back to the
    pooled bin (:func:`predictor.learned.faded_prediction`); the share an
    unseen fact keeps is estimated on the training fold alone
    (:mod:`training.shrink`), for the facts the test rows lie outside of.
    Returns the log step times, their interval bounds, and the residual's
    whole log correction with the share of it each row keeps (for pairs).
    """
    domain = training_domain(train)
    domain["shrink"] = shrink_shares(estimate_shrink(train, params, rounds, unseen_labels(domain, test.resolved), seed))
    _, pooled = domain_notes(domain, test.resolved, test.features)
    kept, combination_notes = unseen_facts(domain, test.resolved)
    bins = model.calibration_.bin_for(run_bin_keys(test.runs))
    bins[pooled | (combination_notes != None)] = POOLED  # noqa: E711
    residual = model.predict(test.features.values)
    return (*faded_prediction(model.calibration_, test.log_analytical_s, residual, kept, bins, confidence_level), residual, kept)


def _pure_ml(train: Dataset, test: Dataset, params: dict, rounds: int, seed: int = 0) -> np.ndarray:
    """The same XGBoost on raw job fields, predicting log step time directly."""
    model = ResidualRegressor(params=params, num_boost_round=rounds, seed=seed)
    model.fit(train.raw.values, train.log_measured_s, sample_weight=sample_weights(train.group))
    return model.predict(test.raw.values)


def _pairs(test: Dataset, correction: np.ndarray, kept: np.ndarray, model, kinds, confidence_level, group, suffix: str = "") -> pd.DataFrame:
    pairs = make_pairs(test.runs, test.resolved.total_gpus)
    pairs = pairs[pairs["kind"].isin(kinds)].reset_index(drop=True)
    if not len(pairs):
        return pd.DataFrame()
    measured = pair_log_ratios(pairs, test.log_measured_s)
    analytical = pair_log_ratios(pairs, test.log_analytical_s)
    # As the shipped model predicts a speedup: the physics' plus the kind's share of the correction's change,
    # faded by the share the less familiar run keeps.
    share = pair_share(getattr(model, "pair_shares_", None), pairs["kind"].to_numpy())
    a, b = pairs["a"].to_numpy(), pairs["b"].to_numpy()
    predicted = analytical + share * pair_correction_change(correction[a], correction[b], kept[a], kept[b])
    table = model.speedup_calibration_
    if table is not None:
        low, high = table.interval(predicted, table.bin_for(pair_bin_keys(pairs["kind"].to_numpy())), confidence_level)
    else:
        low = high = np.full(len(pairs), np.nan)
    return pd.DataFrame(
        {
            "group": group,
            "kind": pair_kind_names(pairs, test.resolved.nodes, suffix),
            "measured_speedup": np.exp(measured),
            "predicted_speedup": np.exp(predicted),
            "analytical_speedup": np.exp(analytical),
            "lower": np.exp(low),
            "upper": np.exp(high),
        }
    )


def pair_kind_names(pairs: pd.DataFrame, nodes: np.ndarray, suffix: str = "") -> np.ndarray:
    """Each pair's kind as reported: n to 2n pairs where either run spans nodes are ``gpus, multi-node``."""
    kind = pairs["kind"].to_numpy(object).copy()
    spans = (nodes[pairs["a"].to_numpy()] > 1) | (nodes[pairs["b"].to_numpy()] > 1)
    kind[(kind == "gpus") & spans] = "gpus, multi-node"
    return np.array([k + suffix for k in kind], object)


def step_summary(ds: Dataset, result: HeldOut, by: np.ndarray) -> pd.DataFrame:
    """Per group of ``by`` (and overall): errors of the three models, coverage and width of the intervals."""
    rows = result.scored
    truth = ds.log_measured_s
    records = []
    keys = list(pd.unique(by[rows])) + ["all"]
    for key in keys:
        mask = rows & ((by == key) if key != "all" else True)
        if not mask.any():
            continue
        covered = (np.exp(truth[mask]) >= result.lower_s[mask]) & (np.exp(truth[mask]) <= result.upper_s[mask])
        width = (result.upper_s[mask] - result.lower_s[mask]) / np.exp(result.log_residual_model_s[mask])
        record = {"group": key, "n": int(mask.sum())}
        for name, log_pred in (
            ("analytical", result.log_physics_s[mask]),
            ("pure_ml", result.log_pure_ml_s[mask]),
            ("residual", result.log_residual_model_s[mask]),
        ):
            stats = summarize(ape(log_pred, truth[mask]))
            record.update({f"{name}_{k}": v for k, v in stats.items() if k != "n"})
        record["coverage"] = float(covered.mean())
        record["mean_relative_width"] = float(width.mean())
        records.append(record)
    return pd.DataFrame(records)


def losses_within_groups(
    ds: Dataset, result: HeldOut, protocol: str, inner: str, min_runs: int, margin_points: float
) -> pd.DataFrame:
    """Inside each held-out group, per value of the run column ``inner``: where the residual is worse than the physics alone.

    A group can keep the no-harm rule while a part of it breaks it (a GPU
    type's other models gain what one of them loses). Each (group, ``inner``)
    cell of at least ``min_runs`` runs whose residual MAPE exceeds the
    physics' by more than ``margin_points`` is listed, with the points of the
    whole protocol's MAPE that the cell costs: (residual - physics) APE summed
    over its runs, over every scored run of the protocol.
    """
    rows = result.scored
    truth = ds.log_measured_s[rows]
    frame = pd.DataFrame({
        "protocol": protocol,
        "group": result.group[rows].astype(str),
        "within": text_keys(ds.runs[inner]).to_numpy(object)[rows],
        "residual": ape(result.log_residual_model_s[rows], truth),
        "physics": ape(result.log_physics_s[rows], truth),
    })  # fmt: skip
    cells = frame.groupby(["protocol", "group", "within"], sort=False).agg(
        n=("residual", "size"), physics_mape=("physics", "mean"), residual_mape=("residual", "mean"),
        lost=("residual", "sum"), kept=("physics", "sum"),
    ).reset_index()
    cells["within"] = f"{inner} " + cells["within"].astype(str)
    cells["points_of_protocol_lost"] = 100.0 * (cells["lost"] - cells["kept"]) / max(len(frame), 1)
    worse = (cells["n"] >= min_runs) & (cells["residual_mape"] > cells["physics_mape"] + margin_points / 100.0)
    return cells.loc[worse].drop(columns=["lost", "kept"]).reset_index(drop=True)


#: Held-out groups with at least this many pairs of a kind have their speedup coverage reported apiece.
PAIR_GROUP_MIN_PAIRS = 30


def _pair_coverage(part: pd.DataFrame) -> tuple[float, float]:
    """Interval coverage and mean relative width of pairs; pairs without an interval count for neither."""
    measured = part["measured_speedup"].to_numpy()
    lower, upper = part["lower"].to_numpy(float), part["upper"].to_numpy(float)
    has_interval = np.isfinite(lower) & np.isfinite(upper)
    if not has_interval.any():
        return float("nan"), float("nan")
    covered = (measured >= lower) & (measured <= upper)
    width = (upper - lower) / part["predicted_speedup"].to_numpy(float)
    return float(covered[has_interval].mean()), float(width[has_interval].mean())


def pair_group_summary(frames: list[pd.DataFrame], min_pairs: int = PAIR_GROUP_MIN_PAIRS) -> pd.DataFrame:
    """Per kind and held-out group with at least ``min_pairs`` pairs: pairs, coverage, mean relative width."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["kind", "group", "pairs", "coverage", "mean_relative_width"])
    records = []
    for (kind, group), part in pd.concat(frames, ignore_index=True).groupby(["kind", "group"], sort=True):
        if len(part) >= min_pairs:
            coverage, width = _pair_coverage(part)
            records.append({"kind": kind, "group": str(group), "pairs": len(part), "coverage": coverage, "mean_relative_width": width})
    return pd.DataFrame(records, columns=["kind", "group", "pairs", "coverage", "mean_relative_width"])


def pair_summary(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Per kind of what-if: speedup-ratio errors of the analytical and residual models, interval coverage and
    width over all pairs, and over the held-out groups of :func:`pair_group_summary` how many fall below,
    inside and above 88-92% coverage and their mean distance from 90%."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    pairs = pd.concat(frames, ignore_index=True)
    by_group = pair_group_summary(frames)
    records = []
    for kind, part in pairs.groupby("kind"):
        measured = part["measured_speedup"].to_numpy()
        coverage, width = _pair_coverage(part)
        groups = by_group.loc[(by_group["kind"] == kind) & by_group["coverage"].notna(), "coverage"].to_numpy(float)
        records.append(
            {
                "kind": kind,
                "pairs": len(part),
                "analytical_mape": float(np.mean(np.abs(part["analytical_speedup"] / measured - 1))),
                "residual_mape": float(np.mean(np.abs(part["predicted_speedup"] / measured - 1))),
                "residual_median_ape": float(np.median(np.abs(part["predicted_speedup"] / measured - 1))),
                "direction_right": float(np.mean(np.sign(np.log(part["predicted_speedup"])) == np.sign(np.log(measured)))),
                "coverage": coverage,
                "mean_relative_width": width,
                "groups": len(groups),
                "groups_below": int(np.sum(groups < 0.88)),
                "groups_within": int(np.sum((groups >= 0.88) & (groups <= 0.92))),
                "groups_above": int(np.sum(groups > 0.92)),
                "group_coverage_gap": float(np.mean(np.abs(groups - 0.9))) if len(groups) else float("nan"),
            }
        )
    return pd.DataFrame(records)
