"""Count the workload catalogue's training figures on real model definitions.

Regenerate ``features/catalog/workloads.json`` with one command, in a
separate virtual environment (the product and its tests never import torch;
the generated JSON is committed)::

    python3 -m venv .regen-venv
    .regen-venv/bin/pip install numpy pydantic torch==2.14.1 torchvision==0.29.1 \\
        transformers==5.24.0 diffusers==0.42.1
    .regen-venv/bin/python -m features.workload_counting --out features/catalog/workloads.json

(``--only resnet50,bert-large`` recounts some entries and keeps the others;
the full run takes about ten minutes on two CPU cores.)

What is counted, per training sample, for every workload in
:func:`features.model_defs.registry.all_recipes`:

* ``flops_per_sample``: FLOPs of one forward plus backward pass, a
  multiply-add counting 2, as :class:`torch.utils.flop_counter.FlopCounterMode`
  counts them (matrix multiplies, convolutions and attention; element-wise,
  normalisation and activation FLOPs are not counted: they are bound by the
  memory traffic below). Total FLOPs of the larger of two batches (4, or 2
  for the slow CPU-run detectors and Tacotron 2) divided by its size.
  Recurrent layers run without oneDNN's fused CPU kernel, which the counter
  cannot see, so they decompose into counted matrix multiplies.
* ``memory_bytes_per_sample_fp32``: DRAM traffic of one sample's training
  step in FP32. For every aten operator that the forward and backward pass
  dispatch, the bytes of its distinct tensor inputs plus the bytes of its
  tensor outputs are summed (an in-place operator reads and writes its
  operand, so it counts twice; ``copy_`` reads its source and writes its
  destination; views, reshapes and allocations move no data and count zero;
  a broadcast operand counts its stored elements once). No cache reuse and
  no fusion beyond what the operators themselves fuse: attention runs as
  the fused (flash) kernel, so attention scores are not written. The figure
  per sample is the slope between the two batches, the larger of which
  repeats the smaller: ``(bytes(large) - bytes(small)) / (large - small)``.
  Traffic that does not grow with the batch (reading the weights, writing
  the weight gradients, the optimizer) drops out of the slope: weights are
  excluded by construction.
* ``param_count``: parameters of every module the step runs, frozen ones
  included; ``dense_param_count``: the trainable parameters whose full
  gradient is exchanged each step (trainable, minus embedding tables that
  are updated sparsely).
* ``input_bytes_per_sample``: bytes one sample occupies when copied from host
  to device, from its shapes and dtypes (stated per workload).

Models run on the ``meta`` device where their shapes do not depend on the
data: shapes propagate through every operator without data or weights, so
the counts equal a real run's (``--device cpu --only resnet50`` checks it;
the six ImageNet classifiers gave identical figures both ways) and the
giants (GPT-3 175B, Llama-2-70B) cost seconds. Detectors, whose proposals
depend on the data, and the recurrent models, whose thousands of small
per-step operators run faster for real, run on CPU tensors with random
weights. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from features.dispatch_counting import EXTRA_FLOP_FORMULAS, SavedActivations, TensorTrafficMode, default_device, fused_attention
from features.model_defs.recipe import Probe, Recipe


@dataclass(frozen=True)
class StepCount:
    """FLOPs and operand bytes of one forward+backward pass of ``batch_size`` samples."""

    batch_size: int
    flops: int
    traffic_bytes: int
    saved_bytes: int
    seconds: float


@dataclass(frozen=True)
class Counted:
    """The counted per-sample figures of one probe."""

    flops_per_sample: float
    memory_bytes_per_sample_fp32: float
    activation_bytes_per_sample_fp32: float
    param_count: int
    dense_param_count: int
    small: StepCount
    large: StepCount

    @property
    def flops_linearity(self) -> float:
        """Relative gap between FLOPs per sample at the two batch sizes (0 when exactly linear)."""
        small = self.small.flops / self.small.batch_size
        return abs(self.flops_per_sample - small) / max(self.flops_per_sample, 1.0)


def count_step(probe: Probe, batch_size: int) -> StepCount:
    """Run one forward and backward pass of ``batch_size`` samples under both counters."""
    torch.manual_seed(0)
    batch = probe.make_batch(batch_size)
    for p in probe.model.parameters():
        p.grad = None
    start = time.perf_counter()
    saved = SavedActivations()
    with fused_attention():
        with FlopCounterMode(display=False, custom_mapping=EXTRA_FLOP_FORMULAS) as flops, TensorTrafficMode() as traffic:
            with saved.counting():
                loss = probe.loss(probe.model, batch)
            saved_bytes = saved.total_bytes  # everything the forward keeps, before the backward frees it
            loss.backward()
    return StepCount(batch_size, flops.get_total_flops(), traffic.total_bytes, saved_bytes, time.perf_counter() - start)


def count_params(probe: Probe) -> tuple[int, int]:
    """``(param_count, dense_param_count)`` of a probe's model (see the module docstring)."""
    params = {id(p): p for p in probe.model.parameters()}
    sparse = {id(p): p for m in probe.sparse_modules for p in m.parameters()}
    built_sparse = sum(p.numel() for p in sparse.values())
    total = sum(p.numel() for p in params.values())
    if probe.sparse_param_count is not None:
        total = total - built_sparse + probe.sparse_param_count
    dense = sum(p.numel() for i, p in params.items() if p.requires_grad and i not in sparse)
    return int(total), int(dense)


def count_probe(probe: Probe, device: str = "cpu", batch_sizes: tuple[int, int] = (2, 4)) -> Counted:
    """Per-sample FLOPs, traffic and parameter counts of a probe (see the module docstring)."""
    probe.model.train()
    # oneDNN's fused CPU LSTM kernel is invisible to FlopCounterMode; without
    # it, recurrent layers decompose into counted matrix multiplies.
    has_rnn = any(isinstance(m, torch.nn.RNNBase) for m in probe.model.modules())
    no_onednn = torch.backends.mkldnn.flags(enabled=False) if has_rnn else contextlib.nullcontext()
    with default_device(device), no_onednn:
        small = count_step(probe, batch_sizes[0])
        large = count_step(probe, batch_sizes[1])
    param_count, dense_param_count = count_params(probe)
    return Counted(
        flops_per_sample=large.flops / large.batch_size,
        memory_bytes_per_sample_fp32=(large.traffic_bytes - small.traffic_bytes) / (large.batch_size - small.batch_size),
        activation_bytes_per_sample_fp32=(large.saved_bytes - small.saved_bytes) / (large.batch_size - small.batch_size),
        param_count=param_count,
        dense_param_count=dense_param_count,
        small=small,
        large=large,
    )


def library_versions() -> str:
    """The versions of the libraries the counts were made with, for the source strings."""
    import torchvision  # noqa: PLC0415 - only needed for its version here

    parts = [f"torch {torch.__version__.split('+')[0]}", f"torchvision {torchvision.__version__.split('+')[0]}"]
    for name in ("transformers", "diffusers"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        parts.append(f"{name} {module.__version__}")
    return ", ".join(parts)


def build_entry(recipe: Recipe, counted: Counted, versions: str) -> dict:
    """The catalogue entry (one ``WorkloadSpec`` as JSON) of a counted recipe."""
    where = "meta-device tensors" if recipe.device == "meta" else "CPU tensors, random weights"
    method = f"counted on {recipe.architecture}; {where}; {versions}"
    small, large = counted.small.batch_size, counted.large.batch_size
    flops_src = (
        f"FlopCounterMode, forward+backward of a batch of {large} divided by {large} "
        f"(multiply-add = 2 FLOPs); {method}"
    )
    bytes_src = (
        f"sum over aten operators of distinct input + output tensor bytes, forward+backward, slope between "
        f"batches {small} and {large} (weights, weight gradients excluded); {method}"
    )
    values = {
        "flops_per_sample": counted.flops_per_sample,
        "param_count": counted.param_count,
        "dense_param_count": counted.dense_param_count,
        "memory_bytes_per_sample_fp32": counted.memory_bytes_per_sample_fp32,
        "activation_bytes_per_sample_fp32": counted.activation_bytes_per_sample_fp32,
        "input_bytes_per_sample": recipe.input_bytes_per_sample,
    }
    provenance = {name: "counted" for name in values}
    source = {
        "flops_per_sample": flops_src,
        "param_count": f"sum of parameter sizes, frozen included; {method}",
        "dense_param_count": (
            "trainable parameters (frozen ones excluded) minus sparsely updated embedding tables; " + method
            if counted.dense_param_count != counted.param_count
            else f"trainable parameters, all with dense gradients; {method}"
        ),
        "memory_bytes_per_sample_fp32": bytes_src,
        "activation_bytes_per_sample_fp32": (
            f"bytes of the distinct storages autograd saves for the backward pass (saved_tensors_hooks), forward of "
            f"batches {small} and {large}, slope between them (parameters excluded); {method}"
        ),
        "input_bytes_per_sample": recipe.input_bytes_source,
    }
    for figure, (value, citation) in recipe.published.items():
        values[figure] = value
        provenance[figure] = "published"
        source[figure] = citation
    for name, (kind, citation) in recipe.extra_sources.items():
        provenance[name] = kind
        source[name] = citation
    entry: dict = {
        "name": recipe.name,
        "aliases": list(recipe.aliases),
        "domain": recipe.domain,
        "description": recipe.description,
        "ai_matrix": recipe.ai_matrix,
        "sample_unit": recipe.sample_unit,
        "default_batch_size_per_gpu": recipe.default_batch_size_per_gpu,
    }
    if recipe.input_shape is not None:
        entry["input_shape"] = list(recipe.input_shape)
    if recipe.sequence_length is not None:
        entry["sequence_length"] = recipe.sequence_length
    if recipe.tokens_per_sample is not None:
        entry["tokens_per_sample"] = recipe.tokens_per_sample
    entry.update({k: _round(v) for k, v in values.items()})
    entry["provenance"] = provenance
    entry["source"] = source
    if recipe.notes:
        entry["notes"] = recipe.notes
    if recipe.network_of is not None:
        entry["network_of"] = recipe.network_of
    return entry


def _round(value: float) -> float | int:
    if float(value).is_integer():
        return int(value)
    return float(f"{value:.6g}")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def regenerate(out: Path, only: set[str] | None = None, device: str | None = None) -> list[dict]:
    """Count every recipe (or those in ``only``, keeping the other entries of ``out``) and write ``out``.

    ``device`` overrides each recipe's device (``cpu`` checks that a meta
    count equals a real one).
    """
    from features.model_defs.registry import all_recipes  # noqa: PLC0415 - imports every definition

    versions = library_versions()
    recipes = all_recipes()
    unknown = (only or set()) - {r.name for r in recipes}
    if unknown:
        raise SystemExit(f"unknown workloads {sorted(unknown)}; known: {[r.name for r in recipes]}")
    existing: dict[str, dict] = {}
    if out.exists():
        existing = {e["name"]: e for e in json.loads(out.read_text())["workloads"]}
    entries = []
    for recipe in recipes:
        if only and recipe.name not in only:
            if recipe.name in existing:
                entries.append(existing[recipe.name])
            continue
        start = time.perf_counter()
        torch.manual_seed(0)
        if device is not None:
            recipe = dataclasses.replace(recipe, device=device)
        with default_device(recipe.device):
            probe = recipe.build()
        counted = count_probe(probe, recipe.device, recipe.batch_sizes)
        del probe
        _log(
            f"{recipe.name:22s} {counted.flops_per_sample / 1e9:12.4f} GFLOP/sample "
            f"{counted.memory_bytes_per_sample_fp32 / 1e9:10.4f} GB/sample "
            f"{counted.activation_bytes_per_sample_fp32 / 1e9:10.4f} GB saved/sample "
            f"{counted.param_count / 1e6:10.2f} M params  linearity {counted.flops_linearity:.1e}  "
            f"{time.perf_counter() - start:6.1f} s"
        )
        entry = build_entry(recipe, counted, versions)
        # The operator-level block is features.op_counting's: kept as it is.
        if "op_classes" in existing.get(recipe.name, {}):
            entry["op_classes"] = existing[recipe.name]["op_classes"]
        entries.append(entry)
    out.write_text(json.dumps({"workloads": entries}, indent=1) + "\n")
    return entries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("features/catalog/workloads.json"))
    parser.add_argument("--only", default="", help="comma-separated workload names to recount")
    parser.add_argument("--device", choices=["cpu", "meta"], help="override every recipe's device")
    args = parser.parse_args(argv)
    only = {n.strip() for n in args.only.split(",") if n.strip()} or None
    regenerate(args.out, only, args.device)


if __name__ == "__main__":
    main()
