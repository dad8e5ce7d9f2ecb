"""What both catalogue counters share: torch dispatch helpers for counting a training step.

Operators that move no data, FLOP formulas FlopCounterMode lacks, the bytes
a tensor occupies, a dispatch mode that sums operand traffic, fused
attention while counting, and the default device. Used by
:mod:`features.workload_counting` (totals per workload) and
:mod:`features.op_counting` (per op class); imports torch, so the product
never imports it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import conv_flop_count, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten

#: Operators that allocate or relabel memory without moving data.
NO_TRAFFIC = {
    aten._unsafe_view,
    aten.empty,
    aten.empty_like,
    aten.empty_strided,
    aten.new_empty,
    aten.new_empty_strided,
    aten.lift_fresh,
    aten._local_scalar_dense,
    aten.detach,
    aten.alias,
}

def _cpu_flash_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def conv_backward_flops(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed, *args, out_shape=None, **kwargs):
    """A convolution's backward: the input gradient and the weight gradient each cost the forward's FLOPs.

    Each multiply of the forward (an output element, a weight, an input
    element) appears once in each gradient, per group. FlopCounterMode's own
    formula (torch 2.14.1) computes the weight gradient as one convolution
    over all the input channels, so a grouped convolution's weight gradient
    counts ``groups`` times its work: 32x for ResNeXt's 3x3 convolutions, and a
    backward of ``1 + groups`` forwards instead of 2 (fixed upstream in
    pytorch/pytorch#183405, 2026). The forward's output is ``grad_out``;
    ``args[-1]`` is the output mask.
    """
    output_mask = args[-1]
    forward = conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


#: FLOP formulas FlopCounterMode lacks or miscounts: the CPU flash-attention kernel, which it only
#: knows under its CUDA names (same formulas: 2 matmuls forward, 5 backward), and a grouped
#: convolution's backward (:func:`conv_backward_flops`).
EXTRA_FLOP_FORMULAS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
    aten.convolution_backward: conv_backward_flops,
}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor occupies in memory: broadcast (stride-0) dimensions count once."""
    if t.layout != torch.strided:
        return 0
    if t.numel() == 0:
        return 0
    elements = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            elements *= size
    return elements * t.element_size()


class SavedActivations:
    """Bytes of the distinct storages autograd keeps for the backward pass, counted as the forward saves them.

    Every tensor an operator saves for its backward passes through
    :func:`torch.autograd.graph.saved_tensors_hooks`; tensors that share a
    storage (views, a tensor saved by two operators) count once, at the
    storage's size. Parameters count too; they do not grow with the batch,
    so a slope between two batches drops them.
    """

    def __init__(self) -> None:
        self._storages: dict[int, int] = {}

    @property
    def total_bytes(self) -> int:
        return sum(self._storages.values())

    @contextlib.contextmanager
    def counting(self) -> Iterator["SavedActivations"]:
        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.layout == torch.strided:
                storage = t.untyped_storage()
                self._storages.setdefault(storage._cdata, storage.nbytes())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield self


def is_view(func) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


class TensorTrafficMode(TorchDispatchMode):
    """Sums, over every aten operator dispatched, the bytes of its tensor operands.

    Distinct input tensors count once each, every output counts once; views
    and allocations count zero. ``by_operator`` keeps the split per operator.
    """

    def __init__(self) -> None:
        super().__init__()
        self.total_bytes = 0
        self.by_operator: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket in NO_TRAFFIC or is_view(func):
            return out
        inputs = {id(t): t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        outputs = {id(t): t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
        if func.overloadpacket is aten.copy_:
            # copy_(dst, src) reads src and writes dst: dst is not read.
            inputs = {id(args[1]): args[1]} if isinstance(args[1], torch.Tensor) else {}
        n_bytes = sum(map(tensor_bytes, inputs.values())) + sum(map(tensor_bytes, outputs.values()))
        self.total_bytes += n_bytes
        key = str(func.overloadpacket)
        self.by_operator[key] = self.by_operator.get(key, 0) + n_bytes
        return out


def _fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Scaled dot-product attention through the fused (flash) CPU kernel.

    Used for every attention during counting, on CPU and meta tensors alike,
    so attention is counted as the fused kernel that current training stacks
    run: scores are computed on chip and never written to DRAM. Grouped-query
    attention repeats keys and values to the query heads first.
    """
    if query.shape[-3] != key.shape[-3]:
        repeats = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(repeats, dim=-3)
        value = value.repeat_interleave(repeats, dim=-3)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
            ~attn_mask, float("-inf")
        )
    return aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )[0]


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """Route ``F.scaled_dot_product_attention`` through :func:`_fused_sdpa` while counting."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = _fused_sdpa
    torch.nn.functional.scaled_dot_product_attention = _fused_sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
        torch.nn.functional.scaled_dot_product_attention = original


def default_device(device: str) -> contextlib.AbstractContextManager:
    """Make ``device`` the default for new tensors; a no-op for ``cpu`` (the device mode slows every call)."""
    return contextlib.nullcontext() if device == "cpu" else torch.device(device)
