"""The operator-level counter on small hand-checkable models and on the plain-torch ResNet-50."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the counter needs the testbed extra (torch)")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from features.model_defs.recipe import Probe  # noqa: E402
from features.op_counting import count_step_ops, gemm_shape, matrix_intensity_bands, unaligned_gemm_flops  # noqa: E402
from features.workloads import workload_catalog  # noqa: E402


def _mlp_probe() -> Probe:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(4, 8)
    y = torch.randint(0, 4, (4,))

    def make_batch(b: int):
        return x[:b], y[:b]

    return Probe(model, make_batch, lambda m, batch: F.cross_entropy(m(batch[0]), batch[1]))


def test_grouped_convolution_backward_costs_two_forwards():
    """A 3x3 convolution of 32 channels in 8 groups on a 1 x 32 x 6 x 6 map (padding 1): each output element
    takes 4 input channels x 9 taps, so the forward is 2 x 32 x 36 x 4 x 9 = 82,944 FLOPs; the input and
    the weight gradient each repeat its multiplies once, per group."""
    torch.manual_seed(0)
    conv = nn.Conv2d(32, 32, 3, padding=1, groups=8, bias=False)
    x = torch.randn(2, 32, 6, 6)

    def make_batch(b: int):
        return (x[:b].clone().requires_grad_(True),)

    step = count_step_ops(Probe(conv, make_batch, lambda m, batch: m(batch[0]).sum()), 1)
    assert step.counts["forward"].matrix_flops == 82_944
    assert step.counts["backward"].matrix_flops == 2 * 82_944


def test_mlp_matrix_flops_and_gradient_order():
    step = count_step_ops(_mlp_probe(), 4)
    # Forward: 2 x 4 x (8 x 16 + 16 x 4) = 1536 FLOPs. Backward: the weight gradients of both
    # layers (1536) and the input gradient of the second layer only (2 x 4 x 16 x 4 = 512).
    assert step.counts["forward"].matrix_flops == 1536
    assert step.counts["backward"].matrix_flops == 1536 + 512
    assert step.counts["forward"].matrix_kernels == 2
    # Gradients arrive last layer first: its bias and weight (4, 64), then the first layer's (16, 128).
    assert sorted(step.gradient_elements[:2]) == [4, 64]
    assert sorted(step.gradient_elements[2:]) == [16, 128]
    assert step.gradient_ready_fraction[-1] == 1.0
    assert list(step.gradient_ready_fraction) == sorted(step.gradient_ready_fraction)
    # Every operator that moves data is one kernel; views are none.
    assert step.counts["forward"].kernels >= 5
    assert step.counts["optimizer"].kernels > step.optimizer_foreach.kernels > 0


def test_memory_bound_bytes_count_each_operand_once():
    model = nn.ReLU()
    x = torch.randn(10, 10, requires_grad=True)
    probe = Probe(model, lambda b: x, lambda m, batch: m(batch).sum())
    step = count_step_ops(probe, 1)
    forward = step.counts["forward"]
    # relu reads 400 B and writes 400 B; sum reads 400 B and writes one 4-byte scalar.
    assert forward.memory_bound_bytes == 400 + 400 + 400 + 4
    assert forward.matrix_flops == 0 and forward.kernels == 2


def test_only_3x3_stride_1_convolutions_count_as_winograd_eligible():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, bias=False),  # eligible
        nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False),  # strided
        nn.Conv2d(4, 4, 1, bias=False),  # 1x1
        nn.Conv2d(4, 4, 3, padding=2, dilation=2, bias=False),  # dilated
        nn.Conv2d(4, 4, 3, padding=1, groups=2, bias=False),  # grouped
    )
    x = torch.randn(1, 2, 8, 8)
    probe = Probe(model, lambda b: x[:b], lambda m, batch: m(batch).sum())
    step = count_step_ops(probe, 1)
    # The first convolution: 2 x (2 x 4 x 9) x (8 x 8) = 9216 FLOPs forward; its input needs no
    # gradient, so backward computes only its weight gradient, another 9216.
    assert step.counts["forward"].winograd_flops == 9216
    assert step.counts["backward"].winograd_flops == 9216
    assert step.counts["forward"].matrix_flops > 9216


def test_plain_resnet50_counts_the_catalogue_flops():
    from features.model_defs.plain import PLAIN_BUILDERS

    build, _ = PLAIN_BUILDERS["resnet50"]
    with torch.device("meta"):
        probe = build()
    step = count_step_ops(probe, 2)
    flops = (step.counts["forward"].matrix_flops + step.counts["backward"].matrix_flops) / 2
    assert flops == pytest.approx(workload_catalog().get("resnet50").flops_per_sample, rel=1e-6)
    assert sum(step.gradient_elements) == workload_catalog().get("resnet50").dense_param_count


def test_a_recurrent_layer_launches_once_but_runs_a_matrix_operator_per_time_step():
    from features.op_counting import _with_fused_rnn_kernels

    torch.manual_seed(0)
    x = torch.randn(5, 2, 8)  # 5 time steps, batch 2
    probe = Probe(nn.LSTM(8, 8), lambda b: x[:, :b], lambda m, batch: m(batch)[0].sum())
    with torch.backends.mkldnn.flags(enabled=False):
        decomposed = count_step_ops(probe, 2)
    fused = _with_fused_rnn_kernels(probe, decomposed)
    forward = fused.counts["forward"]
    # The fused kernel is one launch where the decomposed layer issues several per time step, but it
    # runs the same five dependent recurrent matrix multiplies: the operator-size curve sees each.
    assert forward.kernels < decomposed.counts["forward"].kernels
    assert forward.matrix_kernels == decomposed.counts["forward"].matrix_kernels >= 5
    assert forward.matrix_flops == decomposed.counts["forward"].matrix_flops


def test_matrix_intensity_bands_of_one_linear_layer_by_hand():
    """One bias-free Linear(8, 4) on inputs that need their gradient, its outputs summed: per sample, the forward,
    the input gradient and the weight gradient each do 2 x 8 x 4 = 64 FLOPs. Beyond the batch-independent weight,
    the forward moves 8 inputs and 4 outputs of 4 bytes (48 bytes: intensity 4/3, band 0); the backward's
    gradient of a sum is one broadcast scalar, so each backward multiply moves only its 8 inputs or outputs
    (32 bytes: intensity 2, band 2)."""
    torch.manual_seed(0)
    layer = nn.Linear(8, 4, bias=False)
    x = torch.randn(4, 8)

    def make_batch(b: int):
        return (x[:b].clone().requires_grad_(True),)

    probe = Probe(layer, make_batch, lambda m, batch: m(batch[0]).sum())
    bands = matrix_intensity_bands(count_step_ops(probe, 2), count_step_ops(probe, 4))
    assert bands == [[64, 48], [128, 64]]


def test_unaligned_gemm_flops_of_a_ten_wide_output_layer_by_hand():
    """Linear(16, 24) then Linear(24, 10), inputs without gradient. The first layer's multiplies have the
    model's dimensions 16 and 24 (multiples of 8); the second's forward ([b, 24] x [24, 10]), input gradient
    ([b, 10] x [10, 24]) and weight gradient ([10, b] x [b, 24]) each carry the width 10: 3 x 2 x 10 x 24 = 1,440
    FLOPs per sample. The batch b changes between the two passes and is not judged."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 10))
    x = torch.randn(4, 16)
    probe = Probe(model, lambda b: (x[:b],), lambda m, batch: m(batch[0]).sum())
    small, large = count_step_ops(probe, 2), count_step_ops(probe, 4)
    assert unaligned_gemm_flops(small, large) == 1440
    shapes = [op[3] for op in large.matrix_ops]
    assert (4, 10, 24) in shapes and (4, 24, 10) in shapes and (10, 24, 4) in shapes
    # Every matrix multiply of an all-aligned model is aligned; a convolution has no GEMM shape.
    aligned = Probe(nn.Linear(16, 24), lambda b: (x[:b],), lambda m, batch: m(batch[0]).sum())
    assert unaligned_gemm_flops(count_step_ops(aligned, 2), count_step_ops(aligned, 4)) == 0
    assert gemm_shape(torch.ops.aten.convolution.default.overloadpacket, ()) is None


def test_matrix_intensity_bands_add_up_to_the_class_totals():
    probe = _mlp_probe()
    small, large = count_step_ops(probe, 2), count_step_ops(probe, 4)
    bands = matrix_intensity_bands(small, large)
    flops = sum(large.counts[p].matrix_flops for p in ("forward", "backward")) / 4
    moved = sum(large.counts[p].matrix_bytes - small.counts[p].matrix_bytes for p in ("forward", "backward")) / 2
    assert sum(f for f, _ in bands) == pytest.approx(flops)
    assert sum(b for _, b in bands) == pytest.approx(moved)
    # Bands run from low to high intensity.
    intensities = [f / b for f, b in bands]
    assert intensities == sorted(intensities)
