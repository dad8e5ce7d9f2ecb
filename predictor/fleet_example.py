"""A synthetic example fleet: jobs of a large shared GPU cluster, drawn from the catalogues.

Every row is labelled ``synthetic=True`` with ``source="synthetic example fleet"``;
nothing here was measured. The mix is a choice, made to look like the
clusters the Alibaba-PAI study describes, not a copy of its figures:

* architectures: most jobs on one GPU and most distributed ones PS/Worker,
  AllReduce a minority (Wang et al., "Characterizing Deep Learning Training
  Workloads on Alibaba-PAI", IISWC 2019, Sec. III reports single-GPU and
  PS/Worker jobs as the bulk of the cluster's jobs); shares in
  :data:`ARCHITECTURE_MIX`;
* sizes: small jobs common, large ones rare (PS/Worker 2 to 128 workers,
  AllReduce clusters 2 to 32 full nodes);
* GPUs: datacenter parts of the hardware catalogue, weighted towards the
  V100/A100/H100 generations (:data:`GPU_MIX`); workstation cards rare;
* networks: 25 GbE the common case, 10 GbE and 100 GbE next, InfiniBand for a
  minority (:data:`NETWORK_MIX`);
* workloads: the catalogue's models whose dense weights, gradients and Adam
  state (16 bytes per parameter) fit one 40 GiB GPU, since every architecture
  here is data-parallel; the catalogue default batch, halved or doubled now
  and then.

Names missing from the catalogues are skipped, and the weights of what is
left renormalised, so the generator follows the catalogues as they grow.
Everything is drawn with numpy in whole columns: a million jobs take seconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from features.hardware import HardwareCatalog, hardware_catalog
from features.units import gib_to_bytes
from features.workloads import WorkloadCatalog, workload_catalog

SOURCE = "synthetic example fleet"

#: Share of jobs per architecture.
ARCHITECTURE_MIX = {"single": 0.55, "ps-worker": 0.30, "allreduce-local": 0.10, "allreduce-cluster": 0.05}

#: Relative weight of each GPU in the fleet (datacenter parts first).
GPU_MIX = {
    "V100-SXM2-16GB": 0.10,
    "V100-SXM2-32GB": 0.08,
    "V100-PCIE-16GB": 0.05,
    "P100-PCIE-16GB": 0.04,
    "T4": 0.08,
    "A10": 0.05,
    "A30": 0.03,
    "A100-SXM4-40GB": 0.10,
    "A100-SXM4-80GB": 0.12,
    "A100-PCIE-40GB": 0.04,
    "L4": 0.02,
    "L40S": 0.04,
    "H100-SXM5-80GB": 0.10,
    "H100-PCIE-80GB": 0.03,
    "H200-SXM-141GB": 0.04,
    "B200": 0.02,
    "RTX-3090": 0.01,
    "RTX-4090": 0.01,
}

#: Relative weight of each NIC type.
NETWORK_MIX = {
    "ethernet-10g": 0.15,
    "ethernet-25g": 0.40,
    "ethernet-100g": 0.25,
    "infiniband-edr": 0.05,
    "infiniband-hdr": 0.12,
    "infiniband-ndr": 0.03,
}

#: Relative weight of each workload domain; models are uniform within a domain.
DOMAIN_MIX = {"vision": 0.35, "recommendation": 0.25, "language": 0.30, "speech": 0.05, "generative": 0.03, "graph": 0.02}

#: Precisions asked for; one the GPU has no fast path for becomes its nearest (bf16 -> fp16, tf32 -> fp32).
PRECISION_MIX = {"fp32": 0.45, "fp16": 0.30, "bf16": 0.15, "tf32": 0.10}

#: Frameworks: PS/Worker jobs mostly TensorFlow, the rest mostly PyTorch.
PS_FRAMEWORK_MIX = {"tensorflow": 0.80, "mxnet": 0.10, "paddle": 0.10}
FRAMEWORK_MIX = {"pytorch": 0.60, "tensorflow": 0.30, "jax": 0.05, "mxnet": 0.05}

PS_WORKERS = ([2, 4, 8, 16, 32, 64, 128], [0.25, 0.25, 0.20, 0.15, 0.08, 0.05, 0.02])
PS_GPUS_PER_WORKER = ([1, 2, 4, 8], [0.60, 0.15, 0.15, 0.10])
PS_WORKERS_PER_SERVER = ([2, 4, 8], [0.3, 0.4, 0.3])
LOCAL_GPUS = ([2, 4, 8], [0.35, 0.35, 0.30])
CLUSTER_NODES = ([2, 4, 8, 16, 32], [0.35, 0.30, 0.20, 0.10, 0.05])
GPUS_PER_NODE = ([4, 8], [0.2, 0.8])
BATCH_FACTOR = ([0.5, 1.0, 2.0], [0.2, 0.6, 0.2])

#: Bytes per parameter of weights, gradients and Adam state in mixed precision (2 + 2 + 12).
TRAINING_STATE_BYTES_PER_PARAM = 16.0
#: A model is data-parallel trainable here if its training state fits this much GPU memory.
DATA_PARALLEL_MEMORY_BYTES = gib_to_bytes(40)

#: Median training steps of a job, and the spread of its logarithm.
MEDIAN_STEPS = 20_000
LOG_STEPS_SIGMA = 1.2


def _choice(rng: np.random.Generator, options, weights, n: int) -> np.ndarray:
    weights = np.asarray(weights, float)
    return np.asarray(options)[rng.choice(len(weights), size=n, p=weights / weights.sum())]


def _present(mix: dict[str, float], names) -> dict[str, float]:
    known = set(names)
    kept = {name: w for name, w in mix.items() if name in known}
    if not kept:
        raise ValueError(f"none of {sorted(mix)} is in the catalogue")
    return kept


def _workload_weights(workloads: WorkloadCatalog) -> tuple[list, np.ndarray]:
    specs = [
        w
        for w in workloads.workloads
        if w.domain in DOMAIN_MIX and w.dense_param_count * TRAINING_STATE_BYTES_PER_PARAM <= DATA_PARALLEL_MEMORY_BYTES
    ]
    if not specs:
        raise ValueError("the workload catalogue has no data-parallel trainable model")
    per_domain: dict[str, int] = {}
    for w in specs:
        per_domain[w.domain] = per_domain.get(w.domain, 0) + 1
    weights = np.array([DOMAIN_MIX[w.domain] / per_domain[w.domain] for w in specs])
    return specs, weights / weights.sum()


def example_fleet(
    n: int,
    seed: int = 0,
    hardware: HardwareCatalog | None = None,
    workloads: WorkloadCatalog | None = None,
) -> pd.DataFrame:
    """``n`` synthetic jobs as a fleet table (flat job columns plus ``steps``, ``synthetic``, ``source``).

    Deterministic for a given ``seed`` and catalogue. String columns are
    categorical, so a million rows stay small in memory and in Parquet.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    hardware = hardware or hardware_catalog()
    workloads = workloads or workload_catalog()
    rng = np.random.default_rng(seed)

    # Architecture first: it decides sizes and frameworks.
    arch_names = list(ARCHITECTURE_MIX)
    arch = rng.choice(len(arch_names), size=n, p=np.array(list(ARCHITECTURE_MIX.values())))
    is_ps = arch == arch_names.index("ps-worker")
    is_local = arch == arch_names.index("allreduce-local")
    is_cluster = arch == arch_names.index("allreduce-cluster")

    gpus_per_node = _choice(rng, *GPUS_PER_NODE, n)
    workers = np.ones(n, int)
    gpus_per_worker = np.ones(n, int)
    ps_workers = _choice(rng, *PS_WORKERS, n)
    workers[is_ps] = ps_workers[is_ps]
    gpus_per_worker[is_ps] = np.minimum(_choice(rng, *PS_GPUS_PER_WORKER, n), gpus_per_node)[is_ps]
    gpus_per_worker[is_local] = np.minimum(_choice(rng, *LOCAL_GPUS, n), gpus_per_node)[is_local]
    cluster_nodes = _choice(rng, *CLUSTER_NODES, n)
    # One process per GPU on full nodes (Horovod/DDP style).
    workers[is_cluster] = (cluster_nodes * gpus_per_node)[is_cluster]
    servers = np.maximum(1, ps_workers // _choice(rng, *PS_WORKERS_PER_SERVER, n))
    parameter_servers = pd.array(np.where(is_ps, servers, 0), dtype="Int64")
    parameter_servers[~is_ps] = pd.NA
    nodes = pd.array(cluster_nodes, dtype="Int64")
    nodes[~is_cluster] = pd.NA

    # Hardware.
    gpu_mix = _present(GPU_MIX, hardware.devices.names())
    gpu_names = list(gpu_mix)
    gpu = _choice(rng, np.arange(len(gpu_names)), list(gpu_mix.values()), n)
    devices = [hardware.devices.get(name, "gpu") for name in gpu_names]
    network_mix = _present(NETWORK_MIX, [link.name for link in hardware.links_of_kind("network")])
    network = _choice(rng, np.arange(len(network_mix)), list(network_mix.values()), n)

    # Workload, batch and precision.
    specs, model_weights = _workload_weights(workloads)
    model = rng.choice(len(specs), size=n, p=model_weights)
    default_batch = np.array([w.default_batch_size_per_gpu for w in specs], float)[model]
    batch = np.maximum(1, np.round(default_batch * _choice(rng, *BATCH_FACTOR, n))).astype(int)
    precision_names = list(PRECISION_MIX)
    precision = rng.choice(len(precision_names), size=n, p=np.array(list(PRECISION_MIX.values())))
    has_bf16 = np.array([d.peak_bf16_flops_per_s is not None for d in devices])[gpu]
    has_tf32 = np.array([d.peak_tf32_flops_per_s is not None for d in devices])[gpu]
    precision = np.where((precision == precision_names.index("bf16")) & ~has_bf16, precision_names.index("fp16"), precision)
    precision = np.where((precision == precision_names.index("tf32")) & ~has_tf32, precision_names.index("fp32"), precision)

    frameworks = list(dict.fromkeys([*FRAMEWORK_MIX, *PS_FRAMEWORK_MIX]))
    ps_framework = _choice(rng, [frameworks.index(f) for f in PS_FRAMEWORK_MIX], list(PS_FRAMEWORK_MIX.values()), n)
    other_framework = _choice(rng, [frameworks.index(f) for f in FRAMEWORK_MIX], list(FRAMEWORK_MIX.values()), n)
    framework = np.where(is_ps, ps_framework, other_framework)

    steps = np.maximum(100, np.round(np.exp(rng.normal(np.log(MEDIAN_STEPS), LOG_STEPS_SIGMA, n)))).astype(np.int64)

    def categorical(codes: np.ndarray, names: list[str]) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=names)

    ids = np.strings.add("job-", np.strings.zfill(np.arange(n).astype(str), 7)) if n else np.array([], str)
    return pd.DataFrame(
        {
            "name": pd.array(ids, dtype="str"),
            "model": categorical(model, [w.name for w in specs]),
            "batch_size_per_gpu": batch,
            "precision": categorical(precision, precision_names),
            "framework": categorical(framework, frameworks),
            "architecture": categorical(arch, arch_names),
            "workers": workers,
            "gpus_per_worker": gpus_per_worker,
            "parameter_servers": parameter_servers,
            "nodes": nodes,
            "gpu": categorical(gpu, gpu_names),
            "gpus_per_node": gpus_per_node.astype(int),
            "network": categorical(network, list(network_mix)),
            "nics_per_node": np.ones(n, int),
            "steps": steps,
            "synthetic": np.ones(n, bool),
            "source": categorical(np.zeros(n, int), [SOURCE]),
        }
    )
