"""Layout jobs: validation, hand-computed bubble, communication and memory figures, invariants, the planner and the CLI."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.main import app
from features.analytical import ring_allreduce_s
from features.errors import SpecError
from features.jobspec import job_from_dict, load_job
from features.layout import MATMUL_EFFICIENCY, Layout, job_memory, step_breakdown, transformer_catalog
from features.layout_spec import layout_job_from_row
from features.layout_collectives import Links, data_parallel_s
from features.layout_plan import candidate_layouts, plan
from features.mechanisms import physics_constants
from features.transformer import stage_param_count
from features.units import bytes_to_gib

LLAMA = "examples/jobs/llama-70b-512-h100.json"
GPT3 = "examples/jobs/gpt3-175b-1024-h100.json"
H100_LINKS = Links(8, 450e9, 5e-7, 50e9, 1e-6, 8)  # nvswitch-gen3 and infiniband-ndr as catalogued


def _job(**changes):
    data = json.loads(open(LLAMA).read())
    for path, value in changes.items():
        section, _, key = path.partition("__")
        if value is None:
            data[section].pop(key, None)
        else:
            data[section][key] = value
    return job_from_dict(data)


def test_example_links_come_from_the_catalogue():
    job = layout_job_from_row(load_job(LLAMA).row)
    assert job.links == H100_LINKS
    assert job.layout == Layout(8, 4, 1, 16, 1, 1024, "1f1b", 1, True, "selective", "optimizer")


def test_h800_pays_its_nvlink_in_tensor_parallel_all_reduces():
    """The same layout on H800s: compute unchanged, each TP all-reduce's bandwidth term 450/200 = 2.25x."""
    h100 = step_breakdown(layout_job_from_row(load_job(LLAMA).row))
    h800 = step_breakdown(layout_job_from_row(_job(cluster__gpu="H800").row))
    assert h800.compute_s == h100.compute_s
    message_bytes = 1 * 8192 * 8192 * 2
    extra_per_allreduce_s = 2 * 7 / 8 * message_bytes * (1 / 200e9 - 1 / 450e9)
    assert h800.tp_comm_s - h100.tp_comm_s == pytest.approx(64 * 20 * 4 * extra_per_allreduce_s)


def test_memory_bound_operators_by_hand_and_what_a_faster_memory_buys():
    """Llama-70B, TP 8 with sequence parallelism: a block keeps (8 + 2 + 4 x 1024/8192 + 2 + 6 x 28672/8192) / 8
    = 4.1875 bytes per token x hidden (Korthikanti's Table 2, no attention scores), moved 4 times per micro-batch,
    at the DRAM's attainable share combined with what the 132 SMs of an H100 or H200 sustain."""
    k = physics_constants()

    def attained(dram_bytes_per_s: float) -> float:
        return 1.0 / (1.0 / (dram_bytes_per_s * k.memory_efficiency) + 1.0 / (132 * k.memory_bytes_per_s_per_sm))

    h100 = step_breakdown(layout_job_from_row(load_job(LLAMA).row))
    kept_bytes = 4.1875 * 8192 * 1 * 8192
    per_micro_batch_s = 20 * 4 * kept_bytes / attained(3.35e12)
    assert h100.memory_bound_s == pytest.approx(64 * per_micro_batch_s)
    # An H200: the same arithmetic and SMs, 4.8 / 3.35 of the DRAM bandwidth; the memory-bound part shrinks,
    # by less than the DRAM alone would say.
    h200 = step_breakdown(layout_job_from_row(_job(cluster__gpu="H200").row))
    assert h200.compute_s == h100.compute_s
    assert h200.memory_bound_s == pytest.approx(h100.memory_bound_s * attained(3.35e12) / attained(4.8e12))
    assert h100.memory_bound_s * 3.35 / 4.8 < h200.memory_bound_s < h100.memory_bound_s
    assert h200.step_time_s < h100.step_time_s
    # Full recomputation replays the forward pass: one more write of the kept activations.
    full = step_breakdown(layout_job_from_row(_job(parallelism__activation_recompute="full").row))
    assert full.memory_bound_s == pytest.approx(h100.memory_bound_s * 5 / 4)


def test_bubble_fractions_by_hand():
    assert Layout(8, 4, 1, 16, 1, 1024).bubble_fraction == pytest.approx(3 / 64)  # (p-1)/m, m = 1024/16
    assert Layout(4, 8, 1, 32, 1, 2048, "interleaved", 12).bubble_fraction == pytest.approx(7 / (12 * 64))
    job = layout_job_from_row(load_job(LLAMA).row)
    b = step_breakdown(job)
    steady_s = b.compute_s + b.memory_bound_s + b.tp_comm_s + b.cp_comm_exposed_s
    assert b.pipeline_bubble_s / steady_s == pytest.approx(3 / 64)


def test_tensor_parallel_and_pipeline_volumes_by_hand():
    job = layout_job_from_row(load_job(LLAMA).row)
    b = step_breakdown(job)
    message_bytes = 1 * 8192 * 8192 * 2  # micro-batch x sequence x hidden, BF16
    one_allreduce_s = 2 * 7 / 8 * message_bytes / 450e9 + 2 * 7 * 5e-7
    # 64 micro-batches x 20 layers per stage x (2 forward + 2 backward) all-reduces (selective recompute adds none).
    assert b.tp_comm_s == pytest.approx(64 * 20 * 4 * one_allreduce_s)
    # Stage boundaries: 1/TP of the activations per GPU, forward and backward per micro-batch, over the GPU's NIC share.
    boundary_bytes = message_bytes / 8
    assert b.pipeline_transfer_s == pytest.approx(2 * 64 * (boundary_bytes / 50e9 + 1e-6))


def test_data_parallel_reduction_by_hand():
    gradient_bytes = 4e9
    # Stride 8 (TP 8): every peer on another node; ring over each GPU's NIC share (8 x 50 GB/s / 8).
    t = data_parallel_s(gradient_bytes, 0.0, 16, 8, "optimizer", 64, H100_LINKS)
    assert t.gradient_s == pytest.approx(2 * 15 / 16 * gradient_bytes / 50e9 + 30 * 1e-6)
    # Stride 2: 4 peers per node ring over NVSwitch, then each 1/4 slice across 4 nodes.
    t = data_parallel_s(gradient_bytes, 0.0, 16, 2, "none", 1, H100_LINKS)
    intra = float(ring_allreduce_s(gradient_bytes, 4, 450e9, 5e-7))
    network = float(ring_allreduce_s(gradient_bytes / 4, 4, 50e9, 1e-6))
    assert t.gradient_s == pytest.approx(intra + network)
    # Full sharding: one reduce-scatter of gradients, two parameter all-gathers per micro-batch.
    full = data_parallel_s(gradient_bytes, gradient_bytes, 16, 8, "full", 3, H100_LINKS)
    assert full.gradient_s == pytest.approx(0.5 * (2 * 15 / 16 * gradient_bytes / 50e9 + 30e-6))
    assert full.parameter_gather_s == pytest.approx(6 * full.gradient_s)


def test_memory_of_the_example_by_hand():
    job = layout_job_from_row(load_job(LLAMA).row)
    b = step_breakdown(job)
    shape = job.shape
    layer = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    stage = 20 * layer / 8 + 128000 * 8192 / 8
    assert stage_param_count(shape, 8, 4) == pytest.approx(stage)
    assert b.memory.weights_bytes == pytest.approx(2 * stage)
    assert b.memory.optimizer_bytes == pytest.approx(12 * stage / 16)  # ZeRO-1 over DP 16
    # Selective recompute with SP, llama block: s b h (8 + 2 + 4/8 + 2 + 6 x 3.5) / t per layer, 4 micro-batches in flight
    # (1F1B holds p), 20 layers, plus the FP32 logits of one micro-batch over TP.
    per_layer = 8192 * 8192 * (8 + 2 + 0.5 + 2 + 21) / 8
    assert b.memory.activations_bytes == pytest.approx(20 * 4 * per_layer + 4 * 8192 * 128000 / 8)


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2, 4]), micro=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_more_tensor_parallel_on_nvlink_never_changes_total_flops(tp, cp, micro, recompute):
    base = layout_job_from_row(load_job(LLAMA).row)
    dp = 512 // (tp * cp)
    job = base.with_layout(Layout(tp, 1, cp, dp, micro, 1024, "1f1b", 1, tp > 1, recompute, "full"))
    b = step_breakdown(job)
    reference = step_breakdown(base.with_layout(Layout(1, 1, 1, 512, 1, 1024, "1f1b", 1, False, recompute, "full")))
    assert b.hardware_flops_per_step == reference.hardware_flops_per_step
    # What the GPUs execute adds up to the same total, however it is split.
    executed = b.compute_s * job.peak_flops_per_s * MATMUL_EFFICIENCY * job.layout.gpus
    assert executed == pytest.approx(b.hardware_flops_per_step, rel=1e-9)


def test_planner_never_ranks_a_layout_that_does_not_fit():
    job = layout_job_from_row(load_job(LLAMA).row)
    result = plan(job, 64)
    assert result.fitting_layouts < result.valid_layouts  # some were dropped
    assert result.ranked and all(p.breakdown.fits for p in result.ranked)
    times = [p.breakdown.step_time_s for p in result.ranked]
    assert times == sorted(times)
    assert all(p.layout.gpus == 64 for p in result.ranked)


def test_gpu_counts_are_the_products_of_the_allowed_sizes():
    """3 layers, 2 heads, a sequence of 4, a global batch of 2, one GPU per node (TP up to 2), by hand:
    TP x PP in {1, 2, 3, 6}, x CP {1, 2, 4}, x DP {1, 2}."""
    from features.layout_plan import gpu_counts, gpu_count_rule, nearest_gpu_counts

    job = layout_job_from_row(_job(
        workload__layers=3, workload__attention_heads=2, workload__kv_heads=2, workload__sequence_length=4,
        workload__global_batch_size=2, parallelism__tensor_parallel=1, parallelism__pipeline_parallel=1,
        parallelism__data_parallel=2, parallelism__sharding="none", cluster__gpus_per_node=1,
    ).row)
    assert gpu_counts(job) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]
    for gpus in range(1, 50):
        assert any(True for _ in candidate_layouts(job, gpus)) is (gpus in gpu_counts(job)), gpus
    assert nearest_gpu_counts(job, 5) == (4, 6)
    assert nearest_gpu_counts(job, 100) == (48, None)
    assert gpu_count_rule(job, 5).endswith("the nearest such counts: 4 and 6")
    assert gpu_count_rule(job, 100).endswith("the largest such count: 48")


@settings(max_examples=40, deadline=None)
@given(
    layers=st.integers(1, 12), heads_exp=st.integers(0, 4), kv_div=st.integers(0, 2), seq_exp=st.integers(0, 4),
    batch=st.integers(1, 48), per_node=st.sampled_from([1, 2, 4, 8]),
)
def test_every_gpu_count_has_layouts_exactly_when_gpu_counts_lists_it(layers, heads_exp, kv_div, seq_exp, batch, per_node):
    """For any small shape, global batch and node size: a count up to the largest listed has a valid
    layout (the enumerator yields one) if and only if gpu_counts lists it."""
    from features.layout_plan import gpu_counts

    heads = 2**heads_exp
    kv = max(1, heads // 2**kv_div)
    try:
        job = layout_job_from_row(_job(
            workload__layers=layers, workload__attention_heads=heads, workload__kv_heads=kv,
            workload__sequence_length=2**seq_exp, workload__global_batch_size=batch, workload__micro_batch_size=1,
            workload__hidden_size=64 * heads, workload__ffn_hidden_size=256 * heads,
            parallelism__tensor_parallel=1, parallelism__pipeline_parallel=1, parallelism__context_parallel=1,
            parallelism__data_parallel=batch, parallelism__virtual_stages=1, parallelism__sharding="none",
            cluster__gpus_per_node=per_node,
        ).row)
    except SpecError:
        return  # a shape the job rules refuse (covered by the validation tests)
    counts = gpu_counts(job)
    assert counts[0] == 1 and counts == sorted(set(counts))
    for gpus in range(1, counts[-1] + 2):
        assert (next(candidate_layouts(job, gpus), None) is not None) is (gpus in counts), gpus


def test_a_plan_that_nothing_fits_names_the_leanest_layout_and_a_count_without_layouts_is_refused():
    job = layout_job_from_row(load_job(LLAMA).row)
    one = plan(job, 1)
    assert one.valid_layouts == 12 and one.fitting_layouts == 0 and not one.ranked
    layout, memory = one.leanest
    everything = [job_memory(job.with_layout(lay)).total_bytes for lay in candidate_layouts(job, 1)]
    assert memory.total_bytes == min(everything) > job.gpu.memory_bytes
    assert layout.activation_recompute == "full"
    table = runner.invoke(app, ["plan", "--job", LLAMA, "--gpus", "1"])
    assert table.exit_code == 3  # answered, and nothing fits
    assert f"none of the 12 valid layouts fits in 80.0 GB per GPU; the leanest needs {bytes_to_gib(memory.total_bytes):.1f} GB" in table.stdout
    assert table.stderr == "nothing fits: none of the 12 valid layouts of llama-70b-512-h100 on 1 GPUs fits H100-SXM5-80GB's memory\n"
    answered = runner.invoke(app, ["plan", "--job", LLAMA, "--gpus", "1", "--json"])
    as_json = json.loads(answered.stdout)
    assert answered.exit_code == 3 and json.loads(answered.stderr) == {"nothing_fits": table.stderr.removeprefix("nothing fits: ").strip()}
    assert as_json["ranked"] == [] and as_json["leanest"]["memory"]["total_bytes"] == memory.total_bytes
    assert runner.invoke(app, ["plan", "--job", LLAMA, "--gpus", "16"]).exit_code == 0  # TP8 PP2 fits
    # 13 GPUs: no TP x PP x CP x DP makes 13 with DP dividing 1024 (10 = TP2 PP5, 16 do).
    refused = runner.invoke(app, ["plan", "--job", LLAMA, "--gpus", "13"])
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1
    assert refused.output.startswith("error: --gpus: 13 is not valid") and "the nearest such counts: 10 and 16" in refused.output


def test_validation_names_the_field():
    with pytest.raises(SpecError, match="parallelism.tensor_parallel.*workload.attention_heads = 64"):
        layout_job_from_row(_job(parallelism__tensor_parallel=3, parallelism__data_parallel=1).row)
    with pytest.raises(SpecError, match="parallelism.pipeline_parallel.*workload.layers = 80"):
        layout_job_from_row(_job(parallelism__pipeline_parallel=3).row)
    with pytest.raises(SpecError, match="workload.global_batch_size.*16 x 1"):
        layout_job_from_row(_job(workload__global_batch_size=1000).row)
    with pytest.raises(SpecError, match="parallelism.data_parallel.*512 GPUs.*64 nodes"):
        layout_job_from_row(_job(parallelism__nodes=64, parallelism__data_parallel=8).row)
    with pytest.raises(SpecError, match="parallelism.tensor_parallel.*kv_heads = 8"):
        layout_job_from_row(_job(parallelism__tensor_parallel=16, parallelism__data_parallel=8).row)
    with pytest.raises(SpecError, match="virtual_stages"):
        layout_job_from_row(_job(parallelism__virtual_stages=2).row)
    with pytest.raises(SpecError, match="unknown transformer 'lama'"):
        layout_job_from_row(_job(workload__model="lama").row)
    wide = layout_job_from_row(_job(parallelism__tensor_parallel=16, workload__kv_heads=16, parallelism__data_parallel=8).row)
    assert any("spans more than one node" in w for w in wide.warnings)


def test_catalogue_transformer_by_name_and_lora_adapter():
    assert transformer_catalog().get("gpt3", "workload.model").shape.param_count() == 174_604_259_328
    job = job_from_dict({
        "workload": {"model": "llama2-70b", "sequence_length": 8192, "global_batch_size": 8,
                     "adapter": {"kind": "lora", "rank": 16}},
        "parallelism": {"tensor_parallel": 8, "data_parallel": 1},
        "cluster": {"gpu": "H100-SXM", "network": "infiniband-ndr"},
    })
    resolved = layout_job_from_row(job.row)
    assert resolved.shape.lora_rank == 16
    assert resolved.shape.adapter_param_count() == 44_564_480
    with pytest.raises(SpecError, match="workload.adapter.size"):
        job_from_dict({"workload": {"model": "llama", "adapter": {"kind": "lora", "size": 1}}, "cluster": {"gpu": "H100"}})


runner = CliRunner()


def test_cli_time_json_carries_memory_and_mfu():
    result = runner.invoke(app, ["time", "--job", LLAMA, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["memory_per_gpu_bytes"] > 0 and out["fits"] is True
    assert 0 < out["mfu"] <= out["hfu"] < 1
    assert out["tokens_per_s"] == pytest.approx(1024 * 8192 / out["step_time_s"])
    assert set(out["breakdown"]) >= {"tp_communication", "pipeline_bubble", "pipeline_transfers", "dp_communication"}


def test_cli_does_not_fit_exits_2(tmp_path):
    data = json.loads(open(GPT3).read())
    data["parallelism"]["activation_recompute"] = "none"
    data["parallelism"]["sharding"] = "none"
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data))
    result = runner.invoke(app, ["time", "--job", str(path)])
    assert result.exit_code == 2
    assert "does not fit:" in result.output and "GB per GPU needed, H100-SXM5-80GB has 80 GB" in result.output
    as_json = runner.invoke(app, ["time", "--job", str(path), "--json"])
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout.split("error:")[0])["memory_per_gpu_bytes"] > 80 * 2**30


@pytest.mark.parametrize(
    "to",
    [["tensor_parallel=4", "pipeline_parallel=8"], ["sharding=full"], ["activation_recompute=full"], ["micro_batch_size=2"],
     ["sequence_length=32768", "context_parallel=4"], ["gpu=H200"], ["ethernet-100g"], ["nodes=128"]],
)
def test_cli_layout_what_ifs(to):
    args = ["speedup", "--job", LLAMA, "--json"]
    for step in to:
        args += ["--to", step]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["speedup"] > 0
    assert out["target"]["gpus"] == (1024 if to == ["nodes=128"] else 512)


@pytest.mark.parametrize("step, field", [("architecture=ps-worker", "architecture"), ("workers=4", "workers"),
                                         ("batch_size_per_gpu=8", "batch_size_per_gpu")])
def test_a_what_if_on_fields_a_layout_job_does_not_use_is_refused(step, field):
    """Not a silent 1.00x: the layout model has no architecture, worker count or per-GPU batch to change."""
    result = runner.invoke(app, ["speedup", "--job", LLAMA, "--to", step])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"a layout job does not use {field}" in lines[0] and "micro_batch_size" in lines[0]


def test_cli_what_if_directions():
    def speedup(*to):
        args = ["speedup", "--job", LLAMA, "--json"]
        for step in to:
            args += ["--to", step]
        return json.loads(runner.invoke(app, args).output)

    full = speedup("activation_recompute=full")
    assert full["speedup"] < 1  # recomputing more is slower ...
    assert full["target"]["memory_per_gpu_bytes"] < full["baseline"]["memory_per_gpu_bytes"]  # ... and smaller
    slower_net = speedup("ethernet-25g")
    assert slower_net["speedup"] <= 1


def test_cli_explain_and_plan():
    result = runner.invoke(app, ["explain", "--job", LLAMA, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert set(out["shares"]) == {"compute", "memory", "tp_communication", "cp_communication", "pipeline_bubble",
                                  "pipeline_transfers", "dp_communication", "optimizer"}
    assert sum(out["shares"].values()) == pytest.approx(1.0)
    result = runner.invoke(app, ["plan", "--job", LLAMA, "--gpus", "256", "--json", "--top", "3"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["ranked"]) == 3 and all(r["fits"] for r in out["ranked"])
    assert out["ranked"][0]["step_time_s"] <= out["ranked"][1]["step_time_s"]
    table = runner.invoke(app, ["plan", "--job", LLAMA, "--top", "2"])
    assert table.exit_code == 0 and "fit in memory" in table.output


def test_data_parallel_jobs_are_unchanged():
    result = runner.invoke(app, ["time", "--job", "examples/jobs/bert-large-allreduce-cluster.json", "--json", "--model", "none"])
    assert result.exit_code == 0
    out = json.loads(result.output)
    assert "kind" not in out and set(out["breakdown"]) >= {"io_s", "compute_s", "memory_s", "comm_s"}


def test_a_table_row_with_layout_fields_fails_instead_of_ignoring_them():
    from features.resolve import resolve
    from features.table import table_from_rows

    base = {"model": "gpt3-175b", "gpu": "H100", "architecture": "allreduce-cluster", "workers": 8, "gpus_per_worker": 8}
    resolved = resolve(table_from_rows([{**base, "tensor_parallel": 4}, base]))
    assert resolved.errors[0].startswith("parallelism.tensor_parallel: '4' is not valid; a transformer layout field")
    assert resolved.errors[1] is None


def test_cli_breakdown_of_a_layout_job():
    result = runner.invoke(app, ["breakdown", "--job", LLAMA, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["breakdown"]["compute"] > 0
    assert "pipeline bubble" in runner.invoke(app, ["breakdown", "--job", LLAMA]).output
