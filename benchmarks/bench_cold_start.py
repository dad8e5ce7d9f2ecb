"""Cold start of the command line against the cost of importing numpy, timed in pairs.

    .venv/bin/python benchmarks/bench_cold_start.py [--pairs 15] [--against CHECKOUT]

Each pair runs ``python -c "import numpy"`` and then ``predict speedup --job
examples/jobs/resnet50-ps.json --to allreduce-nvlink --json`` as fresh
processes, one right after the other, so a burst of load on the machine hits
both alike; the order alternates from pair to pair. Reported: the median
wall time of each and the median of the per-pair ratios (command / numpy).
``--against CHECKOUT`` adds a third command to every round: the same
``predict speedup`` from another checkout of the project (its Typer app,
``cli.main:app``, the entry point before ``cli.quick``), so the two are
compared in the same run.

Both commands import compiled bytecode, as an installed package does: numpy's
was compiled when pip installed it, and the project's is written by the
warm-up run, so ``PYTHONDONTWRITEBYTECODE`` is removed from the children's
environment. ``--no-bytecode`` keeps it (where set), timing the project's
modules compiled from source on every run against numpy's compiled ones.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREDICT = Path(sys.executable).with_name("predict")
COMMANDS = {
    "import numpy": [sys.executable, "-c", "import numpy"],
    "predict speedup --json": [str(PREDICT), "speedup", "--job", "examples/jobs/resnet50-ps.json", "--to", "allreduce-nvlink", "--json"],
}


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--against", type=Path, default=None, help="another checkout whose predict speedup is timed in the same rounds")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--no-bytecode", action="store_true", help="keep PYTHONDONTWRITEBYTECODE from the environment")
    args = parser.parse_args()
    env = dict(os.environ)
    if not args.no_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    commands = dict(COMMANDS)
    if args.against:
        boot = f"import sys; sys.path.insert(0, {str(args.against.resolve())!r}); sys.argv[0] = 'predict'; from cli.main import app; app()"
        commands["against"] = [sys.executable, "-c", boot, *COMMANDS["predict speedup --json"][1:]]
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():
        timed(command, env)  # warm the file cache once (and write the bytecode)
    names = list(commands)
    for i in range(args.pairs):
        for name in names[i % len(names):] + names[: i % len(names)]:  # the order rotates from round to round
            times[name].append(timed(commands[name], env))
    numpy_s = times["import numpy"]
    result: dict = {"pairs": args.pairs, "bytecode": not args.no_bytecode or "PYTHONDONTWRITEBYTECODE" not in os.environ}
    for name, values in times.items():
        ratios = [t / n for t, n in zip(values, numpy_s)]
        result[name] = {"median_s": statistics.median(values), "median_ratio_to_numpy": statistics.median(ratios)}
        print(f"{name:<24} median {statistics.median(values):.3f} s, {statistics.median(ratios):.2f}x import numpy (median of {args.pairs} per-round ratios)")
    if args.against:
        ratios = [a / b for a, b in zip(times["predict speedup --json"], times["against"])]
        result["median_ratio_to_against"] = statistics.median(ratios)
        print(f"predict speedup --json here / there: {statistics.median(ratios):.2f}x (median of per-round ratios)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
