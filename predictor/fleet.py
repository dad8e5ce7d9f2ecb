"""Score a whole fleet of jobs: every row predicted, every row kept, output written atomically.

A fleet is a table (Parquet or CSV) with the flat job columns of
:mod:`features.jobspec`; other columns (job ids, owners, GPU-hours) pass
through untouched, except columns named like a prediction column, which a
fresh scoring replaces. Rows come out in the order they went in; a row that
breaks a rule keeps its place with its message in ``error`` and NaN
predictions.

This module is the public face of fleet scoring; the work is done by
:mod:`predictor.fleet_input` (reading, first checks),
:mod:`predictor.fleet_configs` (distinct configurations),
:mod:`predictor.fleet_scoring` (scoring under a scenario, the local engine),
:mod:`predictor.fleet_dask` (the Dask engine), :mod:`predictor.fleet_columns`
(the output columns), :mod:`predictor.fleet_output` (atomic writing) and
:mod:`predictor.fleet_summary` (the terminal summary).

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
  learned model), ``throughput_ratio`` (target / baseline samples per
  second: the speedup times the ratio of samples per step, which the GPU
  count or batch of a what-if changes), ``target_bottleneck``,
  ``target_total_gpus``; a row whose
  target fails (say, ``allreduce-nvlink`` on a GPU without NVLink) keeps its
  baseline and gets NaN here, with the reason in ``error``;
* ``extrapolation``: with a learned model, why a job lies outside its
  training data, and where its interval is therefore the pooled one;
* ``error``: missing where the row is fine.
"""

from predictor.fleet_columns import (
    BASELINE_COLUMNS,
    OUTPUT_COLUMNS,
    SCENARIO_COLUMNS,
    SCORED_FIELDS,
    family_column,
)
from predictor.fleet_configs import ConfigScores, distinct_configs
from predictor.fleet_dask import iter_scored_dask, score_fleet_dask
from predictor.fleet_input import (
    FLEET_FORMATS,
    FleetInputWarning,
    check_fleet_columns,
    fleet_format,
    read_fleet,
    read_fleet_dask,
)
from predictor.fleet_output import remove_stale_temporaries, write_atomic
from predictor.fleet_scoring import DEFAULT_CHUNK_ROWS, iter_scored, predictor_for, score_configs, score_fleet, score_frame
from predictor.fleet_summary import FleetSummary, summarize

__all__ = [
    "BASELINE_COLUMNS",
    "DEFAULT_CHUNK_ROWS",
    "FLEET_FORMATS",
    "OUTPUT_COLUMNS",
    "SCENARIO_COLUMNS",
    "SCORED_FIELDS",
    "ConfigScores",
    "FleetInputWarning",
    "FleetSummary",
    "check_fleet_columns",
    "distinct_configs",
    "family_column",
    "fleet_format",
    "iter_scored",
    "iter_scored_dask",
    "predictor_for",
    "read_fleet",
    "read_fleet_dask",
    "remove_stale_temporaries",
    "score_configs",
    "score_fleet",
    "score_fleet_dask",
    "score_frame",
    "summarize",
    "write_atomic",
]
