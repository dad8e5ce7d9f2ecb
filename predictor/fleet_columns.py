"""The columns a fleet scoring writes, their types, and the vocabulary of their labels."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from features.analytical import BOTTLENECKS
from features.fields import FLAT_FIELDS
from features.hardware import hardware_catalog

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
    # The least time the step's arithmetic can take at the GPU's dense peak (features.physics.arithmetic_floor_s):
    # a measured step below it was not measured on the job as stated.
    "arithmetic_floor_s",
    # The step's estimated memory per GPU over the GPU's (features.memory): above 1, it may not fit.
    "memory_share_of_gpu",
    # Where it may not: the fewest gradient-accumulation passes, dividing the batch per GPU, whose step
    # fits (features.memory.jobs_passes_to_fit); NaN where it fits or where not one sample a pass does.
    "passes_to_fit",
)
SCENARIO_COLUMNS = (
    "target_step_time_s",
    "speedup",
    # The target's samples per second over the baseline's: the speedup times the ratio of samples per
    # step, which differs from it where the what-if changes the GPU count or the batch.
    "throughput_ratio",
    "speedup_lower",
    "speedup_upper",
    "p_speedup_gt_1",
    "target_bottleneck",
    "target_total_gpus",
    "target_memory_share_of_gpu",
)
#: The labels of ``bottleneck`` and ``target_bottleneck``: a data-parallel job's bound, then a layout
#: job's largest component (:mod:`predictor.fleet_layout`).
FLEET_BOTTLENECKS = (*BOTTLENECKS, "tp_communication", "cp_communication", "pipeline_bubble", "pipeline_transfers",
                     "dp_communication", "optimizer")
#: Every column a scoring may write; input columns with these names are replaced.
OUTPUT_COLUMNS = (*BASELINE_COLUMNS, *SCENARIO_COLUMNS, "extrapolation", "error")
FAN_IN_SUFFIX = " (parameter-server fan-in)"


@lru_cache(maxsize=1)
def link_categories() -> tuple[str, ...]:
    names = [link.name for link in hardware_catalog().links]
    return (*names, *(name + FAN_IN_SUFFIX for name in names))


def categorical(values: np.ndarray, categories: Sequence[str]) -> pd.Categorical:
    """Labels (None for missing) as a categorical with fixed categories.

    Fixed categories keep every chunk and partition of one fleet the same
    dtype; a label outside them (it should not happen) is added, not lost.
    """
    codes, labels = pd.factorize(np.asarray(values, dtype=object))  # None -> -1
    extra = sorted(set(labels) - set(categories))
    position = {name: i for i, name in enumerate([*categories, *extra])}
    lookup = np.array([position[label] for label in labels] + [-1], np.int16)
    return pd.Categorical.from_codes(lookup[codes], categories=[*categories, *extra])


def family_column(family: str) -> str:
    """The fleet column of a bottleneck family's factor ("network communication" -> "why_network_communication")."""
    return "why_" + "".join(c if c.isalnum() else "_" for c in family).replace("__", "_")


def scored_columns(learned: bool, scenario: bool) -> list[str]:
    """The number and label columns a scoring writes, in order (then the ``why_`` ones, ``extrapolation`` and ``error``)."""
    names = [*BASELINE_COLUMNS, *(SCENARIO_COLUMNS if scenario else ())]
    if not learned:
        names = [c for c in names if c not in ("lower_s", "upper_s", "speedup_lower", "speedup_upper", "p_speedup_gt_1")]
    return names


def empty_scored(frame: pd.DataFrame, learned: bool, scenario: bool, explain: bool = False) -> pd.DataFrame:
    """A scored frame without rows, with the columns, order and types a non-empty one has (a Dask ``meta``)."""
    labels = {"bottleneck": FLEET_BOTTLENECKS, "bottleneck_link": link_categories(), "target_bottleneck": FLEET_BOTTLENECKS}
    text = {"extrapolation", "error"}
    names = scored_columns(learned, scenario)
    if explain:
        from features.build import FAMILIES

        names += [family_column(f) for f in FAMILIES] + ["why_dominant"]
        labels["why_dominant"] = FAMILIES
    names += [*(["extrapolation"] if learned else []), "error"]
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
