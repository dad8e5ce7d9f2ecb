"""Grouped explanations at scale: residual factors per bottleneck family for 100,000 jobs.

    .venv/bin/python benchmarks/bench_explain.py [--rows 100000] [--repeats 3]

Generates the synthetic example fleet and times ``score_fleet(..., explain=True)``
against ``score_fleet(...)`` on the same frame with the shipped model, in one
process, each mode median over ``--repeats`` runs: the explanation's extra cost
is XGBoost's TreeSHAP (``pred_contribs``), or its approximate Saabas
attributions, over each distinct configuration and the sum into families. The example fleet as generated (jobs that share a
configuration are explained once); with ``--distinct``, also a fleet where every
row is a distinct configuration (a different ``flops_per_sample`` per row), the
worst case. Target: at most 30 s for 100,000 jobs on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--distinct", action="store_true", help="also time the all-distinct worst case")
    args = parser.parse_args()

    import numpy as np

    from predictor import fleet
    from predictor.api import default_model_dir
    from predictor.fleet_example import example_fleet

    if not default_model_dir().exists():
        sys.exit(f"no trained model at {default_model_dir()}: explanations need one (predict train)")
    frame = example_fleet(args.rows, seed=0)
    distinct = frame.assign(flops_per_sample=np.linspace(1e9, 2e9, len(frame)), model=None, param_count=3e7,
                            memory_bytes_per_sample=4e7, input_bytes_per_sample=150528.0)
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    cases = [("example fleet", frame)] + ([("all rows distinct", distinct)] if args.distinct else [])
    for label, fleet_frame in cases:
        times = {}
        for explain in (False, "treeshap", "saabas"):
            runs = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                scored = fleet.score_fleet(fleet_frame, progress=False, explain=explain)
                runs.append(time.perf_counter() - start)
            times[explain] = statistics.median(runs)
        assert len(scored) == len(fleet_frame)
        print(
            f"{label}: {args.rows:,} jobs scored in {times[False]:.2f} s; with TreeSHAP explanations "
            f"{times['treeshap']:.2f} s, with Saabas explanations {times['saabas']:.2f} s (median of {args.repeats})",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
