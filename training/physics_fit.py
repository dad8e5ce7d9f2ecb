"""Fitting the roofline physics' few constants on measured runs, and scoring it on held-out groups.

The constants (:class:`features.mechanisms.PhysicsConstants`: attainable
fractions of the matrix and memory roofs, the operator-size curve's
half-efficiency point, and scales on the software catalogue's launch latency
and host overhead) are fitted by minimising the mean absolute percentage
error of the physics' step time over the training runs (Nelder-Mead on their
logarithms, attainable fractions kept in (0, 1]), each cross-validation group
(a GPU type, an MLPerf benchmark, a testbed topology:
:func:`training.dataset.cv_groups`) counting as the square root of its runs,
as in the residual's fit: one GPU type holds 40% of the public runs, and an
unweighted fit tunes the physics for it. Held-out figures refit the
constants without the held-out group's runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from features.analytical import ARCHITECTURE_CODES
from features.catalog_base import CATALOG_DIR
from features.mechanisms import PHYSICS_CONSTANTS, PhysicsConstants, physics_constants
from features.resolve import ResolvedJobs
from training.cv import sample_weights
from training.dataset import cv_groups, network_of
from training.importers import is_mlperf

#: Start of every fit: attainable fractions near what large training kernels reach.
INITIAL = PhysicsConstants(
    matrix_efficiency_tensor=0.5,
    matrix_efficiency_fp32=0.7,
    memory_efficiency=0.7,
    half_efficiency_flops_per_sm=1e6,
    launch_scale=1.0,
    host_scale=1.0,
    tuned_efficiency_gain=1.5,
    tuned_memory_bound_fraction=0.5,
    mixed_precision_fp32_share=0.3,
    winograd_speedup=1.5,
    compiled_memory_bound_fraction=0.5,
    overlap_interference=0.2,
    tuned_overhead_scale=1.0,
    memory_bytes_per_s_per_sm=5e10,
)

_FRACTIONS = (
    "matrix_efficiency_tensor", "matrix_efficiency_fp32", "memory_efficiency", "tuned_memory_bound_fraction",
    "mixed_precision_fp32_share", "compiled_memory_bound_fraction", "overlap_interference",
)

#: Physical ranges the fit stays in (a constant the training runs say nothing about stays at a bound,
#: never at zero or infinity).
BOUNDS = {
    "matrix_efficiency_tensor": (0.05, 1.0),
    "matrix_efficiency_fp32": (0.05, 1.0),
    "memory_efficiency": (0.05, 1.0),
    "half_efficiency_flops_per_sm": (1e3, 1e10),
    "memory_bytes_per_s_per_sm": (1e9, 1e13),
    "launch_scale": (0.1, 10.0),
    "host_scale": (0.01, 100.0),
    "tuned_efficiency_gain": (1.0, 4.0),
    "tuned_memory_bound_fraction": (0.05, 1.0),
    "mixed_precision_fp32_share": (0.001, 1.0),
    # No credit up to F(4x4,3x3)'s 4x fewer multiplies.
    "winograd_speedup": (1.0, 4.0),
    "compiled_memory_bound_fraction": (0.05, 1.0),
    "overlap_interference": (0.001, 1.0),
    "tuned_overhead_scale": (0.01, 10.0),
}

#: Constants that scale a catalogue figure (kernel-launch latency, per-step host overhead) rather than
#: stand alone. The two add time per step alike for most models, so the runs barely tell them apart:
#: without the one model whose many small kernels separate them (Tacotron 2), a fit moved the launch
#: scale from 1.7 to 6.2 and the host scale from 1.7 to 0.04, and that model came out 2.6x too slow.
#: A weak prior keeps them near the catalogue (scale 1) unless the runs clearly ask otherwise.
CATALOGUE_SCALES = ("launch_scale", "host_scale", "tuned_overhead_scale")
#: Weight of that prior: MAPE points (as a fraction) per squared natural log of a scale; a scale of
#: 2 costs 0.5 points, a scale of 6 costs 3.2.
PRIOR_WEIGHT = 0.01

CONSTANTS_PATH = CATALOG_DIR / "physics_constants.json"


@dataclass
class PhysicsProblem:
    """Resolved runs and their measured step times, ready for repeated physics evaluations."""

    resolved: ResolvedJobs
    measured_s: np.ndarray
    #: Each run's cross-validation group (weights: each group counts as the square root of its runs); None: equal.
    groups: np.ndarray | None = None
    #: Evaluate through :meth:`features.resolve.ResolvedJobs.prepare_repeated_physics` (the same figures, faster);
    #: False computes them as one prediction does (``benchmarks/bench_physics_fit.py`` compares the two).
    prepared: bool = True

    def row_weights(self, rows: np.ndarray) -> np.ndarray:
        """Weights of the runs of ``rows`` (a boolean mask) in a fit on them, mean 1."""
        n = int(np.count_nonzero(rows))
        return np.ones(n) if self.groups is None else sample_weights(np.asarray(self.groups)[rows])

    def __post_init__(self) -> None:
        if self.prepared:
            self.resolved.prepare_repeated_physics()
        breakdown = self.resolved.breakdown()
        self._comm = breakdown.comm
        self._io = breakdown.io_s

    def step_time_s(self, constants: PhysicsConstants) -> np.ndarray:
        return self.resolved.physics(self._comm, self._io, constants).step_time_s


def _unpack(x: np.ndarray) -> PhysicsConstants:
    values = dict(zip(PHYSICS_CONSTANTS, np.exp(x)))
    for name in _FRACTIONS:
        values[name] = min(values[name], 1.0)
    return PhysicsConstants(**values)


def objective(
    problem: PhysicsProblem, rows: np.ndarray, constants: PhysicsConstants, prior_weight: float = PRIOR_WEIGHT, weights: np.ndarray | None = None
) -> float:
    """What a fit minimises: the physics' MAPE on ``rows``, weighted by ``weights`` (default
    :meth:`PhysicsProblem.row_weights`), plus ``prior_weight`` x the squared log of each catalogue
    scale (:data:`CATALOGUE_SCALES`); 1e9 where the physics is not finite."""
    if weights is None:
        weights = problem.row_weights(rows)
    predicted = problem.step_time_s(constants)[rows]
    scales = np.log([getattr(constants, name) for name in CATALOGUE_SCALES])
    errors = np.abs(predicted / problem.measured_s[rows] - 1.0)
    value = float(errors @ weights / weights.sum()) + prior_weight * float(np.sum(scales**2))
    return value if np.isfinite(value) else 1e9


#: Fresh-simplex restarts of a fit from where the last one stopped.
RESTARTS = 3


def fit_constants(
    problem: PhysicsProblem, rows: np.ndarray, start: PhysicsConstants = INITIAL, prior_weight: float = PRIOR_WEIGHT
) -> PhysicsConstants:
    """Constants minimising the physics' weighted MAPE on ``rows`` (a boolean mask) of ``problem``
    (:func:`objective`), plus ``prior_weight`` x the squared log of each catalogue scale
    (:data:`CATALOGUE_SCALES`)."""
    names = list(PHYSICS_CONSTANTS)
    weights = problem.row_weights(rows)
    x_start = np.log([getattr(start, name) for name in PHYSICS_CONSTANTS])
    free = [names.index(name) for name in names if name not in unseen_constants(problem.resolved, rows)]

    def full(x_free: np.ndarray) -> np.ndarray:
        x = x_start.copy()
        x[free] = x_free
        return x

    def loss(x_free: np.ndarray) -> float:
        return objective(problem, rows, _unpack(full(x_free)), prior_weight, weights)

    x0 = x_start[free]
    bounds = [tuple(np.log(BOUNDS[names[i]])) for i in free]
    # Steps of a factor e^-0.4 in every constant (scipy's default simplex barely moves constants that start at 1).
    simplex = np.vstack([x0, x0 - 0.4 * np.eye(len(x0))])
    options = {"maxiter": 3000, "xatol": 1e-3, "fatol": 1e-5, "initial_simplex": simplex}
    result = minimize(loss, x0, method="Nelder-Mead", bounds=bounds, options=options)
    # A simplex that has collapsed along a valley stops short of its floor; restarting from the point
    # it reached with a fresh simplex is the standard remedy (kept only where the loss falls).
    for _ in range(RESTARTS):
        fresh = np.vstack([result.x, result.x + 0.2 * np.eye(len(x0))])
        again = minimize(loss, result.x, method="Nelder-Mead", bounds=bounds, options={**options, "initial_simplex": fresh})
        if not again.fun < result.fun - 1e-5:
            break
        result = again
    return _unpack(full(result.x))


def unseen_constants(resolved: ResolvedJobs, rows: np.ndarray) -> set[str]:
    """Constants no run of ``rows`` depends on: they keep their starting value instead of drifting.

    The tuned-stack constants act only on vendor-tuned runs, the compiled stack's fusion only on
    graph-compiled runs, the overlap's interference only on all-reduce GPU runs of more than one GPU, the FP32 share only on
    mixed-precision GPU runs and the Winograd speed-up only on convolutions on the FP32 path
    of a GPU; without such a run the fit cannot see them, and the simplex
    would leave them wherever its flat steps went.
    """
    gpu = np.asarray(resolved.device_is_gpu, bool) & rows
    unseen = set()
    if resolved.is_tuned is None or not (np.asarray(resolved.is_tuned, bool) & gpu).any():
        unseen |= {"tuned_efficiency_gain", "tuned_memory_bound_fraction", "tuned_overhead_scale"}
    allreduce = np.isin(resolved.architecture_code, [ARCHITECTURE_CODES["allreduce-local"], ARCHITECTURE_CODES["allreduce-cluster"]])
    if not ((np.nan_to_num(resolved.total_gpus) > 1) & allreduce & gpu).any():
        unseen.add("overlap_interference")
    if not ((resolved.bytes_per_element < 4) & gpu).any():
        unseen.add("mixed_precision_fp32_share")
    if resolved.is_compiled is None or not (np.asarray(resolved.is_compiled, bool) & gpu).any():
        unseen.add("compiled_memory_bound_fraction")
    winograd = resolved.winograd_flops_per_sample
    fp32_path = ~np.asarray(resolved.device_inputs().uses_tensor_cores, bool)
    if winograd is None or not ((np.nan_to_num(winograd) > 0) & fp32_path & gpu).any():
        unseen.add("winograd_speedup")
    return unseen


def held_out_ape(problem: PhysicsProblem, train: np.ndarray, groups: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """APE of every ``scored`` row, each group's rows predicted with constants fitted on ``train`` minus that group."""
    ape = np.full(len(groups), np.nan)
    for group in sorted(set(groups[scored])):
        held = groups == group
        constants = fit_constants(problem, train & ~held)
        predicted = problem.step_time_s(constants)
        rows = scored & held
        ape[rows] = np.abs(predicted[rows] / problem.measured_s[rows] - 1.0)
    return ape


def write_constants(constants: PhysicsConstants, source: str, path: Path = CONSTANTS_PATH) -> None:
    """Store fitted constants as the shipped ones (read by :func:`features.mechanisms.physics_constants`)."""
    data = {
        "constants": {name: float(f"{value:.4g}") for name, value in constants.to_dict().items()},
        "meaning": PHYSICS_CONSTANTS,
        "provenance": "estimated",
        "source": source,
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    physics_constants.cache_clear()


#: The sources of the held-out protocols below; the constants are fitted on every source but the
#: testbed, whose CPU host uses none of them.
LAMBDA_SOURCE = "lambdal/deeplearning-benchmark"
MLPERF_SOURCE = "mlcommons/training_results_v3.1"
TESTBED_SOURCE = "testbed"


@dataclass(frozen=True)
class HeldOutResult:
    """One leave-one-group-out protocol: per scored row, the held-out APE of each method."""

    name: str
    groups: np.ndarray  # group of each scored row
    ape: dict  # method -> APE per scored row


def naive_scaled_additive_ape(problem: PhysicsProblem, additive_s: np.ndarray, train: np.ndarray, groups: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """The naive baseline: PAI additive times one factor (the median measured/additive ratio of the training rows)."""
    ape = np.full(len(groups), np.nan)
    for group in sorted(set(groups[scored])):
        held = groups == group
        rows = train & ~held
        factor = float(np.median(problem.measured_s[rows] / additive_s[rows]))
        target = scored & held
        ape[target] = np.abs(factor * additive_s[target] / problem.measured_s[target] - 1.0)
    return ape


def held_out_protocols(problem: PhysicsProblem, runs, additive_s: np.ndarray, overlapped_s: np.ndarray) -> list[HeldOutResult]:
    """Lambda leave-one-GPU-type-out and MLPerf leave-one-benchmark-out (v3.1, and every round) for the roofline physics.

    The constants are fitted on the GPU runs (:func:`fit_rows`) outside the
    held-out group: every run of the held-out GPU type (whatever its source),
    or every run of the held-out benchmark. PAI additive and overlapped take
    no fit; the naive baseline's one factor is fitted like the physics.
    """
    source = runs["source"].to_numpy()
    gpu_rows = fit_rows(runs)
    benchmarks = network_of(runs["model"].to_numpy(object))
    protocols = []
    for name, scored, groups in (
        ("Lambda leave-one-GPU-type-out", source == LAMBDA_SOURCE, runs["gpu"].to_numpy(object)),
        ("MLPerf v3.1 leave-one-benchmark-out", source == MLPERF_SOURCE, benchmarks),
        ("MLPerf (all rounds) leave-one-benchmark-out", is_mlperf(source), benchmarks),
    ):
        if not scored.any():
            continue
        measured = problem.measured_s
        ape = {
            "roofline physics": held_out_ape(problem, gpu_rows, groups, scored),
            "PAI additive": np.abs(additive_s / measured - 1.0),
            "overlapped": np.abs(overlapped_s / measured - 1.0),
            "naive: additive x fitted factor": naive_scaled_additive_ape(problem, additive_s, gpu_rows, groups, scored),
        }
        protocols.append(HeldOutResult(name, groups[scored], {k: v[scored] for k, v in ape.items()}))
    return protocols


def fit_rows(runs) -> np.ndarray:
    """The runs the constants are fitted on: every GPU run, of every public source (the testbed's CPU host uses none)."""
    return runs["source"].to_numpy() != TESTBED_SOURCE


def fit_shipped_constants(problem: PhysicsProblem, runs) -> PhysicsConstants:
    """Constants fitted on every GPU run, for the shipped physics."""
    return fit_constants(problem, fit_rows(runs))


class FoldConstants:
    """Constants fitted on a training fold's share of :func:`fit_rows`, once per distinct share.

    A held-out group whose runs are not among the fitted ones (a testbed
    topology: a CPU host, which uses no constant) gets the same constants as
    every other such group, fitted once. A fold with none of them gets the
    unfitted starting constants, never the shipped ones (which may have seen
    the held-out group).
    """

    def __init__(self, resolved: ResolvedJobs, runs, measured_s: np.ndarray):
        self.problem = PhysicsProblem(resolved, measured_s, cv_groups(runs))
        self.rows = fit_rows(runs)
        self._fitted: dict[bytes, PhysicsConstants] = {}
        self.fitted_on: list[np.ndarray] = []  # row indices of every fit, for the tests

    def __call__(self, train: np.ndarray) -> PhysicsConstants:
        rows = self.rows & train
        key = np.packbits(rows).tobytes()
        if key not in self._fitted:
            self.fitted_on.append(np.flatnonzero(rows))
            self._fitted[key] = fit_constants(self.problem, rows) if rows.any() else INITIAL
        return self._fitted[key]
