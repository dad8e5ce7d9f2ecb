"""Generated job files, valid and hostile, through `predict time`, `speedup`, `compare`, `explain` and `breakdown` in-process.

Whatever the file holds, a command either answers (exit 0, and with --json a
strict JSON object whose every number is finite) or refuses with the
product's error (exit 2, one line on stderr; a JSON object for --json). It
never raises anything else, never prints a NaN or an infinity, and never
lets a terminal escape byte from the job reach the terminal.

The number of files follows the Hypothesis profile: the default profile runs
40 per command, ``pytest --hypothesis-profile=long tests/test_fuzz_cli.py``
2,500 per command (10,000 in all).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.main import app
from features.hardware import hardware_catalog
from features.workloads import workload_catalog

CATALOG = hardware_catalog()
GPUS = sorted(CATALOG.devices.names())[:12] + ["V100", "h100 sxm", "no-such-gpu"]
NETWORKS = sorted(link.name for link in CATALOG.links_of_kind("network")) + ["ib", "ethernet-1000g"]
MODELS = sorted(workload_catalog().workloads.names())[:12] + ["custom-net"]

runner = CliRunner()

hostile_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 1e21, 1e22, 1e14, 1e15, 5e-324, 0.0, -0.0, -1.0, 2.5]),
    st.integers(min_value=-(10**40), max_value=10**40),
)
hostile_values = st.one_of(
    hostile_numbers,
    st.text(max_size=12),
    st.sampled_from(["\x1b[31mred", "[bold]x[/bold]", "1e308", "inf", "nan", "", " "]),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
names = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["\x1b[2J\x1b[31mowned", "[red]markup[/red]", "[link=file:///etc]x[/link]", "a\rb\x07"]),
    hostile_values,
)

explicit_workload = st.fixed_dictionaries(
    {"model": st.just("custom-net")},
    optional={
        "flops_per_sample": st.one_of(st.floats(1.0, 1e20), hostile_numbers),
        "param_count": st.one_of(st.floats(1.0, 1e13), hostile_numbers),
        "memory_bytes_per_sample": st.one_of(st.floats(0.0, 1e12), hostile_numbers),
        "input_bytes_per_sample": st.one_of(st.floats(0.0, 1e9), hostile_numbers),
        "batch_size_per_gpu": st.one_of(st.integers(1, 512), hostile_numbers),
    },
)
catalogue_workload = st.fixed_dictionaries(
    {"model": st.sampled_from(MODELS)},
    optional={
        "batch_size_per_gpu": st.one_of(st.integers(1, 1024), hostile_numbers),
        "precision": st.sampled_from(["fp32", "tf32", "fp16", "bf16", "fp8", "FP16", "int4"]),
        "framework": st.sampled_from(["pytorch", "tensorflow", "mxnet", "caffe"]),
        "software_stack": st.sampled_from(["stock", "tuned", "hacked"]),
    },
)
parallelism = st.fixed_dictionaries(
    {},
    optional={
        "architecture": st.sampled_from(["single", "allreduce-local", "allreduce-cluster", "ps-worker", "ring"]),
        "workers": st.one_of(st.integers(1, 64), hostile_numbers),
        "gpus_per_worker": st.one_of(st.integers(1, 8), hostile_numbers),
        "parameter_servers": st.integers(0, 8),
        "nodes": st.one_of(st.integers(1, 16), hostile_numbers),
    },
)
cluster = st.fixed_dictionaries(
    {"gpu": st.sampled_from(GPUS)},
    optional={
        "gpus_per_node": st.sampled_from([1, 2, 4, 8, 16, 0]),
        "network": st.sampled_from(NETWORKS),
        "nics_per_node": st.one_of(st.integers(1, 8), hostile_numbers),
        "intra_node_link": st.sampled_from(["pcie-gen3", "pcie-gen4", "nvlink-gen2", "nvlink-gen4", "smoke-signal"]),
    },
)
jobs = st.fixed_dictionaries(
    {"workload": st.one_of(catalogue_workload, explicit_workload), "cluster": cluster},
    optional={
        "name": names,
        "parallelism": parallelism,
        "measured": st.fixed_dictionaries({"step_time_s": st.one_of(st.floats(1e-3, 10.0), hostile_numbers)}),
    },
)


#: Jobs built from sane values only (some still break a cross-field rule: the answered path gets its share).
clean_jobs = st.fixed_dictionaries(
    {
        "workload": st.one_of(
            st.fixed_dictionaries({"model": st.sampled_from(MODELS[:-1])},
                                  optional={"batch_size_per_gpu": st.integers(1, 1024),
                                            "precision": st.sampled_from(["fp32", "fp16", "bf16"])}),
            st.fixed_dictionaries({"model": st.just("custom-net"), "flops_per_sample": st.floats(1.0, 1e21),
                                   "param_count": st.floats(1.0, 1e14), "memory_bytes_per_sample": st.floats(0.0, 1e16),
                                   "input_bytes_per_sample": st.floats(0.0, 1e13)}),
        ),
        "cluster": st.fixed_dictionaries({"gpu": st.sampled_from(GPUS[:-1])},
                                         optional={"network": st.sampled_from(NETWORKS[:-2]), "nics_per_node": st.integers(1, 8)}),
    },
    optional={
        "name": st.one_of(st.text(max_size=20), st.sampled_from(["\x1b[2J\x1b[31mowned", "[red]markup[/red]", "a\rb\x07"])),
        "parallelism": st.fixed_dictionaries(
            {"architecture": st.sampled_from(["single", "allreduce-local", "allreduce-cluster", "ps-worker"])},
            optional={"workers": st.sampled_from([1, 2, 4, 8]), "gpus_per_worker": st.sampled_from([1, 2, 4, 8])},
        ),
    },
)


@st.composite
def mutated_jobs(draw) -> dict:
    """A job with one field replaced by a hostile value, one removed, or one unknown field added."""
    job = draw(jobs)
    section = draw(st.sampled_from(["workload", "cluster", "parallelism", "name", "extra"]))
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if section == "name":
        job["name"] = draw(hostile_values)
    elif section == "extra":
        job[draw(st.text(min_size=1, max_size=8))] = draw(hostile_values)
    elif isinstance(job.get(section), dict) and job[section] and action != "add":
        key = draw(st.sampled_from(sorted(job[section])))
        if action == "drop":
            del job[section][key]
        else:
            job[section][key] = draw(hostile_values)
    elif section in job:
        job[section] = draw(hostile_values) if action == "replace" else {**(job[section] if isinstance(job[section], dict) else {}), "bogus": 1}
    return job


@st.composite
def job_files(draw) -> bytes:
    """The bytes of a job file: mostly JSON jobs, some hostile encodings and structures."""
    kind = draw(st.sampled_from(["valid"] * 12 + ["mutated"] * 6 + ["utf16", "latin1", "deep", "huge-int", "truncated", "not-object"]))
    job = draw(clean_jobs if kind == "valid" else st.one_of(jobs, mutated_jobs()) if kind == "mutated" else jobs)
    text = json.dumps(job)  # NaN and Infinity come out as JSON's non-standard literals: hostile too
    if kind == "utf16":
        return text.encode("utf-16")
    if kind == "latin1":
        return text.replace("}", ', "name": "caf\u00e9"}', 1).encode("latin-1", "replace") + b"\xff"
    if kind == "deep":
        depth = draw(st.integers(20, 100_000))
        return ('{"workload": ' + "[" * depth + "]" * depth + "}").encode()
    if kind == "huge-int":
        digits = draw(st.integers(300, 6000))
        return text.replace('"gpu"', '"gpus_per_node": 1' + "0" * digits + ', "gpu"', 1).encode()
    if kind == "truncated":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))].encode()
    if kind == "not-object":
        return draw(st.sampled_from([b"[]", b"null", b"42", b'"job"', b"", b"\x00\x01"]))
    return text.encode()


scenarios = st.lists(
    st.one_of(
        st.sampled_from(["allreduce-nvlink", "allreduce-pcie", "mixed-precision", "ethernet-100g", "infiniband-ndr", "ethernet-10g"]),
        st.sampled_from(["gpu=H100-SXM", "gpu=V100", "workers=16", "nodes=4", "batch_size_per_gpu=128", "nics_per_node=4"]),
        st.sampled_from(["flops_per_sample=1e308", "param_count=1e308", "workers=inf", "workers=2.5", "gpu=\x1b[31m", "=", "name=x",
                         "batch_size_per_gpu=" + "9" * 5000, "memory_bytes_per_sample=nan", "[bold]x"]),
    ),
    min_size=1,
    max_size=3,
)


def _reject_constant(name: str) -> None:
    raise AssertionError(f"non-strict JSON constant {name} in the output")


def _numbers(value: Any):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def _check(result, as_json: bool) -> None:
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code in (0, 2, 3), (result.exit_code, result.output)
    event(f"exit code {result.exit_code}")  # the split is in --hypothesis-show-statistics
    if result.exit_code == 3:  # answered, nothing able to run the job: the answer, then one line that says so
        line = result.stderr.strip()
        assert "\n" not in line and (json.loads(line)["nothing_fits"] if as_json else line.startswith("nothing fits: "))
    if result.exit_code == 2:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        if as_json:
            error = json.loads(lines[0], parse_constant=_reject_constant)
            assert set(error) == {"error"} and isinstance(error["error"], str)
        else:
            assert lines[0].startswith("error: ")
        return
    if as_json:
        data = json.loads(result.stdout, parse_constant=_reject_constant)
        assert all(math.isfinite(v) for v in _numbers(data))
    assert "\x1b" not in result.stdout


@pytest.fixture(scope="module", autouse=True)
def command_built_once():
    """Typer's runner rebuilds the click command from the functions on every call (a third of a
    second); the command is the same each time, so it is built once for these thousands of calls."""
    import typer.main
    import typer.testing

    command = typer.main.get_command(app)
    original = typer.testing._get_command
    typer.testing._get_command = lambda _app: command
    yield
    typer.testing._get_command = original


@pytest.fixture(scope="module")
def job_path(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "job.json"


def _invoke(path, content: bytes, *args: str):
    path.write_bytes(content)
    return runner.invoke(app, [args[0], "--job", str(path), *args[1:]])


@given(content=job_files(), as_json=st.booleans())
def test_time_never_fails_other_than_with_the_product_error(job_path, content, as_json):
    result = _invoke(job_path, content, "time", *(["--json"] if as_json else []))
    _check(result, as_json)


@given(content=job_files(), to=scenarios, as_json=st.booleans())
def test_speedup_never_fails_other_than_with_the_product_error(job_path, content, to, as_json):
    args = [a for step in to for a in ("--to", step)]
    result = _invoke(job_path, content, "speedup", *args, *(["--json"] if as_json else []))
    _check(result, as_json)


@given(content=job_files(), to=st.one_of(st.none(), scenarios), as_json=st.booleans())
def test_explain_never_fails_other_than_with_the_product_error(job_path, content, to, as_json):
    args = [a for step in (to or []) for a in ("--to", step)]
    result = _invoke(job_path, content, "explain", *args, *(["--json"] if as_json else []))
    _check(result, as_json)


@given(content=job_files(), as_json=st.booleans())
def test_breakdown_never_fails_other_than_with_the_product_error(job_path, content, as_json):
    result = _invoke(job_path, content, "breakdown", *(["--json"] if as_json else []))
    _check(result, as_json)


@given(
    content=job_files(),
    gpus=st.lists(st.one_of(st.sampled_from(GPUS), st.sampled_from(["", "cpu-host", "\x1b[31m", "[bold]x", "A800", "H800 PCIe"])), max_size=3),
    as_json=st.booleans(),
)
def test_compare_never_fails_other_than_with_the_product_error(job_path, content, gpus, as_json):
    args = [a for gpu in gpus for a in ("--gpu", gpu)]
    result = _invoke(job_path, content, "compare", *(args or ["--gpu", "A100", "--gpu", "H800"]), *(["--json"] if as_json else []))
    _check(result, as_json)
