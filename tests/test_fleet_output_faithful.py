"""Fleet output that never lies: failed rows without numbers, names byte-faithful, no stale files, umask modes."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from cli.main import app
from predictor.fleet import FleetInputWarning, read_fleet, score_frame, write_atomic
from predictor.fleet_example import example_fleet
from tests.conftest import ROOT

runner = CliRunner()
NUMBER_COLUMNS = ("step_time_s", "lower_s", "upper_s", "throughput_samples_per_s", "io_s", "compute_s", "total_gpus")
SCENARIO_NUMBERS = ("target_step_time_s", "speedup", "throughput_ratio", "speedup_lower", "speedup_upper", "p_speedup_gt_1", "target_total_gpus")


@pytest.fixture
def fleet() -> pd.DataFrame:
    return example_fleet(40, seed=11)


@pytest.mark.parametrize("bad", [np.inf, 2.5], ids=["workers-inf", "workers-2.5"])
def test_failed_row_predictions_are_nan_not_defaults(fleet, bad):
    """A what-if that leaves a job as it is (its own network) is the identity: the shipped model answers
    exactly 1.0x with p_speedup_gt_1 = 0 for a valid job, and must answer nothing for a job that failed."""
    assert (ROOT / "models" / "default" / "metadata.json").is_file(), "the shipped model is part of the repository"
    frame = fleet.assign(workers=fleet["workers"].astype(float), network="ethernet-25g")
    frame.loc[[0, 5], "workers"] = bad
    scored = score_frame(frame, ["ethernet-25g"])
    assert "p_speedup_gt_1" in scored.columns, "the shipped model gives speedup intervals"
    failed = scored.index.isin([0, 5])
    assert scored.loc[failed, "error"].str.contains("parallelism.workers").all()
    for column in (*NUMBER_COLUMNS, *SCENARIO_NUMBERS):
        assert scored.loc[failed, column].isna().all(), column
    # The valid rows keep their answers: the identity what-if is exactly 1.0x.
    assert scored.loc[~failed, "error"].isna().all()
    assert (scored.loc[~failed, "speedup"] == 1.0).all()
    assert (scored.loc[~failed, "p_speedup_gt_1"] == 0.0).all()


def test_failed_row_of_analytical_scoring_has_no_numbers_either(fleet):
    frame = fleet.assign(workers=fleet["workers"].astype(float))
    frame.loc[3, "workers"] = np.inf
    scored = score_frame(frame, ["ethernet-100g"], model="none")
    assert scored.loc[3, ["step_time_s", "speedup", "target_step_time_s", "total_gpus"]].isna().all()
    assert np.isfinite(scored.drop(index=3)["step_time_s"]).all()


def _csv_with_one_bad_byte(tmp_path, fleet):
    names = [name.encode() for name in fleet["name"]]
    names[2] = b"job-\xff-caf\xc3\xa9"  # one bad byte, then a valid two-byte character
    names[4] = "job-\u00e9t\u00e9".encode()  # valid UTF-8 beyond ASCII
    body = fleet.assign(name="NAME").to_csv(index=False).encode().split(b"\n")
    lines = [body[0]] + [line.replace(b"NAME", names[i], 1) for i, line in enumerate(body[1 : len(names) + 1])]
    path = tmp_path / "fleet.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_bad_byte_in_one_name_replaced_in_that_row_only(tmp_path, fleet):
    path = _csv_with_one_bad_byte(tmp_path, fleet)
    with pytest.warns(FleetInputWarning, match=r"column name is not UTF-8 in row 2;"):
        frame = read_fleet(path)
    assert frame["name"].dtype == "str"
    assert all(isinstance(value, str) for value in frame["name"])
    assert frame.loc[2, "name"] == "job-\ufffd-caf\u00e9"
    assert frame.loc[4, "name"] == "job-\u00e9t\u00e9"
    others = frame.index.difference([2, 4])
    assert list(frame.loc[others, "name"]) == list(fleet.loc[others, "name"])


def test_bad_byte_in_one_name_is_a_warning_line_and_the_output_keeps_text(tmp_path, fleet):
    path = _csv_with_one_bad_byte(tmp_path, fleet)
    out = tmp_path / "scored.parquet"
    result = runner.invoke(app, ["fleet", "--jobs", str(path), "--model", "none", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "warning: --jobs:" in result.stderr and "row 2" in result.stderr
    scored = pd.read_parquet(out)
    assert scored.loc[2, "name"] == "job-\ufffd-caf\u00e9"
    assert scored.loc[0, "name"] == fleet.loc[0, "name"]


KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from predictor.fleet import write_atomic
    from predictor.fleet_example import example_fleet

    def chunks():
        yield example_fleet(50, seed=1)
        os.kill(os.getpid(), signal.SIGKILL)  # as kill -9 mid-write
        yield example_fleet(50, seed=2)

    write_atomic(chunks(), sys.argv[1])
    """
)


def test_stale_temporary_file_from_killed_run_is_removed(tmp_path, fleet):
    out = tmp_path / "scored.parquet"
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(out)], cwd=ROOT, capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()
    stale = [p for p in tmp_path.iterdir() if p.name.startswith(".scored.parquet.")]
    assert len(stale) == 1 and not out.exists()

    assert write_atomic(fleet, out) == len(fleet)
    assert [p.name for p in tmp_path.iterdir()] == ["scored.parquet"]


def test_temporary_file_of_a_run_in_progress_is_kept(tmp_path, fleet):
    out = tmp_path / "scored.csv"
    running = tmp_path / ".scored.csv.inprogress.tmp"
    running.write_bytes(b"partial")
    with open(running, "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # the lock a live writer holds
        write_atomic(fleet, out)
        assert running.read_bytes() == b"partial"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".scored.csv.inprogress.tmp", "scored.csv"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_output_mode_follows_umask(tmp_path, fleet, umask, mode, suffix):
    out = tmp_path / f"scored{suffix}"
    previous = os.umask(umask)
    try:
        write_atomic(fleet, out)
    finally:
        os.umask(previous)
    assert out.stat().st_mode & 0o777 == mode
