"""Cold start of the command line against the cost of importing numpy, timed in pairs.

    .venv/bin/python benchmarks/bench_cold_start.py [--pairs 15]

Each pair runs ``python -c "import numpy"`` and then ``predict speedup --job
examples/jobs/resnet50-ps.json --to allreduce-nvlink --json`` as fresh
processes, one right after the other, so a burst of load on the machine hits
both alike; the order alternates from pair to pair. Reported: the median
wall time of each and the median of the per-pair ratios (command / numpy).
"""

from __future__ import annotations

import argparse
import json
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


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    numpy_s, predict_s = [], []
    for command in COMMANDS.values():
        timed(command)  # warm the file cache once
    for i in range(args.pairs):
        if i % 2:
            predict_s.append(timed(COMMANDS["predict speedup --json"]))
            numpy_s.append(timed(COMMANDS["import numpy"]))
        else:
            numpy_s.append(timed(COMMANDS["import numpy"]))
            predict_s.append(timed(COMMANDS["predict speedup --json"]))
    ratios = [p / n for p, n in zip(predict_s, numpy_s)]
    result = {
        "pairs": args.pairs,
        "import_numpy_median_s": statistics.median(numpy_s),
        "predict_speedup_median_s": statistics.median(predict_s),
        "median_ratio": statistics.median(ratios),
    }
    print(f"import numpy: median {result['import_numpy_median_s']:.3f} s; predict speedup --json: median {result['predict_speedup_median_s']:.3f} s")
    print(f"median per-pair ratio: {result['median_ratio']:.2f}x over {args.pairs} pairs")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
