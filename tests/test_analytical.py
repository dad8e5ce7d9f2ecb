"""The breakdown's formulas against hand-computed numbers, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features import analytical
from features.analytical import ARCHITECTURE_CODES, communication_s, ring_allreduce_s

GB = 1e9


def comm(architecture, **overrides):
    """Communication times for one job with round-number links (bytes/s and seconds)."""
    args = dict(
        architecture_code=ARCHITECTURE_CODES[architecture],
        gradient_bytes=100e6,
        total_gpus=8,
        gpus_per_node_used=8,
        nodes=1,
        workers=1,
        gpus_per_worker=8,
        parameter_servers=1,
        intra_node_bw_bytes_per_s=100 * GB,
        intra_node_latency_s=0.0,
        host_link_bw_bytes_per_s=10 * GB,
        network_bw_bytes_per_s=1 * GB,
        network_latency_s=0.0,
        nics_per_node=1,
    )
    args.update(overrides)
    return communication_s(**args)


def test_ring_allreduce_moves_two_n_minus_one_over_n_of_the_bytes():
    # 8 GPUs, 100 MB: each sends 2 * 7/8 * 100 MB = 175 MB over a 100 GB/s link -> 1.75 ms,
    # plus 14 hops of 5 us.
    assert ring_allreduce_s(100e6, 8, 100 * GB, 5e-6) == pytest.approx(1.75e-3 + 14 * 5e-6)
    assert ring_allreduce_s(100e6, 1, 100 * GB, 5e-6) == 0.0


def test_single_has_no_communication():
    times = comm("single", total_gpus=1, gpus_per_worker=1)
    assert times.total_s == 0.0


def test_allreduce_local_is_a_ring_over_the_intra_node_link():
    times = comm("allreduce-local")
    assert times.intra_node_s == pytest.approx(2 * 7 / 8 * 100e6 / (100 * GB))
    assert times.network_s == 0.0


def test_allreduce_cluster_is_hierarchical():
    # 4 nodes x 8 GPUs: ring of 8 inside (2*7/8*100 MB over 100 GB/s = 1.75 ms) and
    # across nodes the node's 2 NICs carry 2*3/4*100 MB = 150 MB at 2 GB/s -> 75 ms.
    times = comm("allreduce-cluster", total_gpus=32, nodes=4, workers=32, gpus_per_worker=1, nics_per_node=2)
    assert times.intra_node_s == pytest.approx(1.75e-3)
    assert times.network_s == pytest.approx(0.075)


def test_ps_worker_is_bound_by_the_slower_of_worker_and_server_nics():
    # 8 workers of 1 GPU, 2 servers: each server carries 8/2 x 100 MB each way at 1 GB/s,
    # push then pull -> 2 * 0.4 s; staging through host memory: 2 * 100 MB over 10 GB/s.
    times = comm("ps-worker", total_gpus=8, workers=8, gpus_per_worker=1, parameter_servers=2, nodes=8)
    assert times.network_s == pytest.approx(0.8)
    assert times.intra_node_s == pytest.approx(0.02)
    assert bool(times.ps_fan_in_bound)
    # As many servers as workers: the worker NIC bounds it (100 MB each way).
    balanced = comm("ps-worker", total_gpus=8, workers=8, gpus_per_worker=1, parameter_servers=8, nodes=8)
    assert balanced.network_s == pytest.approx(0.2)
    assert not bool(balanced.ps_fan_in_bound)


def test_ps_worker_gpus_of_a_worker_reduce_locally_first():
    times = comm("ps-worker", total_gpus=8, workers=2, gpus_per_worker=4, parameter_servers=2, nodes=2)
    local_ring = 2 * 3 / 4 * 100e6 / (100 * GB)
    assert times.intra_node_s == pytest.approx(local_ring + 2 * 100e6 / (10 * GB))


def test_compute_memory_and_io_are_volume_over_rate():
    assert analytical.compute_s(1e9, 64, 10e12) == pytest.approx(6.4e-3)
    traffic = analytical.memory_traffic_bytes(1e6, 64, 1e6, 4)
    assert traffic == pytest.approx(64e6 + 1e6 * (3 * 4 + 20))
    assert analytical.memory_s(traffic, 1e12) == pytest.approx(traffic / 1e12)
    assert analytical.io_s(150528, 64, 15.754e9) == pytest.approx(150528 * 64 / 15.754e9)


def test_overlapped_hides_communication_behind_the_backward_pass():
    times = comm("allreduce-local", intra_node_bw_bytes_per_s=1 * GB)  # 175 ms of communication
    b = analytical.BreakdownArrays(
        io_s=np.array(0.01), compute_s=np.array(0.3), memory_s=np.array(0.1), comm=times
    )
    assert b.additive_s == pytest.approx(0.01 + 0.3 + 0.1 + 0.175)
    # 175 ms fits in the backward pass (2/3 of 300 ms): only the device time is left.
    assert b.overlapped_s == pytest.approx(0.3)
    assert b.bottleneck_code() == 1  # compute


positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    architecture=st.sampled_from(list(ARCHITECTURE_CODES)),
    gradient_mb=positive,
    workers=st.integers(1, 64),
    servers=st.integers(1, 16),
    bw_gb=positive,
    factor=st.floats(min_value=1.0, max_value=100.0),
)
def test_more_bandwidth_is_never_slower(architecture, gradient_mb, workers, servers, bw_gb, factor):
    base = dict(
        gradient_bytes=gradient_mb * 1e6,
        total_gpus=workers * 8,
        nodes=workers,
        workers=workers,
        gpus_per_worker=8,
        parameter_servers=servers,
        intra_node_latency_s=1e-6,
        network_latency_s=1e-5,
    )
    slow = comm(architecture, intra_node_bw_bytes_per_s=bw_gb * GB, network_bw_bytes_per_s=bw_gb * GB / 10, **base)
    fast = comm(
        architecture, intra_node_bw_bytes_per_s=bw_gb * GB * factor, network_bw_bytes_per_s=bw_gb * GB / 10 * factor, **base
    )
    assert fast.total_s <= slow.total_s


@settings(max_examples=100, deadline=None)
@given(flops=st.floats(1e6, 1e13), batch=st.integers(1, 4096), k=st.integers(2, 8))
def test_compute_time_is_linear_in_batch(flops, batch, k):
    one = analytical.compute_s(flops, batch, 100e12)
    assert analytical.compute_s(flops, batch * k, 100e12) == pytest.approx(k * one, rel=1e-12)
