"""The testbed collector: tiers, plans, run ids and rows, the models, and a real smoke collection.

The collection tests need root, iproute2 (ip, tc) and torch; they skip with
the reason otherwise. The smoke collection takes about 30 s on two cores.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys

import pytest

from features.errors import SpecError
from training.testbed.measure import Measurement, spread_rel, summarize
from training.testbed.plan import MODELS, RunConfig, Topology, make_plan
from training.testbed.results import RUN_COLUMNS, RunContext, append_row, measured_keys, read_rows, run_row
from training.testbed.tiers import parse_tier, parse_tiers

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _testbed_skip_reason() -> str | None:
    from training.testbed.netns import TestbedUnavailable, check_available

    if not HAS_TORCH:
        return "torch is not installed (pip install torch==2.13.0)"
    try:
        check_available()  # root, ip and tc, and the capabilities to use them
    except TestbedUnavailable as reason:
        return str(reason)
    return None


needs_testbed = pytest.mark.skipif(_testbed_skip_reason() is not None, reason=_testbed_skip_reason() or "")
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install torch==2.13.0)")


# --- tiers -----------------------------------------------------------------


def test_tier_parsing_and_names():
    tier = parse_tier("250m")
    assert tier.rate_mbit_per_s == 250
    assert tier.link_name == "emulated-250m"
    assert tier.bw_bytes_per_s == 250e6 / 8
    assert tier.tc_rate == "250mbit"
    assert parse_tier("1g").link_name == "emulated-1g"
    assert parse_tier("emulated-4g").rate_mbit_per_s == 4000
    assert parse_tier("100mbit").label == "100m"
    assert parse_tier("2.5g").label == "2.5g"


def test_the_25_to_100_gbit_ratio_is_kept():
    assert parse_tier("1g").bw_bytes_per_s / parse_tier("250m").bw_bytes_per_s == 4.0


def test_tier_lists_are_sorted_slowest_first_without_duplicates():
    assert [t.label for t in parse_tiers("1g,250m,1g")] == ["250m", "1g"]


def test_bad_tier_names_the_field_and_the_allowed_form():
    with pytest.raises(SpecError) as error:
        parse_tier("fast")
    assert error.value.field == "tier"
    assert "250m" in str(error.value)


def test_token_bucket_burst_is_small_next_to_a_gradient_message():
    # 64 KiB floor; 1 ms at the rate above it: 4 Gbit/s -> 500,000 bytes.
    assert parse_tier("250m").burst_bytes == 65536
    assert parse_tier("4g").burst_bytes == 500_000
    args = parse_tier("1g").tbf_args()
    assert args[:3] == ["tbf", "rate", "1000mbit"]


# --- plans and run ids -------------------------------------------------------


def test_run_id_is_stable_and_readable():
    config = RunConfig(Topology("ps-worker", 4, 2), "testbed-recsys", 128, parse_tier("250m"))
    assert config.run_id == "ps-worker/w4-s2/testbed-recsys/b128/emulated-250m"
    assert config.name == "testbed-recsys-ps-worker-w4-s2-b128-emulated-250m"
    single = RunConfig(Topology("single"), "testbed-resnet", 8, None)
    assert single.run_id == "single/testbed-resnet/b8/loopback"
    assert RunConfig(Topology("allreduce-cluster", 3), "testbed-resnet", 8, parse_tier("1g")).run_id == (
        "allreduce-cluster/n3/testbed-resnet/b8/emulated-1g"
    )


def test_networked_runs_need_a_tier_and_local_runs_have_none():
    with pytest.raises(SpecError):
        RunConfig(Topology("allreduce-cluster", 2), "testbed-recsys", 32, None)
    with pytest.raises(SpecError):
        RunConfig(Topology("single"), "testbed-recsys", 32, parse_tier("1g"))
    with pytest.raises(SpecError):
        Topology("ps-worker", 2, 0)


def test_job_columns_follow_the_job_conventions():
    local = Topology("allreduce-local", 4).job_columns()
    assert (local["workers"], local["gpus_per_worker"], local["nodes"], local["gpus_per_node"]) == (1, 4, 1, 4)
    cluster = Topology("allreduce-cluster", 3).job_columns()
    assert (cluster["workers"], cluster["gpus_per_worker"], cluster["nodes"], cluster["gpus_per_node"]) == (3, 1, 3, 1)
    ps = Topology("ps-worker", 4, 2).job_columns()
    assert (ps["workers"], ps["parameter_servers"], ps["gpu"], ps["intra_node_link"]) == (4, 2, "cpu-host", "shared-memory")


def test_smoke_plan_covers_three_architectures_at_two_tiers():
    runs = make_plan("smoke").runs()
    assert {r.topology.architecture for r in runs} == {"single", "allreduce-cluster", "ps-worker"}
    for architecture in ("allreduce-cluster", "ps-worker"):
        assert {r.network for r in runs if r.topology.architecture == architecture} == {"emulated-250m", "emulated-1g"}


def test_full_plan_spans_the_grid():
    plan = make_plan("full")
    runs = plan.runs()
    assert len(runs) >= 300
    assert len({r.run_id for r in runs}) == len(runs)
    assert len(plan.tiers) >= 3
    assert {r.model for r in runs} == set(MODELS)
    ps = [r.topology for r in runs if r.topology.architecture == "ps-worker"]
    assert {t.workers for t in ps} == {2, 3, 4} and {t.servers for t in ps} == {1, 2}
    for model in MODELS:
        assert len({r.batch_size for r in runs if r.model == model}) >= 3


def test_unknown_plan_is_a_spec_error():
    with pytest.raises(SpecError):
        make_plan("huge")


# --- measurement and rows -----------------------------------------------------


def test_calibration_writes_the_hosts_cores_and_dispatch_costs_into_its_catalogue_entry():
    from training.testbed.calibrate import DispatchProbe, HostBenchmark, LinkProbe, catalogue_entries

    bench = HostBenchmark(
        fp32_flops_per_s=6.5e10, memory_bw_bytes_per_s=1.5e10, repeats=9, torch_version="2.13.0",
        dispatch=DispatchProbe((32.0, 776.0), (216e-6, 2448e-6)),
    )  # fmt: skip
    document = catalogue_entries(bench, LinkProbe(2e-5, 4e9), {}, "host", "2026-12-06")
    device = document["devices"][0]
    assert device["cores"] == os.cpu_count()
    assert f"{os.cpu_count()} cores" in device["notes"]
    # (2448 - 216) us over 744 kernels = 3.0 us per kernel; 216 - 32 x 3 = 120 us per step.
    assert device["kernel_launch_latency_s"] == pytest.approx(3.0e-6)
    assert device["host_overhead_s"] == pytest.approx(120e-6)
    assert "32 and 776 counted kernels" in device["source"]
    # The entry is one the catalogue accepts.
    from features.hardware import DeviceSpec, _build

    assert _build(DeviceSpec, device, "testbed.json").kernel_launch_latency_s == pytest.approx(3.0e-6)


def test_the_dispatch_probe_is_the_line_through_two_steps():
    from training.testbed.calibrate import DispatchProbe

    probe = DispatchProbe((10.0, 110.0), (100e-6, 600e-6))
    assert probe.per_kernel_s == pytest.approx(5e-6) and probe.step_overhead_s == pytest.approx(50e-6)
    # A line through the origin's far side never gives a negative step cost.
    assert DispatchProbe((10.0, 110.0), (40e-6, 600e-6)).step_overhead_s == 0.0


@needs_testbed
def test_a_real_dispatch_probe_on_this_host_costs_microseconds_per_kernel():
    from training.testbed.calibrate import DISPATCH_PROBE_LAYERS, probe_dispatch

    probe = probe_dispatch(repeats=3, steps=20)
    # Counted as the catalogue counts: more layers, proportionally more kernels.
    assert probe.kernels[1] > probe.kernels[0] * DISPATCH_PROBE_LAYERS[1] / DISPATCH_PROBE_LAYERS[0] / 2
    # An eager CPU operator costs about a microsecond to tens of them; a step's fixed cost well under 10 ms.
    assert 1e-7 < probe.per_kernel_s < 1e-4
    assert 0.0 <= probe.step_overhead_s < 1e-2


def test_the_two_rank_ring_model_is_solved_at_the_two_probe_sizes():
    """A 1 GB/s link with 20 us hops: 4 KiB in 0.5 ms, 16 MiB in 50 ms.

    Bus bandwidth (16 MiB - 4 KiB) / 49.5 ms = 338.8 MB/s, efficiency 0.3388; the fixed cost is
    0.5 ms - 2 x 20 us - 4096 B / 338.8 MB/s = 0.4479 ms."""
    from training.testbed.calibrate import CollectiveProbe, collective_entry, large_message_bytes, pooled_call_latency_s

    probe = CollectiveProbe("shared-memory", 1e9, 20e-6, 4096, 0.5e-3, 16 * 2**20, 50e-3)
    assert probe.efficiency == pytest.approx((16 * 2**20 - 4096) / 49.5e-3 / 1e9)
    assert probe.efficiency == pytest.approx(0.33884, rel=1e-4)
    assert probe.call_latency_s == pytest.approx(0.5e-3 - 40e-6 - 4096 / (probe.efficiency * 1e9))
    assert probe.call_latency_s == pytest.approx(0.4479e-3, rel=1e-3)
    entry = collective_entry([probe], probe.call_latency_s, "vm", "2026-12-06")
    assert (entry["name"], entry["ring_bus_bw_efficiency"], entry["tree_bus_bw_efficiency"]) == ("shared-memory", 0.339, 0.339)
    assert entry["call_latency_s"] == pytest.approx(4.48e-4) and entry["provenance"] == "measured"
    assert "calibrate-collectives` on vm, 2026-12-06, 1 round:" in entry["source"]
    # Faster than the link (a TCP goodput figure below the wire's): capped at 1, and said so.
    fast = CollectiveProbe("emulated-1g", 1.25e8, 30e-6, 4096, 0.3e-3, 2**20, 5e-3)
    assert fast.efficiency > 1 and collective_entry([fast], 1e-3, "vm", "d")["ring_bus_bw_efficiency"] == 1.0
    assert "capped at 1" in collective_entry([fast], 1e-3, "vm", "d")["source"]
    # Over rounds: the link's median efficiency and one call cost, the median over every link and round.
    # slow: 16 MiB in 70 ms, efficiency 0.2413, call 0.5 - 0.040 - 0.0170 = 0.4430 ms; quick: 36 ms, 0.5083,
    # call 3.0 - 0.040 - 0.0081 = 2.9519 ms; fast: call 0.3 - 0.060 - 0.0184 = 0.2216 ms. Sorted calls 0.2216,
    # 0.4430, 0.4479, 2.9519: median (0.4430 + 0.4479) / 2 = 0.4455 ms.
    slow = CollectiveProbe("shared-memory", 1e9, 20e-6, 4096, 0.5e-3, 16 * 2**20, 70e-3)
    quick = CollectiveProbe("shared-memory", 1e9, 20e-6, 4096, 3.0e-3, 16 * 2**20, 36e-3)
    rounds = [slow, probe, quick]
    assert (slow.efficiency, quick.efficiency) == (pytest.approx(0.24133, rel=1e-4), pytest.approx(0.50828, rel=1e-4))
    call = pooled_call_latency_s([*rounds, fast])
    assert call == pytest.approx(0.4455e-3, rel=1e-3)
    entry = collective_entry(rounds, call, "vm", "2026-12-06")
    assert entry["ring_bus_bw_efficiency"] == 0.339 and entry["call_latency_s"] == pytest.approx(float(f"{call:.3g}"))
    assert ", 3 rounds:" in entry["source"]
    # About a quarter second of the rate, in whole MiB, between 1 and 16 MiB.
    assert large_message_bytes(12.5e6) == 2 * 2**20  # 100 Mbit/s: 3.1 MB -> 2 MiB
    assert large_message_bytes(5e8) == 16 * 2**20 and large_message_bytes(1e6) == 2**20


def test_collective_entries_replace_only_the_links_they_name(tmp_path):
    import json

    from training.testbed.calibrate import COLLECTIVES_PATH, update_collectives

    path = tmp_path / "collectives.json"
    path.write_text(COLLECTIVES_PATH.read_text())
    before = json.loads(path.read_text())
    entry = {"name": "emulated-1g", "ring_bus_bw_efficiency": 0.5, "tree_bus_bw_efficiency": 0.5, "call_latency_s": 1e-3,
             "provenance": "measured", "source": "probe"}
    new = {**entry, "name": "emulated-2g"}
    after = update_collectives([entry, new], path)
    assert json.loads(path.read_text()) == after
    assert after["link_kinds"] == before["link_kinds"]
    by_name = {e["name"]: e for e in after["links"]}
    assert by_name["emulated-1g"] == entry and by_name["emulated-2g"] == new
    assert [e for e in after["links"] if e["name"] not in ("emulated-1g", "emulated-2g")] == [
        e for e in before["links"] if e["name"] != "emulated-1g"
    ]


@needs_testbed
def test_a_real_allreduce_probe_over_loopback_gives_a_cost_per_call_and_a_bus_bandwidth():
    from training.testbed.calibrate import probe_allreduce
    from training.testbed.netns import EmulatedNetwork

    with EmulatedNetwork(1) as net:
        probe = probe_allreduce(net, Topology("allreduce-local", workers=2), "shared-memory", 4e9, 20e-6, 29460)
    assert probe.large_s > probe.small_s > 0
    # gloo over loopback: tens of microseconds to milliseconds per call, and some hundreds of MB/s or more.
    assert 1e-5 < probe.small_s < 0.05
    assert 0.01 < probe.efficiency


def test_spread_is_interquartile_range_over_median():
    # Quartiles of 1..5 (linear): 2 and 4, median 3.
    assert spread_rel([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 3)
    assert math.isnan(spread_rel([]))


def test_allreduce_communication_is_the_step_not_explained_by_compute():
    report = {"step_s": [0.10, 0.12, 0.11], "compute_probe_s": [0.03, 0.04, 0.05]}
    m = summarize("allreduce-cluster", report)
    assert (m.step_time_s, m.compute_s, m.repeats) == (pytest.approx(0.11), pytest.approx(0.04), 3)
    assert m.comm_s == pytest.approx(0.07)


def test_rows_have_exactly_the_run_table_columns(tmp_path):
    config = RunConfig(Topology("ps-worker", 2, 1), "testbed-recsys", 64, parse_tier("250m"))
    context = RunContext(host="h", system="s", software="torch", collected_at="2026-01-01")
    row = run_row(config, Measurement(0.2, 0.05, 7, 0.01, 0.19), context)
    assert tuple(row) == RUN_COLUMNS
    assert row["software_year"] == 2026  # the collection's year: its torch build is that year's at the latest
    assert (row["source"], row["source_id"], row["network"], row["gpu"]) == (
        "testbed", config.run_id, "emulated-250m", "cpu-host"
    )
    path = tmp_path / "runs.csv"
    append_row(path, row)
    append_row(path, run_row(RunConfig(Topology("single"), "testbed-resnet", 8, None), Measurement(0.1, 0.0, 5, 0.1, 0.0), context))
    rows = read_rows(path)
    assert len(rows) == 2 and float(rows[0]["measured_step_time_s"]) == 0.2
    assert measured_keys(rows) == {("h", config.run_id), ("h", "single/testbed-resnet/b8/loopback")}


# --- models --------------------------------------------------------------------


@needs_torch
def test_models_build_deterministically_with_documented_sizes():
    import torch

    from features.model_defs.testbed import TESTBED_MODELS

    # Parameter counts from the shapes in the docstrings, e.g. recsys:
    # 16384*16 + (13*32+32) + (32*16+16) + (144*64+64) + (64+1) = 272,465.
    expected = {"testbed-recsys": 272_465, "testbed-resnet": 78_042, "testbed-transformer": 931_328}
    assert set(TESTBED_MODELS) == set(MODELS)
    for name, spec in TESTBED_MODELS.items():
        model = spec.build(0)
        assert sum(p.numel() for p in model.parameters()) == expected[name]
        first, second = spec.make_batch(4, 7), spec.make_batch(4, 7)
        for a, b in zip(first.inputs, second.inputs):
            assert torch.equal(a, b)
        again = spec.build(0)
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))
        loss = spec.loss(model, first)
        assert torch.isfinite(loss)


@needs_torch
def test_recsys_embedding_gradient_is_dense():
    from features.model_defs.testbed import TESTBED_MODELS

    spec = TESTBED_MODELS["testbed-recsys"]
    model = spec.build(0)
    spec.loss(model, spec.make_batch(8, 0)).backward()
    grad = model.embedding.weight.grad
    assert not grad.is_sparse and tuple(grad.shape) == (16384, 16)


@needs_torch
def test_parameter_shards_cover_the_vector_once():
    from training.testbed.steps import shard_bounds

    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_bounds(10, 1) == [(0, 10)]


# --- the emulated network and a real collection ------------------------------------


def _own_names() -> list[str]:
    from training.testbed.netns import owner_pid, testbed_names

    return [n for n in testbed_names() if owner_pid(n) == os.getpid()]


@needs_testbed
def test_network_is_removed_after_an_exception_inside_it():
    from training.testbed.netns import EmulatedNetwork

    with pytest.raises(RuntimeError, match="inside"):
        with EmulatedNetwork(2) as net:
            net.set_tier(parse_tier("250m"))
            outer, inner = net.qdiscs(1)
            assert "tbf" in outer and "250Mbit" in outer and "250Mbit" in inner
            assert net.namespace(1) in _own_names()
            raise RuntimeError("inside")
    assert _own_names() == []


@needs_testbed
def test_leftovers_of_a_dead_collector_are_removed():
    from training.testbed.netns import NAME_PREFIX, _base36, remove_stale, testbed_names

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"{NAME_PREFIX}{_base36(dead.pid, 5)}0-h0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert name in remove_stale()
        assert name not in testbed_names()
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@needs_testbed
def test_a_failing_run_reports_the_process_error_and_leaves_nothing_behind():
    from training.testbed.netns import EmulatedNetwork
    from training.testbed.plan import Timing
    from training.testbed.processes import ProcessSet, TestbedRunError

    timing = Timing(warmup_steps=0, budget_s=0.1, min_steps=1, max_steps=1, compute_probe_steps=0)
    bad = RunConfig(Topology("single"), "testbed-nonexistent", 4, None)
    with pytest.raises(TestbedRunError, match="unknown testbed model"):
        with EmulatedNetwork(1) as net:
            procs = ProcessSet(Topology("single"), net, 29400)
            with procs:
                procs.run(timing.request(bad), timeout_s=60)
    assert _own_names() == []
    assert procs.log_dir.exists()  # kept for the error message, which names it
    shutil.rmtree(procs.log_dir)


@pytest.fixture(scope="module")
def smoke_rows(tmp_path_factory):
    from training.testbed.collect import collect

    out = tmp_path_factory.mktemp("testbed") / "runs.csv"
    summary = collect("smoke", out, progress=lambda line: None)
    return out, summary, read_rows(out)


@needs_testbed
def test_smoke_collection_writes_valid_rows(smoke_rows):
    out, summary, rows = smoke_rows
    assert summary.measured == len(make_plan("smoke").runs()) == len(rows)
    assert {r["architecture"] for r in rows} == {"single", "allreduce-cluster", "ps-worker"}
    for row in rows:
        assert tuple(row) == RUN_COLUMNS
        assert float(row["measured_step_time_s"]) > 0
        assert float(row["measured_compute_s"]) > 0
        assert float(row["measured_comm_s"]) >= 0
        assert int(row["repeats"]) >= make_plan("smoke").timing.min_steps
        assert (row["source"], row["gpu"], row["precision"], row["framework"]) == ("testbed", "cpu-host", "fp32", "pytorch")
        assert row["software"].startswith("torch ")
    assert _own_names() == []


@needs_testbed
def test_smoke_collection_resumes_without_measuring_again(smoke_rows):
    from training.testbed.collect import collect

    out, _, rows = smoke_rows
    summary = collect("smoke", out, progress=lambda line: None)
    assert (summary.measured, summary.skipped) == (0, len(rows))
    assert len(read_rows(out)) == len(rows)


@needs_testbed
def test_communication_bound_parameter_server_is_slower_at_the_slower_tier(smoke_rows):
    _, _, rows = smoke_rows
    step = {r["network"]: float(r["measured_step_time_s"]) for r in rows if r["architecture"] == "ps-worker"}
    # testbed-recsys pushes and pulls ~1.1 MB per worker per step; with 2
    # workers on 1 server the server's NIC carries ~2.2 MB each way, ~145 ms
    # at 250 Mbit/s and ~37 ms at 1 Gbit/s. Allow for noise: at least 2x.
    assert step["emulated-250m"] > 2.0 * step["emulated-1g"]


def test_collect_command_rejects_a_bad_plan_in_one_line():
    from typer.testing import CliRunner

    from training.testbed.cli import app

    result = CliRunner().invoke(app, ["collect", "--plan", "huge", "--out", "unused.csv"])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1


def test_host_calibration_rounds_give_each_figures_median():
    from training.testbed.calibrate import DispatchProbe, HostBenchmark, LinkProbe, catalogue_entries, median_benchmark

    def bench(flops, bw, small_s, large_s):
        return HostBenchmark(flops, bw, 9, "2.13.0", DispatchProbe((32.0, 776.0), (small_s, large_s)))

    rounds = [bench(9.2e10, 3.3e10, 210e-6, 2500e-6), bench(8.4e10, 2.8e10, 230e-6, 2440e-6), bench(8.8e10, 3.0e10, 216e-6, 2448e-6)]
    combined = median_benchmark(rounds)
    assert (combined.fp32_flops_per_s, combined.memory_bw_bytes_per_s) == (8.8e10, 3.0e10)
    assert combined.dispatch.step_s == (216e-6, 2448e-6)
    device = catalogue_entries(combined, LinkProbe(2e-5, 4e9), {}, "host", "2026-12-06")["devices"][0]
    assert "median of 3 rounds (FLOP/s 84.0-92.0 G, bandwidth 28.0-33.0 GB/s)" in device["source"]
