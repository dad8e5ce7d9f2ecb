"""What-if scenarios: presets, overrides, their errors, and the identity what-if."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from features import scenarios
from features.errors import SpecError
from features.table import table_from_rows
from predictor import Predictor


def target_row(row, steps):
    table = scenarios.apply(table_from_rows([row]), scenarios.parse(steps))
    return {k: v[0] for k, v in table.columns.items()}, table.errors[0]


PS_ROW = {"gpu": "V100-SXM2-16GB", "model": "resnet50", "architecture": "ps-worker", "workers": 8,
          "parameter_servers": 2, "intra_node_link": "pcie-gen3", "network": "ethernet-25g"}


def test_allreduce_nvlink_moves_ps_to_one_node_over_the_gpus_nvlink():
    row, error = target_row(PS_ROW, ["allreduce-nvlink"])
    assert error is None
    assert row["architecture"] == "allreduce-local"
    assert row["intra_node_link"] == "nvlink-gen2"


def test_allreduce_nvlink_goes_across_nodes_when_the_job_does_not_fit():
    row, _ = target_row({**PS_ROW, "workers": 32}, ["allreduce-nvlink"])
    assert row["architecture"] == "allreduce-cluster"
    prediction = Predictor().speedup({"workload": {"model": "resnet50"}, "parallelism": {"architecture": "ps-worker", "workers": 32},
                                      "cluster": {"gpu": "V100"}}, ["allreduce-nvlink"])
    assert prediction.target_job["architecture"] == "allreduce-cluster"


def test_steps_apply_in_order():
    row, _ = target_row(PS_ROW, ["ethernet-25g", "network=ethernet-25g", "workers=4", "workers=16"])
    assert row["workers"] == 16


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(SpecError) as caught:
        scenarios.parse(["allreduce-nvlnk"])
    assert "unknown scenario 'allreduce-nvlnk' at --to; did you mean allreduce-nvlink" in str(caught.value)


def test_unknown_override_key_lists_the_keys():
    with pytest.raises(SpecError, match="overridable keys: model, batch_size_per_gpu"):
        scenarios.parse(["colour=red"])


def test_bad_override_value_names_the_key():
    with pytest.raises(SpecError, match="--to workers: 'zero' is not valid; allowed: a whole number"):
        scenarios.parse(["workers=zero"])
    with pytest.raises(SpecError, match="unknown gpu 'Z80' at --to gpu"):
        scenarios.parse(["gpu=Z80"])


def test_mixed_precision_lowers_fp32_to_fp16():
    row, _ = target_row(PS_ROW, ["mixed-precision"])
    assert row["precision"] == "fp16"


def test_identity_what_if_is_exactly_one(ps_job):
    p = Predictor()
    assert p.speedup(ps_job, ["ethernet-25g"]).speedup == 1.0
    assert p.speedup(ps_job, ["workers=8", "gpu=V100-SXM2-16GB"]).speedup == 1.0


@settings(max_examples=40, deadline=None)
@given(
    workers=st.integers(1, 64),
    servers=st.integers(1, 8),
    batch=st.integers(1, 512),
    architecture=st.sampled_from(["ps-worker", "allreduce-cluster"]),
    precision=st.sampled_from(["fp32", "fp16", "bf16"]),
)
def test_identity_what_if_is_exactly_one_for_any_job(workers, servers, batch, architecture, precision):
    job = {
        "workload": {"model": "resnet50", "batch_size_per_gpu": batch, "precision": precision},
        "parallelism": {"architecture": architecture, "workers": workers, "parameter_servers": servers},
        "cluster": {"gpu": "V100", "gpus_per_node": 1 if architecture == "allreduce-cluster" else 8},
    }
    assert Predictor().speedup(job, [f"workers={workers}", f"batch_size_per_gpu={batch}"]).speedup == 1.0


def test_faster_network_speeds_up_only_the_network_part(ps_job):
    result = Predictor(model=None).speedup(ps_job, ["ethernet-100g"])
    base, target = result.baseline.breakdown, result.target.breakdown
    assert (base.io_s, base.compute_s, base.memory_s, base.comm_intra_node_s) == (
        target.io_s, target.compute_s, target.memory_s, target.comm_intra_node_s)
    # 4x the NIC rate: the bandwidth term of the network time shrinks 4x (latency terms are microseconds).
    assert target.comm_network_s == pytest.approx(base.comm_network_s / 4, rel=1e-3)
    assert result.speedup > 1.5
