"""The layout planner at scale: every layout of a 70B llama on 1,024 H100s, ranked.

    .venv/bin/python benchmarks/bench_plan.py [--gpus 1024] [--repeats 5]

Times what ``predict plan --job examples/jobs/llama-70b-512-h100.json --gpus 1024`` computes
(:func:`features.layout_plan.plan`: enumerate, drop what does not fit, time and rank the
rest), in one process after the imports and the job's validation, median over
``--repeats`` runs; also the whole command in a fresh child process once. Target: under 5 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

JOB = ROOT / "examples" / "jobs" / "llama-70b-512-h100.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from features.jobspec import load_job
    from features.layout_spec import layout_job_from_row
    from features.layout_plan import plan

    job = layout_job_from_row(load_job(JOB).row)
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        result = plan(job, args.gpus)
        times.append(time.perf_counter() - started)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cli.main", "plan", "--job", str(JOB), "--gpus", str(args.gpus)],
                   cwd=ROOT, check=True, capture_output=True)
    command_s = time.perf_counter() - started
    best = result.ranked[0]
    print(f"{args.gpus} GPUs: {result.valid_layouts:,} valid layouts, {result.fitting_layouts:,} fit; "
          f"plan median {statistics.median(times):.2f} s over {args.repeats} (min {min(times):.2f}, max {max(times):.2f}); "
          f"whole command {command_s:.2f} s; target < 5 s")
    print(f"fastest: {best.layout} -> {best.breakdown.step_time_s:.3f} s, MFU {best.breakdown.mfu:.1%}")


if __name__ == "__main__":
    main()
