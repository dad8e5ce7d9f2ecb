"""What the workload counter needs to know about one catalogue workload.

A :class:`Recipe` names a catalogue workload, says which published
architecture and configuration it follows, and builds a :class:`Probe`: the
model, a batch maker and the training loss, ready for
``features.workload_counting`` to run one forward and backward pass under its
FLOP and byte counters. This module imports torch; only the workload counter
and the testbed import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class Probe:
    """One workload built for counting.

    * ``make_batch(b)`` returns a batch of ``b`` samples, one of the
      recipe's two batch sizes; the larger batch repeats the smaller one, so
      that data-dependent models (detectors, adaptive softmax) do exactly
      proportionally more work on it.
    * ``loss(model, batch)`` runs the forward pass and returns the scalar
      training loss (the counter calls ``backward`` on it).
    * ``sparse_modules``: embedding tables whose rows are updated sparsely
      (only looked-up rows change; their gradient is not all-reduced);
      excluded from ``dense_param_count``.
    * ``sparse_param_count``: where the tables are built smaller than the
      real ones (the counted traffic per sample does not depend on the
      number of rows), the real number of table parameters, computed from
      the published table sizes.
    """

    model: nn.Module
    make_batch: Callable[[int], Any]
    loss: Callable[[nn.Module, Any], torch.Tensor]
    sparse_modules: tuple[nn.Module, ...] = ()
    sparse_param_count: int | None = None


@dataclass(frozen=True)
class Recipe:
    """A catalogue workload: its configuration, citations and probe builder.

    ``published`` maps a figure name (``flops_per_sample`` ...) to a
    ``(value, source)`` pair that replaces the counted figure, for the few
    cases where counting on the definition is not possible or not the
    convention. ``extra_sources`` holds provenance and source for the
    configuration values (``default_batch_size_per_gpu``,
    ``tokens_per_sample``, ``sequence_length`` ...), as ``name ->
    (provenance, source)``.
    """

    name: str
    domain: str
    description: str
    architecture: str
    build: Callable[[], Probe]
    input_bytes_per_sample: float
    input_bytes_source: str
    default_batch_size_per_gpu: int
    device: str = "meta"
    batch_sizes: tuple[int, int] = (2, 4)
    aliases: tuple[str, ...] = ()
    ai_matrix: bool = False
    input_shape: tuple[int, ...] | None = None
    sequence_length: int | None = None
    sample_unit: str = "samples"
    tokens_per_sample: float | None = None
    published: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    extra_sources: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    notes: str = ""
    #: The workload whose network this one trains on another layout of the same data (BERT-large
    #: unpadded or binned: ``bert-large``); held-out evaluations keep them in one group.
    network_of: str | None = None


def configured(text: str) -> tuple[str, str]:
    """Provenance of a figure the recipe sets from its source's configuration: ("configured", where)."""
    return ("configured", text)


def repeat_to(x: torch.Tensor, batch_size: int, dim: int = 0) -> torch.Tensor:
    """``x`` (holding 2 samples along ``dim``) repeated to ``batch_size`` samples."""
    reps = [1] * x.dim()
    reps[dim] = batch_size // x.shape[dim]
    return x.repeat(*reps)


def seeded(seed: int = 0) -> torch.Generator:
    """A CPU generator with a fixed seed, for reproducible synthetic batches."""
    return torch.Generator().manual_seed(seed)


def on_default_device(x: torch.Tensor) -> torch.Tensor:
    """``x`` (made on the CPU) moved to the current default device (``meta`` while counting giants)."""
    return x.to(torch.get_default_device())


def randn(*shape: int, generator: torch.Generator) -> torch.Tensor:
    """Standard-normal float32 tensor drawn on the CPU from ``generator``, on the default device."""
    return on_default_device(torch.randn(*shape, generator=generator, device="cpu"))


def randint(low: int, high: int, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Uniform int64 tensor in ``[low, high)`` drawn on the CPU from ``generator``, on the default device."""
    return on_default_device(torch.randint(low, high, shape, generator=generator, device="cpu"))


INT64_BYTES = 8
FLOAT32_BYTES = 4
UINT8_BYTES = 1
