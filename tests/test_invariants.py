"""The shipped model keeps the physics' signs: six invariants over generated jobs and what-ifs.

1. More bandwidth (network, intra-node, host link) never predicts a slower step, nor does a
   what-if onto a network with as much bandwidth and no more latency.
2. More NICs per node never predicts a slower step.
3. More peak FLOP/s never predicts a slower step.
4. More memory bandwidth never predicts a slower step.
5. The identity what-if, and a what-if that changes no component the job
   uses, give exactly 1.0x.
6. A newer software release of the same job never predicts a slower step.

1-4 perturb the resolved hardware figures of a batch of generated jobs and
compare the learned step times (analytical baseline x residual) row by row;
they hold by construction (monotone constraints on features that move one
way under every upgrade), so the comparison is exact, with no tolerance.
The number of examples follows the Hypothesis profile (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from features.errors import SpecError
from features.hardware import hardware_catalog
from features.resolve import resolve
from features.table import table_from_rows
from features.workloads import workload_catalog
from predictor import Predictor
from predictor.api import DEFAULT_MODEL_DIR
from predictor.artefact import load_artefact
from predictor.learned import predict_times

CATALOG = hardware_catalog()
GPUS = sorted(CATALOG.devices.names())
NETWORKS = sorted(link.name for link in CATALOG.links_of_kind("network"))
MODELS = sorted(workload_catalog().workloads.names())


@pytest.fixture(scope="module")
def shipped():
    return load_artefact(DEFAULT_MODEL_DIR)


job_rows = st.fixed_dictionaries(
    {
        "model": st.sampled_from(MODELS),
        "gpu": st.sampled_from(GPUS),
        "architecture": st.sampled_from(["single", "allreduce-local", "allreduce-cluster", "ps-worker"]),
        "workers": st.sampled_from([1, 2, 4, 8, 16, 64]),
        "gpus_per_worker": st.sampled_from([1, 2, 4, 8]),
        "parameter_servers": st.sampled_from([1, 2, 4]),
        "network": st.sampled_from(NETWORKS),
        "nics_per_node": st.sampled_from([1, 2, 4, 8]),
        "precision": st.sampled_from(["fp32", "tf32", "fp16", "bf16"]),
        "framework": st.sampled_from(["pytorch", "tensorflow", "mxnet"]),
        "software_stack": st.sampled_from(["stock", "tuned"]),
        "batch_size_per_gpu": st.sampled_from([None, 1, 8, 64, 256]),
    }
)


def _resolved(rows):
    resolved = resolve(table_from_rows(rows))
    assume(resolved.ok.any())
    return resolved


def _learned_log_step(artefact, resolved) -> np.ndarray:
    return predict_times(artefact, resolved, resolved.breakdown(), 0.9).log_step_time_s[resolved.ok]


def _upgraded(resolved, factor: float, *fields: str):
    return dataclasses.replace(resolved, **{f: getattr(resolved, f) * factor for f in fields})


UPGRADES = {
    "network bandwidth": ("network_bw_bytes_per_s",),
    "intra-node bandwidth": ("intra_node_bw_bytes_per_s",),
    "host-link bandwidth": ("host_link_bw_bytes_per_s",),
    "every link's bandwidth": ("network_bw_bytes_per_s", "intra_node_bw_bytes_per_s", "host_link_bw_bytes_per_s"),
    "NICs per node": ("nics_per_node",),
    "peak FLOP/s (every precision)": ("peak_flops_per_s", "fp32_peak_flops_per_s"),
    "peak FLOP/s at the training precision": ("peak_flops_per_s",),
    "memory bandwidth": ("memory_bw_bytes_per_s",),
}


@pytest.mark.parametrize("upgrade", list(UPGRADES))
@given(rows=st.lists(job_rows, min_size=1, max_size=12), factor=st.sampled_from([1.0001, 1.1, 1.5, 2.0, 4.0, 16.0]))
def test_an_upgrade_is_never_predicted_slower(shipped, upgrade, rows, factor):
    """Invariants 1-4: multiplying a bandwidth, the NICs or a peak by ``factor`` > 1 never raises the learned step time."""
    resolved = _resolved(rows)
    before = _learned_log_step(shipped, resolved)
    after = _learned_log_step(shipped, _upgraded(resolved, factor, *UPGRADES[upgrade]))
    assert np.all(after <= before), (upgrade, factor, np.exp(before - after).min())


@pytest.mark.parametrize("upgrade", list(UPGRADES))
@given(rows=st.lists(job_rows, min_size=1, max_size=12), factor=st.sampled_from([1.1, 2.0, 16.0]))
def test_every_constrained_feature_moves_the_way_its_sign_says(upgrade, rows, factor):
    """What invariants 1-4 rest on: under each upgrade every feature with a monotone sign moves the faster
    way or stays (a feature that rose under an upgrade while constrained +1 could make it slower)."""
    from features.build import MONOTONE_SIGNS, physical_features

    resolved = _resolved(rows)
    upgraded = _upgraded(resolved, factor, *UPGRADES[upgrade])
    before = physical_features(resolved, resolved.breakdown())
    after = physical_features(upgraded, upgraded.breakdown())
    ok = resolved.ok
    for name, sign in MONOTONE_SIGNS.items():
        if name in before.names:
            a, b = before.column(name)[ok], after.column(name)[ok]
            assert np.all(sign * (b - a) <= 1e-12), (upgrade, name)


def test_a_faster_gpu_whose_backward_hides_less_all_reduce_is_still_faster(shipped):
    """A 64-GPU job at batch 1: more peak shortens the backward pass and exposes more of the all-reduce
    (the physics' step still falls); the learned step must fall too."""
    row = {"model": "ssd300-resnet50", "gpu": "V100-PCIE-16GB", "architecture": "allreduce-cluster", "workers": 8,
           "gpus_per_worker": 8, "network": "infiniband-edr", "precision": "fp32", "software_stack": "tuned",
           "batch_size_per_gpu": 1}
    resolved = _resolved([row])
    steps = [_learned_log_step(shipped, _upgraded(resolved, f, *UPGRADES["peak FLOP/s (every precision)"]))[0]
             for f in (1.0, 1.1, 1.5, 2.0, 4.0)]
    assert steps == sorted(steps, reverse=True)


@given(rows=st.lists(job_rows, min_size=1, max_size=12))
def test_a_ladder_of_network_upgrades_is_never_slower(shipped, rows):
    """Invariant 1 on the catalogue's own NICs: each faster tier (no slower latency) is never predicted slower."""
    resolved = _resolved(rows)
    links = sorted(CATALOG.links_of_kind("network"), key=lambda link: (link.bw_bytes_per_s, -link.latency_s))
    previous = None
    for link in links:
        at = dataclasses.replace(
            resolved,
            network_bw_bytes_per_s=np.full(len(rows), link.bw_bytes_per_s),
            network_latency_s=np.full(len(rows), link.latency_s),
        )
        now = _learned_log_step(shipped, at)
        if previous is not None and link.latency_s <= previous[0].latency_s:
            assert np.all(now <= previous[1]), (previous[0].name, link.name)
        previous = (link, now)


@pytest.fixture(scope="module")
def predictor():
    return Predictor()


#: Pairs of the catalogue's networks where the second is no slower: as much bandwidth or more, no more latency.
NETWORK_UPGRADES = [
    (a.name, b.name)
    for a in CATALOG.links_of_kind("network")
    for b in CATALOG.links_of_kind("network")
    if a.name != b.name and b.bw_bytes_per_s >= a.bw_bytes_per_s and b.latency_s <= a.latency_s
]


@given(rows=st.lists(job_rows, min_size=1, max_size=12), upgrade=st.sampled_from(NETWORK_UPGRADES))
def test_a_what_if_onto_a_faster_network_is_never_slower(predictor, rows, upgrade):
    """Invariant 1 through the what-if itself (``--to network=B``): the target may lie inside the training
    data where the baseline does not (a combination seen with one network only), and a speedup under 1
    would come from applying the correction to one side only."""
    from features import scenarios

    before, after = upgrade
    table = table_from_rows([{**row, "network": before} for row in rows])
    assume(not table.failed.all())
    result = predictor.speedup_table(table, scenarios.parse([f"network={after}"]))
    speedup = result.speedup[np.isfinite(result.speedup)]
    assert np.all(speedup >= 1.0), (before, after, speedup.min())


@given(row=job_rows)
def test_identity_what_if_is_exactly_one(predictor, row):
    """Invariant 5a: a scenario that sets fields to the values they have gives exactly 1.0x."""
    job = {
        "workload": {k: row[k] for k in ("model", "precision", "framework")},
        "parallelism": {k: row[k] for k in ("architecture", "workers", "gpus_per_worker")},
        "cluster": {"gpu": row["gpu"], "network": row["network"], "nics_per_node": row["nics_per_node"]},
    }
    to = [f"network={row['network']}", f"precision={row['precision']}", f"workers={row['workers']}"]
    try:
        result = predictor.speedup(job, to)
    except SpecError:
        assume(False)
    assert result.speedup == 1.0


@given(row=job_rows, other=st.sampled_from(NETWORKS), nics=st.sampled_from([1, 2, 8]))
def test_a_change_to_an_unused_component_is_exactly_one(predictor, row, other, nics):
    """Invariant 5b: the network and NICs of a one-node job, or the intra-node link of a one-GPU job, change nothing."""
    one_node = {
        "workload": {"model": row["model"], "precision": row["precision"]},
        "parallelism": {"architecture": "allreduce-local", "workers": 1, "gpus_per_worker": row["gpus_per_worker"]},
        "cluster": {"gpu": row["gpu"], "network": row["network"]},
    }
    single = {"workload": {"model": row["model"]}, "cluster": {"gpu": row["gpu"]}}
    try:
        predictor.time(one_node)
    except SpecError:
        assume(False)
    assert predictor.speedup(one_node, [other]).speedup == 1.0
    assert predictor.speedup(one_node, [f"nics_per_node={nics}"]).speedup == 1.0
    assert predictor.speedup(single, [other, f"nics_per_node={nics}"]).speedup == 1.0
    try:
        unused_link = predictor.speedup(single, ["intra_node_link=pcie-gen3"])
    except SpecError:  # a link this GPU cannot take is refused, not predicted
        return
    assert unused_link.speedup == 1.0


@given(rows=st.lists(job_rows, min_size=1, max_size=12), older=st.integers(2017, 2025), years=st.integers(1, 9))
def test_a_newer_software_release_is_never_predicted_slower(shipped, rows, older, years):
    """6. The same job on a newer release of its framework (``software_year``) is never predicted slower:
    the residual is monotone in the year, the physics does not read it."""
    before = _resolved([{**row, "software_year": older} for row in rows])
    after = _resolved([{**row, "software_year": older + years} for row in rows])
    assert np.array_equal(before.ok, after.ok)
    assert np.all(_learned_log_step(shipped, after) <= _learned_log_step(shipped, before))
