"""The physics fit's cost: one evaluation of its objective and one whole fit, prepared against plain.

    .venv/bin/python benchmarks/bench_physics_fit.py [--evaluations 200] [--repeats 5] [--fits 1]

A fit of the roofline physics' constants (``training.physics_fit.fit_constants``)
evaluates the physics of every GPU run of the public sources (``../shared/data``
and the testbed) thousands of times; ``predict evaluate`` and ``predict
physics-report`` fit once per held-out fold. ``prepared`` evaluates it through
``ResolvedJobs.prepare_repeated_physics`` (each job's bucket ends on their upper
envelope, its device inputs kept), ``plain`` as one prediction computes it.

Reported: the median over ``--repeats`` of the seconds per objective evaluation
(``--evaluations`` in a row, the two alternating repeat by repeat), the seconds
of ``--fits`` whole fits on every GPU run each way, and whether the two give
identical step times and fitted constants.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from training.dataset import build_dataset, cv_groups
from training.physics_fit import INITIAL, PhysicsProblem, fit_constants, fit_rows, objective
from training.sources import gather_runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fits", type=int, default=1)
    args = parser.parse_args()
    runs = gather_runs(None, None, None).runs.reset_index(drop=True)
    measured = runs["measured_step_time_s"].to_numpy(float)
    problems = {
        way: PhysicsProblem(build_dataset(runs).resolved, measured, cv_groups(runs), prepared=way == "prepared")
        for way in ("plain", "prepared")
    }
    rows = fit_rows(runs)
    same_steps = np.array_equal(problems["plain"].step_time_s(INITIAL), problems["prepared"].step_time_s(INITIAL), equal_nan=True)
    per_evaluation = {way: [] for way in problems}
    for _ in range(args.repeats):
        for way, problem in problems.items():
            weights = problem.row_weights(rows)
            start = time.perf_counter()
            for _ in range(args.evaluations):
                objective(problem, rows, INITIAL, weights=weights)
            per_evaluation[way].append((time.perf_counter() - start) / args.evaluations)
    fit_s, fitted = {}, {}
    for way, problem in problems.items():
        start = time.perf_counter()
        for _ in range(args.fits):
            fitted[way] = fit_constants(problem, rows)
        fit_s[way] = (time.perf_counter() - start) / args.fits
    print(f"{len(runs)} runs, {int(rows.sum())} GPU runs fitted; identical step times: {same_steps}; "
          f"identical fitted constants: {fitted['plain'] == fitted['prepared']}")
    print("| way | ms per evaluation (median) | s per fit |")
    print("|---|---|---|")
    for way in problems:
        print(f"| {way} | {1e3 * statistics.median(per_evaluation[way]):.3f} | {fit_s[way]:.1f} |")
    ratio = statistics.median(per_evaluation["plain"]) / statistics.median(per_evaluation["prepared"])
    print(f"plain / prepared: {ratio:.2f}x per evaluation, {fit_s['plain'] / fit_s['prepared']:.2f}x per fit")


if __name__ == "__main__":
    main()
