"""The console entry answers one-job JSON commands without Typer, exactly as the Typer commands do, and hands the rest over."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.quick import main, parse
from tests.conftest import EXAMPLES, ROOT

runner = CliRunner()
JOB = str(EXAMPLES / "resnet50-ps.json")


@pytest.mark.parametrize(
    "argv",
    [
        ["time", "--job", JOB, "--json"],
        ["time", "-j", JOB, "--json", "--model", "none", "--overlap", "overlapped"],
        ["speedup", "--json", "--job", JOB, "--to", "allreduce-nvlink"],
        ["speedup", f"--job={JOB}", "--to", "ethernet-100g", "--to=mixed-precision", "--json", "--confidence-level", "0.8"],
    ],
)
def test_quick_answer_is_the_typer_commands_answer(argv, capsys):
    main(argv)
    quick = capsys.readouterr().out
    typer_result = runner.invoke(app, argv)
    assert typer_result.exit_code == 0, typer_result.output
    assert quick == typer_result.stdout
    assert json.loads(quick)["name"] or json.loads(quick)["baseline"]["name"]


@pytest.mark.parametrize(
    "argv",
    [
        ["time", "--job", JOB],  # a table, not JSON
        ["time", "--job", JOB, "--json", "--plot", "x.png"],  # an option this parser does not take
        ["speedup", "--job", JOB, "--json"],  # speedup without --to
        ["time", "--json", "--to", "ethernet-100g", "--job", JOB],  # --to on time
        ["time", "--help"],
        ["fleet", "--jobs", "f.csv"],
        ["time", "--job"],
        [],
    ],
)
def test_anything_else_is_left_to_the_typer_app(argv):
    assert parse(argv) is None


def test_a_failure_is_reported_by_the_typer_app(tmp_path, capsys):
    bad = tmp_path / "job.json"
    bad.write_text(json.dumps({"workload": {"model": "resnet50"}, "cluster": {"gpu": "V10"}}))
    with pytest.raises(SystemExit) as exit_info:
        main(["time", "--job", str(bad), "--json"])
    assert exit_info.value.code == 2
    typer_result = runner.invoke(app, ["time", "--job", str(bad), "--json"])
    assert typer_result.exit_code == 2 and "unknown gpu 'V10'" in typer_result.stderr
    assert capsys.readouterr().err == typer_result.stderr


def test_quick_answer_does_not_import_typer():
    code = (
        "import sys; from cli.quick import main; "
        f"main(['speedup', '--job', {JOB!r}, '--to', 'allreduce-nvlink', '--json']); "
        "assert 'typer' not in sys.modules and 'pandas' not in sys.modules, sorted(m for m in sys.modules if m in ('typer', 'pandas'))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["speedup"] > 1.0
