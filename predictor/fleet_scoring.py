"""Scoring a fleet: each distinct job configuration predicted once, under the scenario, in chunks.

:func:`score_configs` is the one scoring function. The local engine
(:func:`iter_scored`) hands it every distinct configuration of the whole
fleet and spreads the answers over the rows chunk by chunk; the Dask engine
(:mod:`predictor.fleet_dask`) calls :func:`score_frame` (the same, for one
frame) on every partition.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from features import physics, scenarios
from features.memory import jobs_memory, jobs_passes_to_fit
from features.table import validate_columns
from predictor.fleet_columns import (
    FLEET_BOTTLENECKS, OUTPUT_COLUMNS, SCENARIO_COLUMNS, categorical, empty_scored, family_column, link_categories, scored_columns,
)
from predictor.fleet_configs import ConfigScores, distinct_configs
from predictor.fleet_layout import LAYOUT_NOTE, layout_configs, score_layout_configs

DEFAULT_CHUNK_ROWS = 200_000


@lru_cache(maxsize=8)
def predictor_for(overlap: str = "none", model: str = "default", confidence_level: float = 0.9):
    """The predictor a scoring uses, built once per process (a Dask worker loads the model once).

    ``model`` is a model directory, ``"default"`` (the shipped model, or the
    analytical model alone when there is none) or ``"none"``.
    """
    from predictor.api import Predictor

    return Predictor(model=None if model == "none" else model, overlap=overlap, confidence_level=confidence_level)


def score_configs(
    distinct: dict[str, np.ndarray],
    k: int,
    steps: Sequence,
    predictor,
    explain: bool | str = False,
) -> ConfigScores:
    """Predictions for ``k`` job configurations given column by column (see :func:`score_frame`).

    Layout jobs among them are answered by the layout model (:mod:`predictor.fleet_layout`), the rest
    together by ``predictor``.
    """
    layout = layout_configs(distinct, k)
    if not layout.any():
        return _score_data_parallel(distinct, k, steps, predictor, explain)
    parts, order = [], []
    data_parallel = np.flatnonzero(~layout)
    if data_parallel.size:
        parts.append(_score_data_parallel(_take(distinct, data_parallel), data_parallel.size, steps, predictor, explain))
        order.append(data_parallel)
    rows = np.flatnonzero(layout)
    parts.append(_score_layout(_take(distinct, rows), rows.size, steps, predictor.method == "learned", explain))
    order.append(rows)
    return ConfigScores.concat(parts).take(np.argsort(np.concatenate(order), kind="stable"))


def _take(distinct: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {leaf: values[rows] for leaf, values in distinct.items()}


def _score_layout(distinct: dict[str, np.ndarray], k: int, steps: Sequence, learned: bool, explain: bool | str) -> ConfigScores:
    """Layout configurations' scores, in the columns and types the data-parallel ones have."""
    values, errors = score_layout_configs(distinct, k, [step.text for step in steps])
    labels = {"bottleneck": FLEET_BOTTLENECKS, "target_bottleneck": FLEET_BOTTLENECKS, "bottleneck_link": link_categories()}
    columns: dict[str, Any] = {}
    for name in scored_columns(learned, bool(steps)):
        if name in labels:
            columns[name] = categorical(values.get(name, np.full(k, None, object)), labels[name])
        else:
            columns[name] = values.get(name, np.full(k, np.nan))
    if explain:
        from features.build import FAMILIES

        columns.update({family_column(f): np.full(k, np.nan) for f in FAMILIES})
        columns["why_dominant"] = pd.Categorical.from_codes(np.full(k, -1, np.int16), categories=list(FAMILIES))
    extrapolation = None
    if learned:
        extrapolation = np.full(k, LAYOUT_NOTE, object)
        extrapolation[~np.isfinite(columns["step_time_s"])] = None
    return ConfigScores(columns, extrapolation, errors)


def _score_data_parallel(
    distinct: dict[str, np.ndarray], k: int, steps: Sequence, predictor, explain: bool | str = False
) -> ConfigScores:
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
        "bottleneck": (base.bottleneck, FLEET_BOTTLENECKS),
        "bottleneck_link": (base.bottleneck_link, link_categories()),
    }
    numbers["total_gpus"] = base.resolved.total_gpus
    numbers["arithmetic_floor_s"] = _arithmetic_floor_s(base.resolved, k)
    numbers["memory_share_of_gpu"], numbers["passes_to_fit"] = _memory_columns(base.resolved)
    if target is not None:
        numbers["target_step_time_s"] = target.step_time_s
        numbers["speedup"] = result.speedup
        numbers["throughput_ratio"] = result.speedup * result.samples_ratio
        for name in ("speedup_lower", "speedup_upper", "p_speedup_gt_1"):
            if getattr(result, name) is not None:
                numbers[name] = getattr(result, name)
        labels["target_bottleneck"] = (target.bottleneck, FLEET_BOTTLENECKS)
        numbers["target_total_gpus"] = target.resolved.total_gpus
        numbers["target_memory_share_of_gpu"] = _memory_columns(target.resolved, passes=False)[0]

    columns: dict[str, Any] = {name: np.asarray(values, float) for name, values in numbers.items()}
    _blank_failed(columns, base, target)
    failed = ~np.isfinite(base.step_time_s)
    for name, (values, categories) in labels.items():
        values = np.array(values, dtype=object)
        values[failed] = None  # a failed row has no bottleneck, nor a target one
        if name == "target_bottleneck":
            values[~np.isfinite(target.step_time_s)] = None
        columns[name] = categorical(values, categories)
    columns = {name: columns[name] for name in OUTPUT_COLUMNS if name in columns}
    if explain:
        columns.update(_explanation_columns(predictor, base, "treeshap" if explain is True else explain))
    extrapolation = None if base.extrapolation is None else np.array(base.extrapolation, dtype=object)
    if extrapolation is not None:
        extrapolation[failed] = None  # a failed row has no prediction to qualify
    return ConfigScores(columns, extrapolation, np.asarray(errors, dtype=object))


def _arithmetic_floor_s(resolved, k: int) -> np.ndarray:
    """Each configuration's arithmetic floor (NaN on a CPU device and where the job did not resolve)."""
    if resolved.matrix_flops_per_sample is None:
        return np.full(k, np.nan)
    return physics.arithmetic_floor_s(resolved.device_inputs())


def _memory_columns(resolved, passes: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Each configuration's estimated memory per GPU over its GPU's (NaN where not estimated), and with
    ``passes`` where above 1 the fewest passes that fit (NaN elsewhere)."""
    memory = jobs_memory(resolved)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = memory.total_bytes / memory.capacity_bytes
    if not passes:
        return share, None
    per_step = resolved.passes_per_step if resolved.passes_per_step is not None else np.ones(len(share))
    return share, jobs_passes_to_fit(memory, resolved.batch_size_per_gpu, per_step)


def _blank_failed(columns: dict[str, np.ndarray], base, target) -> None:
    """NaN in every number a failed configuration would otherwise carry.

    A configuration that fails validation has no prediction; one whose target
    fails has no speedup. Neither may carry a number that reads as an answer
    (an identity what-if's 1.0, say, or a probability of 0).
    """
    failed = ~np.isfinite(base.step_time_s)
    for name, values in columns.items():
        if name in SCENARIO_COLUMNS:
            values[failed | ~np.isfinite(target.step_time_s)] = np.nan
        else:
            values[failed] = np.nan


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
        return empty_scored(frame, learned=predictor.method == "learned", scenario=bool(steps), explain=explain)
    inverse, distinct, k = distinct_configs(frame)
    return score_configs(distinct, k, steps, predictor, explain).rows(frame, inverse)


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
