"""The default training set: public runs read from ``../shared/data`` plus the testbed's own.

The public tables stay where they are (a path is an argument); they are
imported on the fly and never copied into the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from features.errors import SpecError

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
TESTBED_RUNS = ROOT / "training" / "data" / "testbed_runs.csv"
LAMBDA_FILE = "lambda_throughput.csv"
MLPERF_FILE = "mlperf_training_v3.1.csv"


@dataclass(frozen=True)
class TrainingRuns:
    runs: pd.DataFrame
    counts: dict[str, dict]
    sources: list[str]


def _shown(path: Path) -> str:
    """A source path as recorded in a model's metadata: relative to the project where it can be."""
    resolved = Path(path).resolve()
    for base, prefix in ((ROOT, ""), (ROOT.parent, "../")):
        if resolved.is_relative_to(base):
            return prefix + resolved.relative_to(base).as_posix()
    return str(path)


def gather_runs(
    run_files: list[Path] | None = None,
    lambda_csv: Path | None = None,
    mlperf_csv: Path | None = None,
    default: bool = True,
) -> TrainingRuns:
    """Imported public runs and loaded run tables, validated together.

    With ``default`` and nothing else given: Lambda and MLPerf v3.1 from
    ``../shared/data`` (where present) and the committed testbed runs.
    """
    from training.importers import import_lambda, import_mlperf
    from training.runs import load_runs, validate_runs

    run_files = list(run_files or [])
    if default and not run_files and lambda_csv is None and mlperf_csv is None:
        lambda_csv = SHARED_DATA / LAMBDA_FILE if (SHARED_DATA / LAMBDA_FILE).exists() else None
        mlperf_csv = SHARED_DATA / MLPERF_FILE if (SHARED_DATA / MLPERF_FILE).exists() else None
        run_files = [TESTBED_RUNS] if TESTBED_RUNS.exists() else []
    frames, counts, sources = [], {}, []
    for label, path, importer in (("lambda", lambda_csv, import_lambda), ("mlperf", mlperf_csv, import_mlperf)):
        if path is None:
            continue
        if not Path(path).exists():
            raise SpecError(f"--{label}", str(path), "no such file")
        result = importer(path)
        frames.append(result.runs)
        counts[label] = result.counts()
        sources.append(_shown(path))
    if run_files:
        loaded = load_runs(run_files)
        frames.append(loaded.accepted)
        counts["run_files"] = loaded.counts()
        sources += [_shown(p) for p in run_files]
    if not frames:
        raise SpecError("--runs", None, "no measured runs: give --runs files, or --lambda/--mlperf tables")
    table = pd.concat([f for f in frames if len(f)], ignore_index=True)
    checked = validate_runs(table)
    counts["combined"] = {"accepted": len(checked.accepted), "rejected": len(checked.rejected)}
    return TrainingRuns(checked.accepted, counts, sources)
