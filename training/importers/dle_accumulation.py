"""Gradient accumulation as DeepLearningExamples' README tables state it.

BERT's pre-training tables run an optimizer step of thousands of sequences per
GPU as many forward and backward passes, and say so in a column the scraped
table keeps in ``other_config``, in one of four forms:

* ``Accumulated Batch size / GPU (TF32 and FP16)=8192 and 8192; Accumulation
  steps (TF32 and FP16)=64 and 32``: the batch cell is one pass's, the
  accumulated batch the optimizer step's (PyTorch, 2021 and later);
* ``Accumulation steps (TF32 and FP16)=64 and 32`` alone: the batch cell is
  the accumulated batch per GPU (PaddlePaddle, PyTorch before 2021);
* ``Gradient Accumulation: mixed precision, FP32=4096, 8192; Global Batch
  Size=65536``: the batch cell is one pass's, and the global batch is the
  optimizer step's over all GPUs (TensorFlow 1 and 2);
* ``Grad accumulation=24``: the batch cell is one pass's (speech models).

Two values name the full-precision (FP32 or TF32) and the mixed-precision
setting. The ``(TF32 and FP16)`` header's order is not always the cells'
(PyTorch's multi-node tables of 2022 give ``32 and 64`` for 8,192
sequences at 256 and 128 per pass): where the two settings accumulate the same
batch, mixed precision, whose activations are half the size, takes the larger
pass and so the fewer steps. Every row's reading is checked: one pass times the
steps must give the accumulated batch, or the row is excluded with the numbers.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

#: Full and reduced precision as the tables label them.
FULL = frozenset({"fp32", "tf32"})

_STEPS = re.compile(r"Accumulation steps \((\w+) and (\w+)\)\s*=\s*(\d+) and (\d+)", re.IGNORECASE)
_ACCUMULATED = re.compile(r"Accumulated Batch size / GPU \((\w+) and (\w+)\)\s*=\s*(\d+) and (\d+)", re.IGNORECASE)
_MIXED_FIRST = re.compile(r"Gradient Accumulation: mixed precision, (?:FP32|TF32)\s*=\s*(\d+)\s*,\s*(\d+)", re.IGNORECASE)
_GLOBAL_PAIR = re.compile(r"Global Batch Size: mixed precision, (?:FP32|TF32)\s*=\s*(\d+)\s*,\s*(\d+)", re.IGNORECASE)
_GLOBAL = re.compile(r"Global Batch Size\s*=\s*(\d+)", re.IGNORECASE)
_SINGLE = re.compile(r"Grad accumulation\s*=\s*(\d+)", re.IGNORECASE)


def _labelled(match: re.Match, full: bool) -> int:
    """The value of a ``(X and Y)=a and b`` pair for the full- or the mixed-precision setting, by its label."""
    labels = [match.group(1).lower(), match.group(2).lower()]
    values = [int(match.group(3)), int(match.group(4))]
    want = [label in FULL for label in labels]
    return values[want.index(full)] if want.count(full) == 1 else values[0 if full else 1]


def accumulation(other_config: object, precision: str, batch: float, gpus: float) -> tuple[float, float, str | None]:
    """``(steps, batch per GPU per optimizer step, why not)`` for one row.

    ``precision`` is the table's label (``amp``, ``tf32``, ...), ``batch`` the
    batch cell and ``gpus`` the GPUs of the row. A row that states nothing
    about accumulation gets one step of its batch; a statement that does not
    add up gets NaNs and the reason.
    """
    config = "" if pd.isna(other_config) else str(other_config)
    full = str(precision).lower() in FULL
    if steps_match := _STEPS.search(config):
        pair = sorted((int(steps_match.group(3)), int(steps_match.group(4))))
        accumulated = _ACCUMULATED.search(config)
        same_batch = accumulated is None or accumulated.group(3) == accumulated.group(4)
        steps = (pair[1] if full else pair[0]) if same_batch else _labelled(steps_match, full)
        if accumulated is not None:
            return _per_step(batch, steps, _labelled(accumulated, full), config)
        return _per_step(batch, steps, batch, config)
    if mixed := _MIXED_FIRST.search(config):
        steps = int(mixed.group(2 if full else 1))
        pair = _GLOBAL_PAIR.search(config)
        single = _GLOBAL.search(config)
        global_batch = int(pair.group(2 if full else 1)) if pair else (int(single.group(1)) if single else np.nan)
        return _per_step(batch, steps, global_batch / gpus, config)
    if single := _SINGLE.search(config):
        steps = int(single.group(1))
        return float(steps), batch * steps, None
    return 1.0, batch, None


def _per_step(batch: float, steps: int, accumulated: float, config: str) -> tuple[float, float, str | None]:
    """One pass's batch times ``steps`` must be the accumulated batch, whichever of the two the cell holds."""
    if steps >= 1 and batch * steps == accumulated:
        return float(steps), float(accumulated), None
    if steps >= 1 and batch == accumulated and batch % steps == 0:
        return float(steps), float(batch), None
    return np.nan, np.nan, f"batch cell {batch:g} with {steps} steps against {accumulated:g} per GPU ({config})"


def accumulations(src: pd.DataFrame, batch: np.ndarray, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`accumulation` for every row of a README table: steps, batch per optimizer step, reason (None where read)."""
    read = [accumulation(c, p, b, g) for c, p, b, g in zip(src["other_config"], src["precision"], batch, gpus)]
    steps = np.array([r[0] for r in read], float)
    per_step = np.array([r[1] for r in read], float)
    why = np.array([r[2] for r in read], object)
    return steps, per_step, why
