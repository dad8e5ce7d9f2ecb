"""Fleet scoring at scale: a million jobs, Parquet in, scored Parquet out.

    .venv/bin/python benchmarks/bench_fleet.py [--rows 1000000] [--repeats 3] [--workdir DIR] [--json OUT] [--against CHECKOUT]

Generates the synthetic example fleet (``predict fleet-example``) as Parquet,
then times the path ``predict fleet --jobs F.parquet --out S.parquet`` takes
(read, score in chunks, write atomically) in three modes:

* ``analytical``: the analytical model alone (``--model none``): step time,
  breakdown and bottleneck;
* ``analytical-scenario``: the same plus the ``allreduce-nvlink`` scenario
  (target time, speedup, target bottleneck): the work ``full`` does, without
  the learned model;
* ``full``: the shipped model (the learned residual and its intervals when
  ``models/default`` exists, else the analytical model) plus the
  ``allreduce-nvlink`` scenario (target time, speedup and its interval,
  target bottleneck);
* ``full-distinct``: ``full`` on the same fleet with a different
  ``flops_per_sample`` in every row, so no two rows share a configuration
  and scoring each distinct configuration once saves nothing (the worst case).

Each run is a fresh child process; its time covers read to written file
(imports excluded), wall clock and CPU (``time.process_time``, all
threads), and its peak memory is the child's
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the whole process: the
interpreter, the fleet, its scored copy and every temporary). The reported
time is the median over ``--repeats`` runs, the memory the largest. The load
average is printed before and after, since a busy machine slows every mode.

``--against CHECKOUT`` times another checkout of the project (its own
``benchmarks/bench_fleet.py`` child, the same fleet files) in the same run,
each of its runs right after the same mode's run here, and reports each
mode's median time against that checkout's: a comparison a busy machine
disturbs far less than two separate runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: mode -> (scenario, model): the analytical model alone, or the shipped model (learned when installed).
MODES = {
    "analytical": ((), "none"),
    "analytical-scenario": (("allreduce-nvlink",), "none"),
    "full": (("allreduce-nvlink",), "default"),
    "full-distinct": (("allreduce-nvlink",), "default"),
}


def child(mode: str, source: Path, out: Path) -> None:
    """One timed run; prints a JSON line with seconds, peak memory and the rows written."""
    from predictor import fleet

    start, cpu_start = time.perf_counter(), time.process_time()
    frame = fleet.read_fleet(source)
    to, model = MODES[mode]
    rows = fleet.write_atomic(fleet.iter_scored(frame, to, progress=False, model=model), out)
    method = fleet.predictor_for("none", model).method
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"mode": mode, "method": method, "seconds": seconds, "cpu_seconds": cpu_seconds, "peak_bytes": peak_kib * 1024, "rows": rows}))


def generate(rows: int, workdir: Path) -> tuple[Path, Path, float]:
    import numpy as np

    from predictor import fleet
    from predictor.fleet_example import example_fleet

    start = time.perf_counter()
    frame = example_fleet(rows, seed=0)
    plain = workdir / "fleet.parquet"
    fleet.write_atomic(frame, plain, row_group_rows=fleet.DEFAULT_CHUNK_ROWS)
    seconds = time.perf_counter() - start
    distinct = workdir / "fleet-distinct.parquet"
    # 1 + i * 1e-9 of the catalogue figure: a distinct configuration per row, the same physics to a part in 1e3.
    from features.workloads import workload_catalog

    flops = np.array([workload_catalog().get(m).flops_per_sample for m in frame["model"].cat.categories])
    frame["flops_per_sample"] = flops[frame["model"].cat.codes.to_numpy()] * (1.0 + np.arange(rows) * 1e-9)
    fleet.write_atomic(frame, distinct, row_group_rows=fleet.DEFAULT_CHUNK_ROWS)
    return plain, distinct, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--against", type=Path, default=None, help="another checkout to time in the same run")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "SOURCE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, source, out = args.child
        child(mode, Path(source), Path(out))
        return

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        workdir = Path(tmp)
        plain, distinct, generate_s = generate(args.rows, workdir)
        print(f"generated {args.rows:,} jobs in {generate_s:.2f} s ({plain.stat().st_size / 1e6:.1f} MB Parquet)")
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        against: dict[str, list[dict]] = {mode: [] for mode in MODES}
        trees = [(ROOT, runs)] + ([(args.against.resolve(), against)] if args.against else [])
        for repeat in range(args.repeats):
            for mode in MODES:  # interleaved, so a burst of load hits every mode alike
                source = distinct if mode == "full-distinct" else plain
                # Each checkout goes first every other round: the run after the heaviest mode (a 1.5 GB
                # process just freed) starts slower, and would otherwise always be this checkout's.
                for tree, into in trees if repeat % 2 == 0 else trees[::-1]:
                    script = tree / "benchmarks" / "bench_fleet.py"
                    command = [sys.executable, str(script), "--child", mode, str(source), str(workdir / f"scored-{mode}.parquet")]
                    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=tree)
                    into[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    load_after = os.getloadavg()

    base = statistics.median(r["seconds"] for r in runs["analytical"])
    same_work = statistics.median(r["seconds"] for r in runs["analytical-scenario"])
    results = {}
    print(f"{'mode':<20} {'model':<11} {'median s':>9} {'runs (s)':<22} {'x analytical':>12} {'x analytical-scenario':>21} {'CPU s':>6} {'peak MiB':>9}")
    for mode, mode_runs in runs.items():
        seconds = [r["seconds"] for r in mode_runs]
        median = statistics.median(seconds)
        cpu = statistics.median(r["cpu_seconds"] for r in mode_runs)
        peak = max(r["peak_bytes"] for r in mode_runs)
        results[mode] = {"method": mode_runs[0]["method"], "median_s": median, "runs_s": seconds, "ratio": median / base,
                         "ratio_same_work": median / same_work, "median_cpu_s": cpu, "peak_bytes": peak}  # fmt: skip
        runs_text = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"{mode:<20} {mode_runs[0]['method']:<11} {median:9.2f} {runs_text:<22} {median / base:12.2f} {median / same_work:21.2f} {cpu:6.2f} {peak / 2**20:9.0f}")
    if args.against:
        print(f"against {args.against} (same run, interleaved):")
        for mode in MODES:
            here = statistics.median(r["seconds"] for r in runs[mode])
            there = statistics.median(r["seconds"] for r in against[mode])
            cpu_here = statistics.median(r["cpu_seconds"] for r in runs[mode])
            cpu_there = statistics.median(r["cpu_seconds"] for r in against[mode])
            results[mode].update(against_median_s=there, against_median_cpu_s=cpu_there)
            print(f"  {mode:<20} {here:7.2f} s here, {there:7.2f} s there: {here / there:.2f}x; CPU {cpu_here:.2f} s here, {cpu_there:.2f} s there: {cpu_here / cpu_there:.2f}x")
    print(f"load average (1, 5, 15 min): before {', '.join(f'{x:.2f}' for x in load_before)}; after {', '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "load_before": load_before, "load_after": load_after, "modes": results}, indent=2))


if __name__ == "__main__":
    main()
