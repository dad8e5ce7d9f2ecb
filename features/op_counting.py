"""Count a training step operator by operator: FLOPs, bytes and kernels per op class.

Regenerate the ``op_classes`` block of every catalogue workload in the
regeneration environment of :mod:`features.workload_counting` (torch,
torchvision, transformers and diffusers; 20 minutes on two cores shared
with other work, 11 of them Tacotron 2's decoder steps on CPU tensors)::

    .regen-venv/bin/python -m features.op_counting

(``--only resnet50,gnmt`` recounts some entries; ``--resume`` continues an
interrupted run, keeping what it already counted.) The project's own
environment (torch only, the CPU build of the ``testbed`` extra) counts the
workloads written in plain torch; an entry whose definition needs a library
that is not installed keeps its block, or gets the documented default split
of :func:`features.workloads.default_op_classes` with provenance
``estimated`` (the split a custom model in a job spec gets).

Under torch's dispatch (a :class:`TorchDispatchMode`, as
:class:`torch.utils.flop_counter.FlopCounterMode` counts FLOPs), every aten
operator of one forward pass, one backward pass and one optimizer step is
put in one of two classes:

* **matrix** operators: those FlopCounterMode has a formula for (matrix
  multiplies, convolutions and their backward, fused attention), eligible for
  tensor cores at reduced precision. Their FLOPs (a multiply-add counts 2)
  and their operand bytes are counted.
  Of those, the FLOPs of 2-D convolutions with a 3x3 kernel, stride 1,
  dilation 1 and one group (forward and both backward convolutions) are
  counted apart as **Winograd-eligible**: cuDNN's Winograd algorithms
  compute exactly those with fewer multiplies (see :mod:`features.physics`).
* **memory-bound** operators: every other operator that moves data
  (element-wise, normalisation, softmax, embedding look-ups, reductions,
  copies, the optimizer update). Their FLOPs are taken as one per output
  element; their DRAM bytes are each operand read once and each output
  written once (a broadcast operand counts its stored elements; views and
  allocations count zero).

Each operator that moves data is one **kernel** (views and allocations
launch none); forward, backward and the optimizer step are counted apart,
the optimizer both per tensor (``foreach=False``) and with the multi-tensor
``foreach`` kernels. The optimizer is SGD with momentum, as the analytical
model's optimizer traffic assumes.

Matrix operators are also grouped by arithmetic intensity
(:func:`matrix_intensity_bands`: per-sample FLOPs and FP32 bytes per band of
half an octave), so that a roofline can be taken per operator rather than
for the class as a whole (see :mod:`features.physics`).

Gradients are recorded in the order backward produces them (a
post-accumulate-grad hook on every trainable parameter), each with the
fraction of the backward pass's work done when it is ready (work = matrix
FLOPs, or kernels where the backward has no matrix FLOPs), so that
communication can start bucket by bucket.

Per-sample matrix FLOPs are those of the recipe's larger batch over its size,
bytes and other FLOPs slopes between its two batch sizes (both as in
:mod:`features.workload_counting`, so the matrix FLOPs are the catalogue's
``flops_per_sample``); kernel counts and gradients come
from the larger batch and do not depend on it for these models. Recurrent
layers (``nn.LSTM``, ``nn.GRU``) decompose into per-time-step operators for
the FLOP and byte counts (the fused oneDNN kernel is invisible to the FLOP
counter), while their kernel launches are counted on a second pass with the
fused kernel, one call per layer, as cuDNN runs them on GPUs; their matrix
operators stay those of the decomposed pass, one per time step, since the
fused kernel runs those small dependent multiplies one after another. Recurrent cells
stepped from Python (``nn.LSTMCell`` in Tacotron 2's decoder) launch their
kernels step by step and are counted so.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, shape_wrapper

from features.model_defs.recipe import Probe, Recipe
from features.dispatch_counting import EXTRA_FLOP_FORMULAS, NO_TRAFFIC, default_device, fused_attention, is_view, tensor_bytes

aten = torch.ops.aten

_FLOP_FORMULAS = {**flop_registry, **{k: shape_wrapper(v) for k, v in EXTRA_FLOP_FORMULAS.items()}}

PHASES = ("forward", "backward", "optimizer")


@dataclass
class PhaseCount:
    matrix_flops: float = 0.0
    other_flops: float = 0.0
    matrix_bytes: float = 0.0
    memory_bound_bytes: float = 0.0
    kernels: int = 0
    matrix_kernels: int = 0
    winograd_flops: float = 0.0


@dataclass
class OpClassMode(TorchDispatchMode):
    """Counts FLOPs, bytes and kernels per op class, into the phase named by ``phase``."""

    phase: str = "forward"
    counts: dict = field(default_factory=lambda: {p: PhaseCount() for p in PHASES})
    #: Every matrix operator of the forward and backward passes, in order: (name, FLOPs, bytes, GEMM shape),
    #: the shape ``(m, n, k)`` of a cuBLAS matrix multiply (:func:`gemm_shape`), else None.
    matrix_ops: list = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if packet in NO_TRAFFIC or is_view(func):
            return out
        inputs = {id(t): t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if packet is aten.copy_ and isinstance(args[1], torch.Tensor):
            inputs = {id(args[1]): args[1]}
        n_bytes = sum(map(tensor_bytes, inputs.values())) + sum(map(tensor_bytes, outputs))
        count = self.counts[self.phase]
        count.kernels += 1
        if packet in _FLOP_FORMULAS:
            flops = _FLOP_FORMULAS[packet](*args, **kwargs, out_val=out)
            count.matrix_flops += flops
            if winograd_eligible(packet, args):
                count.winograd_flops += flops
            count.matrix_bytes += n_bytes
            count.matrix_kernels += 1
            if self.phase != "optimizer":
                self.matrix_ops.append((packet.__name__, flops, n_bytes, gemm_shape(packet, args)))
        else:
            count.other_flops += sum(t.numel() for t in outputs)
            count.memory_bound_bytes += n_bytes
        return out


#: Matrix multiplies that PyTorch hands to cuBLAS (batched or not, with or without the added term), and the
#: positions of their two factors among the operator's arguments.
_GEMM_FACTORS = {aten.mm: (0, 1), aten.bmm: (0, 1), aten.addmm: (1, 2), aten.baddbmm: (1, 2)}


def gemm_shape(packet, args) -> tuple[int, int, int] | None:
    """``(m, n, k)`` of a matrix multiply ``[m, k] x [k, n]`` (per batch entry of a batched one); None for any
    other operator (convolutions, attention)."""
    if packet not in _GEMM_FACTORS:
        return None
    first, second = (args[i] for i in _GEMM_FACTORS[packet])
    return int(first.shape[-2]), int(second.shape[-1]), int(first.shape[-1])


def winograd_eligible(packet, args) -> bool:
    """A 2-D convolution (or its backward) with a 3x3 kernel, stride 1, dilation 1, one group, not transposed.

    The shapes cuDNN's Winograd algorithms (``CUDNN_CONVOLUTION_*_ALGO_WINOGRAD*``)
    compute; the backward's data and weight gradients are convolutions of
    the same shape.
    """
    if packet is aten.convolution:
        weight, stride, dilation, transposed, groups = args[1], args[3], args[5], args[6], args[8]
    elif packet is aten.convolution_backward:
        weight, stride, dilation, transposed, groups = args[2], args[4], args[6], args[7], args[9]
    else:
        return False
    return (
        weight.dim() == 4
        and tuple(weight.shape[2:]) == (3, 3)
        and all(v == 1 for v in stride)
        and all(v == 1 for v in dilation)
        and not transposed
        and groups == 1
    )


@dataclass(frozen=True)
class StepOps:
    """One training step of ``batch_size`` samples, counted per phase and op class."""

    batch_size: int
    counts: dict
    optimizer_foreach: PhaseCount
    gradient_elements: tuple[int, ...]
    gradient_ready_fraction: tuple[float, ...]
    matrix_ops: tuple[tuple[str, float, float, tuple[int, int, int] | None], ...] = ()


def _optimizer_step_counts(params: list[torch.nn.Parameter], foreach: bool) -> PhaseCount:
    """Kernels and bytes of one SGD-with-momentum step (the second: the first only creates the buffers)."""
    if not params:
        return PhaseCount()
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=foreach)
    optimizer.step()
    mode = OpClassMode(phase="optimizer")
    with mode:
        optimizer.step()
    return mode.counts["optimizer"]


def count_step_ops(probe: Probe, batch_size: int) -> StepOps:
    """Forward, backward and optimizer step of ``batch_size`` samples under :class:`OpClassMode`."""
    torch.manual_seed(0)
    batch = probe.make_batch(batch_size)
    params = [p for p in probe.model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    mode = OpClassMode()
    ready: list[tuple[int, float, int]] = []

    def hook(p: torch.Tensor) -> None:
        backward = mode.counts["backward"]
        ready.append((p.numel(), backward.matrix_flops, backward.kernels))

    handles = [p.register_post_accumulate_grad_hook(hook) for p in params]
    try:
        with fused_attention(), mode:
            loss = probe.loss(probe.model, batch)
            mode.phase = "backward"
            loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    backward = mode.counts["backward"]
    use_flops = backward.matrix_flops > 0
    total = backward.matrix_flops if use_flops else max(backward.kernels, 1)
    fractions = tuple(min(1.0, (f if use_flops else k) / total) for _, f, k in ready)
    with torch.no_grad():
        grads = [p for p in params if p.grad is not None]
        mode.counts["optimizer"] = _optimizer_step_counts(grads, foreach=False)
        foreach = _optimizer_step_counts(grads, foreach=True)
    return StepOps(batch_size, mode.counts, foreach, tuple(n for n, _, _ in ready), fractions, tuple(mode.matrix_ops))


def _with_fused_rnn_kernels(probe: Probe, decomposed: StepOps) -> StepOps:
    """``decomposed`` with the kernel counts of a pass where recurrent layers run as one fused kernel call each.

    GPU frameworks run ``nn.LSTM``/``nn.GRU`` through cuDNN, one library call
    per layer (its per-time-step kernels are issued by the library, not by the
    framework's dispatcher); oneDNN's fused CPU kernel is counted in its place.
    FLOPs, bytes, gradients and matrix operators stay those of the decomposed
    pass: the FLOP counter sees its FLOPs, and the fused kernel runs the same
    small per-time-step matrix multiplies one after another (each time step
    waits for the last), so for the operator-size curve each is one operator.
    """
    fused = count_step_ops(probe, decomposed.batch_size)
    counts = {}
    for phase in PHASES:
        count = dataclasses.replace(decomposed.counts[phase])
        count.kernels = fused.counts[phase].kernels
        counts[phase] = count
    return dataclasses.replace(decomposed, counts=counts)


def _plain_or_recipe_probe(recipe: Recipe) -> tuple[Probe, str]:
    from features.model_defs.plain import PLAIN_BUILDERS  # noqa: PLC0415

    if recipe.name in PLAIN_BUILDERS:
        build, described = PLAIN_BUILDERS[recipe.name]
        return build(), described
    return recipe.build(), recipe.architecture


def op_classes_entry(recipe: Recipe, small: StepOps, large: StepOps, described: str) -> dict:
    """The ``op_classes`` block of one workload (per-sample slopes, per-step kernels, gradients)."""
    span = large.batch_size - small.batch_size

    def slope(attr: str) -> float:
        return sum(getattr(large.counts[p], attr) - getattr(small.counts[p], attr) for p in ("forward", "backward")) / span

    def per_sample(attr: str) -> float:
        return sum(getattr(large.counts[p], attr) for p in ("forward", "backward")) / large.batch_size

    where = "meta-device tensors" if recipe.device == "meta" else "CPU tensors, random weights"
    return {
        "matrix_flops_per_sample": _round(per_sample("matrix_flops")),
        "other_flops_per_sample": _round(slope("other_flops")),
        "matrix_bytes_per_sample_fp32": _round(slope("matrix_bytes")),
        "memory_bound_bytes_per_sample_fp32": _round(slope("memory_bound_bytes")),
        "kernels_forward": large.counts["forward"].kernels,
        "kernels_backward": large.counts["backward"].kernels,
        "matrix_kernels": large.counts["forward"].matrix_kernels + large.counts["backward"].matrix_kernels,
        "winograd_flops_per_sample": _round(per_sample("winograd_flops")),
        "kernels_optimizer_per_tensor": large.counts["optimizer"].kernels,
        "kernels_optimizer_foreach": large.optimizer_foreach.kernels,
        "gradient_elements_backward_order": list(large.gradient_elements),
        "gradient_ready_fraction": [round(f, 4) for f in large.gradient_ready_fraction],
        "matrix_intensity_bands": matrix_intensity_bands(small, large),
        "unaligned_gemm_flops_per_sample": unaligned_gemm_flops(small, large),
        "provenance": "counted",
        "source": (
            f"features.op_counting (TorchDispatchMode over aten operators, forward+backward+SGD-momentum step); "
            f"matrix FLOPs per sample are those of batch {large.batch_size} over its size, bytes and other FLOPs "
            f"slopes between batches {small.batch_size} and {large.batch_size}, kernels and "
            f"gradients at batch {large.batch_size}; counted on {described}; {where}; torch {torch.__version__.split('+')[0]}"
        ),
        "command": f"{_interpreter()} -m features.op_counting --only {recipe.name}",
    }


#: Bands of arithmetic intensity (FLOPs per FP32 byte) that :func:`matrix_intensity_bands` groups matrix operators
#: into, per octave: two, so operators of one band differ in intensity by at most 1.41x.
INTENSITY_BANDS_PER_OCTAVE = 2


def matrix_intensity_bands(small: StepOps, large: StepOps) -> list[list[float | int]] | None:
    """The matrix operators grouped by arithmetic intensity: ``[FLOPs, FP32 bytes]`` per sample, per band.

    Each operator's per-sample FLOPs are its FLOPs at the larger batch over
    that batch, its bytes the slope between the two batches (so weights,
    which do not grow with the batch, drop out, as in the class totals); its
    intensity is their ratio, independent of the batch. Operators are paired
    by position, so the two passes must run the same matrix operators in the
    same order; None where they do not (a model whose work depends on its
    data). Operators of no FLOPs, or no bytes that grow with the batch, sit in
    the lowest or highest band. The bands add up to the class's per-sample
    FLOPs and bytes.
    """
    if not _same_operators(small, large):
        return None
    span = large.batch_size - small.batch_size
    bands: dict[int, list[float]] = {}
    for (_, _, small_bytes, _), (_, flops, large_bytes, _) in zip(small.matrix_ops, large.matrix_ops):
        per_sample_flops = flops / large.batch_size
        per_sample_bytes = (large_bytes - small_bytes) / span
        if per_sample_flops <= 0:
            band = -(10**6)
        elif per_sample_bytes <= 0:
            band = 10**6
        else:
            band = math.floor(INTENSITY_BANDS_PER_OCTAVE * math.log2(per_sample_flops / per_sample_bytes))
        totals = bands.setdefault(band, [0.0, 0.0])
        totals[0] += per_sample_flops
        totals[1] += per_sample_bytes
    return [[_round(f), _round(b)] for _, (f, b) in sorted(bands.items())]


def _same_operators(small: StepOps, large: StepOps) -> bool:
    """Whether the two passes ran the same matrix operators in the same order (so they pair by position)."""
    return [op[0] for op in small.matrix_ops] == [op[0] for op in large.matrix_ops]


#: cuBLAS before 11.0 runs a half-precision matrix multiply on tensor cores only where m, n and k are
#: multiples of this (NVIDIA, Matrix Multiplication Background User's Guide, "Tensor Core Requirements").
TENSOR_CORE_ALIGNMENT = 8


def unaligned_gemm_flops(small: StepOps, large: StepOps) -> float | None:
    """Per-sample FLOPs of the matrix multiplies that a dimension of the model makes unaligned for tensor cores.

    A multiply counts where a dimension that is the same at both batch sizes
    (a layer's width, a vocabulary: the model's own) is no multiple of
    :data:`TENSOR_CORE_ALIGNMENT`; a dimension that grows with the batch (the
    tokens of a batch, or a weight gradient's reduction over them) is the
    job's, not the model's, and is not judged. Convolutions are not counted
    (cuDNN has used tensor cores for any channel count since 7.6.3, August
    2019). None where the two passes ran different operators.
    """
    if not _same_operators(small, large):
        return None
    total = 0.0
    for (_, _, _, small_shape), (_, flops, _, large_shape) in zip(small.matrix_ops, large.matrix_ops):
        if large_shape is None or small_shape is None:
            continue
        fixed = [a for a, b in zip(small_shape, large_shape) if a == b]
        if any(d % TENSOR_CORE_ALIGNMENT for d in fixed):
            total += flops / large.batch_size
    return _round(total)


def _interpreter() -> str:
    """The Python that counted, as a path from the project root where it lies inside it (``.venv`` or
    ``.regen-venv``, whose setup :mod:`features.workload_counting` gives)."""
    path = Path(sys.executable)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return "python"


def _round(value: float) -> float | int:
    if float(value).is_integer():
        return int(value)
    return float(f"{value:.6g}")


def countable_recipes() -> tuple[list[Recipe], dict[str, str]]:
    """Recipes whose definitions import with torch alone, and why the others do not."""
    import importlib  # noqa: PLC0415

    from features.model_defs.registry import RECIPE_MODULES, TESTBED_NAMES, _testbed_recipe  # noqa: PLC0415

    recipes: list[Recipe] = []
    skipped: dict[str, str] = {}
    for module_name in RECIPE_MODULES:
        try:
            module = importlib.import_module(f"features.model_defs.{module_name}")
        except ImportError as exc:
            skipped[module_name] = str(exc)
            continue
        recipes += module.RECIPES
    recipes += [_testbed_recipe(name) for name in TESTBED_NAMES]
    return recipes, skipped


def _plain_recipes(known: set[str]) -> list[Recipe]:
    """Recipes for the plain-torch definitions whose own modules did not import."""
    from features.model_defs.plain import PLAIN_BUILDERS  # noqa: PLC0415
    from features.workloads import workload_catalog  # noqa: PLC0415

    catalog = workload_catalog()
    out = []
    for name, (build, described) in PLAIN_BUILDERS.items():
        if name in known:
            continue
        spec = catalog.get(name)
        out.append(
            Recipe(
                name=name,
                domain=spec.domain,
                description=spec.description,
                architecture=described,
                build=build,
                input_bytes_per_sample=spec.input_bytes_per_sample,
                input_bytes_source=spec.source["input_bytes_per_sample"],
                default_batch_size_per_gpu=spec.default_batch_size_per_gpu,
            )
        )
    return out


def regenerate(path: Path, only: set[str] | None = None, skip_counted: bool = False) -> dict[str, dict]:
    """Count every countable recipe (or those in ``only``) and write their ``op_classes`` into ``path``.

    The file is rewritten after every workload, so an interrupted run keeps
    what it counted; ``skip_counted`` then resumes, leaving entries already
    counted as they are. Recipes whose definitions need a library that is
    not installed are skipped (they keep or get the default split).
    """
    data = json.loads(path.read_text())
    recipes, _ = countable_recipes()
    recipes += _plain_recipes({r.name for r in recipes})
    already = {
        w["name"] for w in data["workloads"] if w.get("op_classes", {}).get("provenance") == "counted"
    } if skip_counted else set()
    counted: dict[str, dict] = {}
    for recipe in recipes:
        if (only and recipe.name not in only) or recipe.name in already:
            continue
        start = time.perf_counter()
        torch.manual_seed(0)
        try:
            with default_device(recipe.device):
                probe, described = _plain_or_recipe_probe(recipe)
        except ImportError as exc:
            print(f"{recipe.name:22s} not counted: {exc}", file=sys.stderr, flush=True)
            continue
        probe.model.train()
        has_rnn = any(isinstance(m, torch.nn.RNNBase) for m in probe.model.modules())
        no_onednn = torch.backends.mkldnn.flags(enabled=False) if has_rnn else contextlib.nullcontext()
        with default_device(recipe.device), no_onednn:
            small = count_step_ops(probe, recipe.batch_sizes[0])
            large = count_step_ops(probe, recipe.batch_sizes[1])
        if has_rnn:
            large = _with_fused_rnn_kernels(probe, large)
        entry = op_classes_entry(recipe, small, large, described)
        counted[recipe.name] = entry
        print(
            f"{recipe.name:22s} matrix {entry['matrix_flops_per_sample'] / 1e9:10.3f} GFLOP  "
            f"mem-bound {entry['memory_bound_bytes_per_sample_fp32'] / 1e9:8.3f} GB  kernels "
            f"{entry['kernels_forward']}/{entry['kernels_backward']}/{entry['kernels_optimizer_per_tensor']}  "
            f"{time.perf_counter() - start:6.1f} s",
            file=sys.stderr,
            flush=True,
        )
        del probe
        write_entries(path, data, {recipe.name: entry})
    write_entries(path, data, {}, report=True)
    return counted


def write_entries(path: Path, data: dict, counted: dict[str, dict], report: bool = False) -> None:
    """Store counted ``op_classes`` blocks; uncounted workloads get the default split."""
    for workload in data["workloads"]:
        if workload["name"] in counted:
            workload["op_classes"] = counted[workload["name"]]
        elif workload.get("op_classes", {}).get("provenance", "estimated") == "estimated":
            workload["op_classes"] = estimated_entry(workload)
    if report:
        _print_medians(data["workloads"])
    path.write_text(json.dumps(data, indent=1) + "\n")


def estimated_entry(workload: dict) -> dict:
    """The documented default split (:func:`features.workloads.default_op_classes`) of an uncounted workload."""
    from features.workloads import default_op_classes  # noqa: PLC0415

    entry = {k: (v if v is None else _round(v)) for k, v in default_op_classes(
        workload["flops_per_sample"], workload["memory_bytes_per_sample_fp32"]
    ).items()}
    entry["provenance"] = "estimated"
    entry["source"] = (
        "default split of features.workloads.default_op_classes (medians of the counted workloads); its definition "
        "needs a library the project does not install (torchvision, transformers or diffusers)"
    )
    entry["command"] = ".venv/bin/python -m features.op_counting"
    return entry


def _print_medians(workloads: list[dict]) -> None:
    """The medians over counted networks that the default split's constants record."""
    from features.workloads import counted_split_medians  # noqa: PLC0415

    m = counted_split_medians(workloads)
    if not m["networks"]:
        return
    print(
        f"medians over {m['networks']:.0f} counted networks: memory-bound byte share {m['memory_bound_byte_share']:.3g}, "
        f"memory-bound bytes per other FLOP {m['bytes_per_other_flop']:.3g}, kernels forward {m['kernels_forward']:.1f}, "
        f"backward {m['kernels_backward']:.1f}, matrix {m['matrix_kernels']:.1f}, optimizer foreach "
        f"{m['kernels_optimizer_foreach']:.0f}",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("features/catalog/workloads.json"))
    parser.add_argument("--only", default="", help="comma-separated workload names to recount")
    parser.add_argument("--resume", action="store_true", help="leave workloads already counted as they are")
    args = parser.parse_args(argv)
    only = {n.strip() for n in args.only.split(",") if n.strip()} or None
    regenerate(args.out, only, args.resume)


if __name__ == "__main__":
    main()
