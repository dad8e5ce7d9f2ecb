"""The learned layer at prediction time: residual, conformal intervals, domain checks.

Given resolved jobs and their breakdown, the artefact's booster predicts the
log residual on the physical features; the step time is the analytical
baseline times its exponential. Intervals come from the artefact's
calibration tables; a speedup's interval calibrates the log ratio directly.
Jobs outside the training data (an unseen GPU, sizes beyond the range seen)
get a note. An unseen GPU type keeps its bin, whose out-of-fold residuals
are those of GPU types held out; every other reason sends the interval to
the pooled bin. Outside the seen framework, model family or combinations
(:mod:`predictor.domain`) the correction also fades toward the physics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from features.analytical import BreakdownArrays
from features.build import range_columns, stacked_features
from features.resolve import ResolvedJobs
from features.table import factorize
from predictor.artefact import Artefact, ArtefactError
from predictor.calibration import IDENTITY, POOLED, CalibrationTable, pair_bins, pair_kind, pair_share, step_bins
from predictor.domain import unseen_facts

#: User-facing names of :data:`features.build.RANGE_COLUMNS`, whose training range bounds the model's domain.
RANGE_FEATURES = {
    "log_total_gpus": ("total GPUs", lambda v: 10**v),
    "log_batch_size_per_gpu": ("batch size per GPU", lambda v: 10**v),
    "log_flops_per_sample": ("FLOPs per sample", lambda v: 10**v),
    "log_peak_flops_per_s": ("peak FLOP/s", lambda v: 10**v),
    "workers_per_server": ("workers per server", lambda v: v),
    "software_year": ("software release year", lambda v: v),
}


@dataclass
class LearnedTimes:
    log_step_time_s: np.ndarray
    lower_s: np.ndarray
    upper_s: np.ndarray
    extrapolation: np.ndarray  # None, or why the job is outside the training data
    pooled: np.ndarray | None = None  # True where the interval comes from the pooled bin
    log_physics_s: np.ndarray | None = None  # the baseline the correction starts from
    log_correction: np.ndarray | None = None  # the residual's whole log correction, before any fading
    kept: np.ndarray | None = None  # the share of it the job keeps (below 1 outside the training data)


def predict_times(artefact: Artefact, resolved: ResolvedJobs, breakdown: BreakdownArrays, confidence_level: float) -> LearnedTimes:
    return predict_times_together(artefact, [(resolved, breakdown)], confidence_level)[0]


def predict_times_together(
    artefact: Artefact, sides: Sequence[tuple[ResolvedJobs, BreakdownArrays]], confidence_level: float
) -> list[LearnedTimes]:
    """:func:`predict_times` of several tables, their feature rows sent through the trees in one pass.

    A baseline and its what-if target share most feature rows (a what-if
    leaves every feature of a job it does not touch alike), and the trees see
    each distinct row once; each row's prediction is the same as alone.
    """
    # One float32 matrix for every side (the trees split on float32 values), each column written once.
    values, frames = stacked_features(sides)
    if frames and list(frames[0].names) != artefact.feature_names:
        raise ArtefactError(f"model at {artefact.path} was trained on other features; retrain it with `predict train`", artefact.path)
    residuals = np.split(artefact.predict_residual(values), np.cumsum([len(frame.values) for frame in frames])[:-1])
    return [
        _times(artefact, resolved, breakdown, frame, residual, confidence_level)
        for (resolved, breakdown), frame, residual in zip(sides, frames, residuals)
    ]


def _times(artefact: Artefact, resolved: ResolvedJobs, breakdown: BreakdownArrays, frame, residual: np.ndarray, confidence_level: float) -> LearnedTimes:
    log_physics = np.log(breakdown.step_time_s(artefact.baseline))
    domain = artefact.metadata["domain"]
    extrapolation, pooled = domain_notes(domain, resolved, frame)
    kept, combination_notes = unseen_facts(domain, resolved)
    extrapolation = _merge_notes(extrapolation, combination_notes)
    pooled |= combination_notes != None  # noqa: E711
    extrapolation = _append_note(extrapolation, pooled, "the interval is the pooled one")
    bins = step_bins(artefact.step_calibration, resolved.table)
    bins[pooled] = POOLED
    log_step, low, high = faded_prediction(artefact.step_calibration, log_physics, residual, kept, bins, confidence_level)
    return LearnedTimes(log_step, np.exp(low), np.exp(high), extrapolation, pooled, log_physics, residual, kept)


def faded_prediction(
    calibration: CalibrationTable, log_physics: np.ndarray, residual: np.ndarray, kept: np.ndarray, bins: np.ndarray, confidence_level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log step time and its interval, the correction faded toward the physics: each job keeps the share
    ``kept`` of it (below 1 where facts are unseen, :func:`predictor.domain.unseen_facts`).

    A faded job's interval holds the unfaded prediction's interval too. The
    held-out evaluation scores predictions made by this same function.
    """
    log_step = log_physics + residual * kept
    low, high = calibration.interval(log_step, bins, confidence_level)
    faded = kept < 1
    if faded.any():
        low_full, high_full = calibration.interval(log_physics[faded] + residual[faded], bins[faded], confidence_level)
        low[faded], high[faded] = np.minimum(low[faded], low_full), np.maximum(high[faded], high_full)
    return log_step, low, high


def _pooled(times: LearnedTimes) -> np.ndarray:
    """Where a side's interval is the pooled one (every extrapolating row, for times given without the flag)."""
    return times.pooled if times.pooled is not None else times.extrapolation != None  # noqa: E711


def _merge_notes(notes: np.ndarray, more: np.ndarray) -> np.ndarray:
    """Both notes of each job, joined; text is joined once per distinct pair of notes, not once per row."""
    has_more = more != None  # noqa: E711
    if not has_more.any():
        return notes
    out = np.where(has_more, more, notes)
    both = np.flatnonzero(has_more & (notes != None))  # noqa: E711
    if len(both):
        first_codes, firsts = factorize(notes[both])
        second_codes, seconds = factorize(more[both])
        pair_codes, pairs = factorize(first_codes * len(seconds) + second_codes)
        joined = np.array([f"{firsts[p // len(seconds)]}; {seconds[p % len(seconds)]}" for p in pairs], object)
        out[both] = joined[pair_codes]
    return out


def _append_note(notes: np.ndarray, mask: np.ndarray, text: str) -> np.ndarray:
    """``notes`` with "; ``text``" after the note of every row of ``mask`` (once per distinct note)."""
    rows = np.flatnonzero(mask & (notes != None))  # noqa: E711
    if not len(rows):
        return notes
    out = notes.copy()
    codes, distinct = factorize(notes[rows])
    out[rows] = np.array([f"{note}; {text}" for note in distinct], object)[codes]
    return out


def domain_notes(domain: dict, resolved: ResolvedJobs, frame) -> tuple[np.ndarray, np.ndarray]:
    """Per job, why it lies outside the training ``domain`` (an artefact's ``metadata["domain"]``; None where it
    does not), and whether its interval comes from the pooled bin.

    Every note sends the interval to the pooled bin but one: a GPU type not
    in the training data. The calibration residuals are out of fold with
    whole GPU types held out (:mod:`training.cv`), so the job's own bin
    already says how far off the model is on a GPU type it never saw.
    Notes are built per distinct name or per range, never per row, so a
    million-job fleet pays for them once.
    """
    notes = np.full(len(resolved.ok), None, object)
    pooled = np.zeros(len(resolved.ok), bool)
    for column in ("gpu", "architecture"):
        if column == "gpu":  # by catalogue name: an alias ("V100") names a GPU the data may hold
            codes, names = resolved.device_index, list(resolved.catalogs.device_names)
            counted_as = list(resolved.catalogs.device_domain_names)  # a silicon twin counts as its twin
        else:
            codes, names = resolved.table.codes(column)
            counted_as = names
        seen = domain["gpus" if column == "gpu" else "architectures"]
        present = np.bincount(codes[codes >= 0], minlength=len(names)) > 0
        for u, name in enumerate(names):
            if name is not None and counted_as[u] not in seen and present[u]:
                rows = resolved.ok & (codes == u)
                _note(notes, rows, f"{column} {name} is not in the training data")
                if column == "architecture":
                    pooled |= rows
    for feature, values in range_columns(resolved, frame).items():
        if feature not in domain["ranges"]:  # an artefact trained before the range was recorded
            continue
        label, to_user = RANGE_FEATURES[feature]
        low, high = domain["ranges"][feature]
        with np.errstate(invalid="ignore"):
            below, above = values < low - 1e-9, values > high + 1e-9
        _note(notes, resolved.ok & below, f"{label} below the training range ({to_user(low):.4g}-{to_user(high):.4g})")
        _note(notes, resolved.ok & above, f"{label} above the training range ({to_user(low):.4g}-{to_user(high):.4g})")
        pooled |= resolved.ok & (below | above)
    return notes, pooled


def _note(notes: np.ndarray, mask: np.ndarray, text: str) -> None:
    if not mask.any():
        return
    fresh = mask & (notes == None)  # noqa: E711
    notes[fresh] = text
    more = mask & ~fresh
    notes[more] = notes[more] + f"; {text}"


def pair_correction_change(base_correction: np.ndarray, target_correction: np.ndarray, base_kept: np.ndarray, target_kept: np.ndarray) -> np.ndarray:
    """The change of the learned log correction from a baseline to its what-if target, faded by the share
    the less familiar side keeps.

    Fading each side by its own share would apply a correction to one side
    only where the other lies outside the training data: the residual's base
    rate, common to every job, would then move the speedup, and a what-if
    that only adds bandwidth could come out slower. Both sides fade alike,
    so what the correction says about both cancels.
    """
    return np.minimum(base_kept, target_kept) * (base_correction - target_correction)


@dataclass
class LearnedSpeedup:
    speedup: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    p_speedup_gt_1: np.ndarray
    share: np.ndarray  # of the learned correction's change, per what-if (1 where none was estimated)
    #: P(the target processes more samples per second): P(speedup x samples_ratio > 1).
    p_more_throughput: np.ndarray | None = None


def predict_speedup(
    artefact: Artefact,
    base: LearnedTimes,
    target: LearnedTimes,
    base_columns: dict[str, np.ndarray],
    target_columns: dict[str, np.ndarray],
    confidence_level: float,
    samples_ratio: np.ndarray | None = None,
) -> LearnedSpeedup:
    """Speedup = the physics' speedup times the kind's share of the correction's change
    (:func:`predictor.calibration.pair_share`), its log calibrated on measured pairs.

    The change is that of the whole corrections, faded by the share of the
    correction the less familiar side keeps (:func:`pair_correction_change`).
    ``samples_ratio`` (the target's samples per step over the baseline's, 1 where
    not given) sets the threshold of ``p_more_throughput``.
    """
    kinds = pair_kind(base_columns, target_columns)
    log_ratio = base.log_step_time_s - target.log_step_time_s
    share = pair_share(artefact.pair_shares, kinds)
    if base.log_physics_s is not None and target.log_physics_s is not None:
        physics_ratio = base.log_physics_s - target.log_physics_s
        if base.log_correction is not None and target.log_correction is not None:
            change = pair_correction_change(base.log_correction, target.log_correction, base.kept, target.kept)
        else:
            change = log_ratio - physics_ratio
        log_ratio = physics_ratio + share * change
    table = artefact.speedup_calibration
    # Throughput grows past 1x where log speedup > -log(samples ratio).
    more_samples = -np.log(np.ones(len(log_ratio)) if samples_ratio is None else np.asarray(samples_ratio, float))
    if table is None:  # no pairs to calibrate on: the step-time intervals bound the ratio
        low = np.log(base.lower_s) - np.log(target.upper_s)
        high = np.log(base.upper_s) - np.log(target.lower_s)
        p = np.where(log_ratio > 0, 1.0, 0.0)
        p_more = np.where(log_ratio > more_samples, 1.0, 0.0)
    else:
        bins = pair_bins(table, kinds)
        bins[_pooled(base) | _pooled(target)] = POOLED
        low, high = table.interval(log_ratio, bins, confidence_level)
        p = table.probability_above(log_ratio, bins, 0.0)
        p_more = table.probability_above(log_ratio, bins, more_samples)
    # The identity what-if has the same features on both sides, so its log ratio is exactly 0 already;
    # its interval is the point 1.0x (nothing changes), and nothing makes it faster.
    identity = kinds == IDENTITY
    low[identity] = high[identity] = 0.0
    p[identity] = p_more[identity] = 0.0
    return LearnedSpeedup(np.exp(log_ratio), np.exp(low), np.exp(high), p, share, p_more)
