"""Layout jobs in a fleet: transformers with tensor/pipeline/context/sharded data parallelism.

A fleet row with a transformer's shape or layout fields (or a model family
name: ``gpt``, ``llama``) is a layout job, answered as ``predict time`` and
``predict speedup`` answer one (:mod:`predictor.layout`): by the analytical
layout model alone, with no learned residual and no interval. Its numbers go
into the fleet's columns as follows:

* ``step_time_s``, ``throughput_samples_per_s`` (sequences of the global
  batch per second), ``total_gpus``, and under a what-if the target's step,
  GPUs and ``speedup``;
* ``compute_s``: the step's device work (matrix multiplications,
  memory-bound operators and the optimizer step); ``comm_s``: the
  communication on its critical path (tensor-parallel, exposed
  context-parallel and data-parallel, pipeline transfers). ``io_s`` and
  ``memory_s`` (the PAI components at datasheet rates, which the layout
  model does not compute) stay empty, and so does the pipeline bubble,
  which is idle time: these jobs stay out of the fleet report's component
  shares, which add up to the step;
* ``arithmetic_floor_s``: the model's FLOPs of one step shared by every GPU
  at its dense peak (a model FLOPs utilisation of 1), under which no
  measured step of the job as stated can lie;
* ``memory_share_of_gpu``: the layout's memory per GPU over the GPU's (at
  most 1: a layout that does not fit is an error);
* ``bottleneck``: the layout's largest component (the layout labels of
  :data:`predictor.fleet_columns.FLEET_BOTTLENECKS`);
* ``extrapolation`` (with a learned model): why no interval comes with it.

A layout that does not fit its GPUs' memory is an error, as one job's is:
the row keeps its place and gets no step time. The intervals, the
probability of a speedup and the ``why_`` columns stay empty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from features.errors import SpecError
from features.jobspec import Job
from features.layout import LAYOUT_LEAVES, SHAPE_LEAVES, does_not_fit_message
from features.table import RULES, is_missing, validate_columns
from features.transformer import FAMILIES
from predictor.layout import LayoutPrediction, predict_layout, speedup_layout

#: The parts of a layout job's step, as reports list them (the keys of
#: :attr:`features.layout.LayoutBreakdown.components_s`, in its order); they add up to its step.
LAYOUT_PARTS = {
    "compute": "compute",
    "memory": "memory-bound operators",
    "tp_communication": "tensor-parallel communication",
    "cp_communication": "context-parallel communication (exposed)",
    "pipeline_bubble": "pipeline bubble",
    "pipeline_transfers": "pipeline transfers",
    "dp_communication": "data-parallel communication (exposed)",
    "optimizer": "optimizer step",
}

#: What the ``extrapolation`` column says of a layout job.
LAYOUT_NOTE = "layout job: analytical layout model alone (no learned residual, no interval)"

_COMMUNICATION = ("tp_communication", "cp_communication", "pipeline_transfers", "dp_communication")


def layout_configs(distinct: dict[str, np.ndarray], k: int) -> np.ndarray:
    """Which of ``k`` configurations are layout jobs, as :func:`features.layout_spec.is_layout_job` reads one row."""
    layout = np.zeros(k, bool)
    for leaf in (*SHAPE_LEAVES, *LAYOUT_LEAVES):
        values = distinct.get(leaf)
        if values is not None:
            layout |= _per_value(values, lambda v: not (v is None or (isinstance(v, str) and not v.strip())))
    models = distinct.get("model")
    if models is not None:
        layout |= _per_value(models, lambda m: isinstance(m, str) and m.strip().lower() in FAMILIES)
    return layout


def _per_value(values: np.ndarray, test) -> np.ndarray:
    """``test`` of each value (None for missing), computed once per distinct value."""
    if values.dtype.kind == "f":
        return ~np.isnan(values) if test(0.0) else np.zeros(len(values), bool)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    passed = np.array([bool(test(_plain(u))) for u in uniques] + [bool(test(None))], bool)
    return passed[codes]


def score_layout_configs(distinct: dict[str, np.ndarray], k: int, to: Sequence[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Numbers (float columns), bottleneck labels and errors of ``k`` layout configurations.

    Returns the columns by name (NaN where a number does not apply or a row
    failed; the labels ``bottleneck`` and ``target_bottleneck`` as object
    arrays, None where none) and each configuration's error (None where fine).
    """
    names = ("step_time_s", "throughput_samples_per_s", "compute_s", "comm_s", "total_gpus", "arithmetic_floor_s",
             "memory_share_of_gpu", "target_step_time_s", "speedup", "throughput_ratio", "target_total_gpus",
             "target_memory_share_of_gpu")  # fmt: skip
    numbers = {name: np.full(k, np.nan) for name in names}
    labels = {name: np.full(k, None, object) for name in ("bottleneck", "target_bottleneck")}
    rows, errors = job_rows(distinct, k)
    for i, row in enumerate(rows):
        if row is None:
            continue
        job = Job(name="", row=row)
        try:
            base = predict_layout(job)
        except SpecError as error:
            errors[i] = str(error)
            continue
        if not base.fits:
            errors[i] = does_not_fit_message(base.breakdown, base.job.gpu.name)
            continue
        _write(numbers, labels, i, base, "")
        if not to:
            continue
        try:
            target = speedup_layout(job, to).target
        except SpecError as error:
            errors[i] = str(error)
            continue
        if not target.fits:
            errors[i] = "--to: " + does_not_fit_message(target.breakdown, target.job.gpu.name)
            continue
        _write(numbers, labels, i, target, "target_")
        numbers["speedup"][i] = base.step_time_s / target.step_time_s
        numbers["throughput_ratio"][i] = numbers["speedup"][i] * target.job.layout.global_batch_size / base.job.layout.global_batch_size
    return {**numbers, **labels}, errors


def layout_parts_s(distinct: dict[str, np.ndarray], k: int) -> np.ndarray:
    """Seconds of each of :data:`LAYOUT_PARTS` for ``k`` configurations (NaN where not a layout job that fits)."""
    parts = np.full((k, len(LAYOUT_PARTS)), np.nan)
    layout = np.flatnonzero(layout_configs(distinct, k))
    rows, _ = job_rows({leaf: values[layout] for leaf, values in distinct.items()}, len(layout))
    for i, row in zip(layout, rows):
        if row is None:
            continue
        try:
            p = predict_layout(Job(name="", row=row))
        except SpecError:
            continue
        if p.fits:
            parts[i] = [p.breakdown.components_s[name] for name in LAYOUT_PARTS]
    return parts


def job_rows(distinct: dict[str, np.ndarray], k: int) -> tuple[list[dict[str, Any] | None], np.ndarray]:
    """Each configuration as the flat row a job file gives (None where it fails the field rules), and the errors.

    The rules are those every job passes (:func:`features.table.validate_columns`: types, bounds, choices);
    a row keeps its values as given, numbers as the rules read them, and no default the rules would
    fill, so that the layout model applies its own, as for one job.
    """
    table = validate_columns(distinct, k)
    missing = {leaf: is_missing(values) for leaf, values in distinct.items()}
    rows: list[dict[str, Any] | None] = []
    for i in range(k):
        if table.errors[i] is not None:
            rows.append(None)
            continue
        row = {}
        for leaf, values in distinct.items():
            rule = RULES.get(leaf)
            if missing[leaf][i] or rule is None or rule.kind == "str":
                row[leaf] = None if missing[leaf][i] else _plain(values[i])
            elif rule.kind == "bool":
                row[leaf] = bool(table.columns[leaf][i])
            else:
                number = float(table.columns[leaf][i])
                row[leaf] = int(number) if rule.kind == "int" else number
        rows.append(row)
    return rows, table.errors.copy()


def _write(numbers: dict[str, np.ndarray], labels: dict[str, np.ndarray], i: int, p: LayoutPrediction, prefix: str) -> None:
    b = p.breakdown
    numbers[prefix + "step_time_s"][i] = b.step_time_s
    numbers[prefix + "total_gpus"][i] = p.job.layout.gpus
    numbers[prefix + "memory_share_of_gpu"][i] = b.memory.total_bytes / b.memory_capacity_bytes
    labels[prefix + "bottleneck"][i] = b.bottleneck
    if prefix:
        return
    components = b.components_s
    numbers["throughput_samples_per_s"][i] = p.job.layout.global_batch_size / b.step_time_s
    numbers["compute_s"][i] = components["compute"] + components["memory"] + components["optimizer"]
    numbers["comm_s"][i] = sum(components[name] for name in _COMMUNICATION)
    # The model's FLOPs shared by every GPU at its dense peak (MFU 1): no recompute, bubble or communication.
    numbers["arithmetic_floor_s"][i] = b.model_flops_per_step / (b.gpus * b.peak_flops_per_s)


def _plain(value: Any) -> Any:
    """A distinct configuration's cell as a job row holds it (None where missing)."""
    if hasattr(value, "item"):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value
