"""Pairs of measured runs that differ by one what-if: the truth speedups are judged on.

Two runs form a pair of a kind when they agree on every job field except the
ones that kind changes: the network tier, the architecture (PS/Worker against
AllReduce, on the same workers), the number of GPUs (n against 2n), the
intra-node link (PCIe against NVLink), the GPU type, the precision, the
batch size or the software release (the same job on a later NGC container: the
physics does not read it, so its speedup is 1 and only the correction moves
it). Every other job field stays, the way reduced precision is applied and the
passes per step included. They must also share the source's ``software`` (the stated
implementation, container, suite version or XLA flag): DLPerf measures one
framework in several implementations ("PyTorch" and NGC's "PyTorch
(DeepLearningExamples)"), up to 2.5x apart at the same configuration, and
a pair across two of them measures the implementations, not the what-if.
A pair's measured speedup is time(a) / time(b).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from training.dataset import text_keys

#: Job fields a pair must share, before a kind frees some of them.
SHARED = (
    "source", "model", "batch_size_per_gpu", "precision", "framework", "software_stack", "architecture",
    "workers", "gpus_per_worker", "parameter_servers", "nodes", "gpu", "gpus_per_node",
    "intra_node_link", "network", "nics_per_node", "total_gpus", "software", "software_year",
    "mixed_precision", "gradient_accumulation_steps",
)

#: Per kind: (the field that must differ, the fields allowed to differ with it).
KINDS = {
    "network": ("network", ()),
    "architecture": ("architecture", ("workers", "gpus_per_worker", "parameter_servers", "nodes", "gpus_per_node", "intra_node_link")),
    "gpus": ("total_gpus", ("architecture", "workers", "gpus_per_worker", "nodes", "gpus_per_node", "intra_node_link")),
    "intra_node_link": ("intra_node_link", ()),
    "gpu": ("gpu", ("intra_node_link", "batch_size_per_gpu")),
    "precision": ("precision", ("batch_size_per_gpu",)),
    "batch_size_per_gpu": ("batch_size_per_gpu", ()),
    # The same job on a later release: the source's ``software`` text names the release, so it moves too.
    "software_year": ("software_year", ("software",)),
}

MAX_PAIRS_PER_KIND = 3000


def make_pairs(runs: pd.DataFrame, total_gpus: np.ndarray, seed: int = 0) -> pd.DataFrame:
    """Index pairs (``a``, ``b``) of ``runs`` rows with their ``kind``; each unordered pair once.

    ``gpus`` pairs are n against 2n GPUs only. Each kind keeps at most
    :data:`MAX_PAIRS_PER_KIND` pairs, drawn at random.
    """
    frame = runs.assign(total_gpus=total_gpus).reset_index(drop=True)
    for column in SHARED:
        if column not in frame.columns:
            frame[column] = None
    keys = text_keys(frame[list(SHARED)])
    rng = np.random.default_rng(seed)
    found = []
    for kind, (differs, free) in KINDS.items():
        key_columns = [c for c in SHARED if c != differs and c not in free]
        left = keys[key_columns].assign(a=frame.index, value=keys[differs])
        joined = left.merge(left, on=key_columns, suffixes=("_a", "_b"))
        joined = joined[(joined["value_a"] != joined["value_b"]) & (joined["a_a"] < joined["a_b"])]
        if kind == "gpus":
            ratio = total_gpus[joined["a_b"].to_numpy()] / total_gpus[joined["a_a"].to_numpy()]
            joined = joined[np.isin(ratio, [0.5, 2.0])]
        pairs = pd.DataFrame({"a": joined["a_a"].to_numpy(), "b": joined["a_b"].to_numpy(), "kind": kind})
        if len(pairs) > MAX_PAIRS_PER_KIND:
            pairs = pairs.iloc[np.sort(rng.choice(len(pairs), MAX_PAIRS_PER_KIND, replace=False))]
        found.append(pairs)
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=["a", "b", "kind"])


def pair_log_ratios(pairs: pd.DataFrame, log_time_s: np.ndarray) -> np.ndarray:
    """log(time(a) / time(b)) for each pair: the log speedup of moving from a to b."""
    return log_time_s[pairs["a"].to_numpy()] - log_time_s[pairs["b"].to_numpy()]
