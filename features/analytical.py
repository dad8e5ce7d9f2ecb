"""The analytical step-time model of the Alibaba-PAI characterization study.

One training step splits into four components, each a volume over a rate:

* ``io_s``: the step's input bytes copied host to device over the GPU's host
  link (PCIe, or NVLink-C2C on Grace Hopper);
* ``compute_s``: training FLOPs over the device's peak at the precision;
* ``memory_s``: DRAM traffic (activations per sample, plus weight, gradient
  and optimizer-state traffic per step) over the memory bandwidth;
* ``comm_s``: gradient and weight traffic over the slowest link it crosses,
  by architecture (see :func:`communication_s`), with an alpha-beta latency
  term per message hop.

The PAI model adds the four (``overlap="none"``): every operator is either
compute- or memory-bound and nothing hides behind anything else. The
overlapped form (``overlap="overlapped"``) takes the roofline view of the
device (compute and memory traffic overlap: the larger wins), hides gradient
communication behind the backward pass (two thirds of the training FLOPs) and
prefetches input while the device works. The roofline physics
(``overlap="roofline"``, :mod:`features.physics`) sums op-class rooflines,
kernel launches and host overhead, and overlaps all-reduce with backward
bucket by bucket; it is the base the learned residual can correct.

Every function here is pure and works elementwise on numpy arrays, so one job
and a million jobs take the same code path. Inputs carry their units in their
names; times are in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from features.physics import PhysicsArrays

ARCHITECTURE_CODES = {"single": 0, "allreduce-local": 1, "allreduce-cluster": 2, "ps-worker": 3}

COMPONENTS = ("io", "compute", "memory", "communication")
#: What a bottleneck names: the PAI components and, on the roofline physics, the dispatch of the
#: work (kernel launches and the framework's per-step host overhead), which the components leave out.
BOTTLENECKS = COMPONENTS + ("dispatch",)

#: Share of a training step's FLOPs in the backward pass (backward costs about
#: twice the forward), the window in which gradient communication can hide.
BACKWARD_SHARE = 2.0 / 3.0

#: DRAM bytes per parameter per step for weights, gradients and optimizer
#: state besides the per-element reads and writes at the training precision:
#: SGD with momentum on FP32 master weights reads weight, gradient and
#: momentum (12 B) and writes weight and momentum (8 B).
OPTIMIZER_BYTES_PER_PARAM = 20.0

#: Weight reads (forward and backward) and the gradient write, in elements of
#: the training precision, per parameter per step.
WEIGHT_ELEMENTS_PER_PARAM = 3.0

OVERLAP_STRATEGIES = ("none", "overlapped", "roofline")


def compute_s(flops_per_sample, batch_size_per_gpu, peak_flops_per_s):
    """Training FLOPs of one GPU's batch over its peak FLOP/s (full utilisation assumed)."""
    return flops_per_sample * batch_size_per_gpu / peak_flops_per_s


def memory_traffic_bytes(memory_bytes_per_sample, batch_size_per_gpu, param_count, bytes_per_element):
    """DRAM bytes one GPU moves per step: activations per sample plus weight, gradient and optimizer traffic."""
    per_param = WEIGHT_ELEMENTS_PER_PARAM * bytes_per_element + OPTIMIZER_BYTES_PER_PARAM
    return memory_bytes_per_sample * batch_size_per_gpu + param_count * per_param


def memory_s(memory_traffic_bytes_, memory_bw_bytes_per_s):
    """DRAM traffic over memory bandwidth (no cache reuse beyond what the traffic figure counts)."""
    return memory_traffic_bytes_ / memory_bw_bytes_per_s


def io_s(input_bytes_per_sample, batch_size_per_gpu, host_link_bw_bytes_per_s):
    """A GPU's batch copied from host memory over its own host link (one x16 link per GPU)."""
    return input_bytes_per_sample * batch_size_per_gpu / host_link_bw_bytes_per_s


def ring_allreduce_s(message_bytes, n_participants, bw_bytes_per_s, latency_s):
    """Bandwidth-optimal ring all-reduce of ``message_bytes`` among ``n_participants``.

    Each participant sends and receives 2(n-1)/n of the message over its link
    and the ring takes 2(n-1) latency-bound hops; one participant costs nothing.
    """
    n = np.asarray(n_participants, dtype=float)
    steps = 2.0 * (n - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        volume_bytes = np.where(n > 1, steps / n * message_bytes, 0.0)
    return volume_bytes / bw_bytes_per_s + steps * latency_s


@dataclass(frozen=True)
class CommTimes:
    """Communication seconds split by where the traffic runs."""

    intra_node_s: np.ndarray
    network_s: np.ndarray
    #: True where the parameter servers' NICs, not the worker's, bound the network time.
    ps_fan_in_bound: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return self.intra_node_s + self.network_s


def communication_s(
    architecture_code,
    gradient_bytes,
    total_gpus,
    gpus_per_node_used,
    nodes,
    workers,
    gpus_per_worker,
    parameter_servers,
    intra_node_bw_bytes_per_s,
    intra_node_latency_s,
    host_link_bw_bytes_per_s,
    network_bw_bytes_per_s,
    network_latency_s,
    nics_per_node,
) -> CommTimes:
    """Gradient/weight communication time per step, by architecture.

    * ``single``: none.
    * ``allreduce-local``: a ring all-reduce of the gradients among the node's
      GPUs over the intra-node link: 2(n-1)/n of the gradient bytes per GPU.
    * ``allreduce-cluster``: hierarchical. Inside each node a ring over the
      intra-node link (reduce-scatter then all-gather, 2(m-1)/m of the bytes
      per GPU); across nodes each GPU all-reduces its 1/m shard with its peers
      on the other nodes, so a node's NICs together carry 2(N-1)/N of the
      gradient bytes.
    * ``ps-worker``: each worker first reduces its GPUs' gradients over the
      intra-node link and stages the result through host memory over its
      host link (pushed gradients out, pulled weights in); then it pushes the
      gradients to the servers and pulls the weights back. Each server owns
      1/P of the parameters, so the servers' NICs together carry W x gradient
      bytes each way: each way takes the longer of the worker NIC's time
      (gradient bytes over its NICs) and a server's (W/P x gradient bytes over
      its NICs). Pulled weights are the size of the gradients.

    NICs of one node are used together (``nics_per_node`` x the NIC rate);
    servers have as many NICs as workers.
    """
    code = np.asarray(architecture_code)
    gradient_bytes = np.asarray(gradient_bytes, dtype=float)
    zeros = gradient_bytes * 0.0  # NaN stays NaN on rows that failed to resolve
    node_bw = network_bw_bytes_per_s * nics_per_node

    local_ring = ring_allreduce_s(gradient_bytes, total_gpus, intra_node_bw_bytes_per_s, intra_node_latency_s)
    cluster_intra = ring_allreduce_s(gradient_bytes, gpus_per_node_used, intra_node_bw_bytes_per_s, intra_node_latency_s)
    cluster_network = ring_allreduce_s(gradient_bytes, nodes, node_bw, network_latency_s)

    fan_in = np.asarray(workers, dtype=float) / np.asarray(parameter_servers, dtype=float)
    ps_intra = ring_allreduce_s(gradient_bytes, gpus_per_worker, intra_node_bw_bytes_per_s, intra_node_latency_s)
    ps_intra = ps_intra + 2.0 * gradient_bytes / host_link_bw_bytes_per_s
    ps_network = 2.0 * (gradient_bytes * np.maximum(1.0, fan_in) / node_bw + network_latency_s)

    is_local = code == ARCHITECTURE_CODES["allreduce-local"]
    is_cluster = code == ARCHITECTURE_CODES["allreduce-cluster"]
    is_ps = code == ARCHITECTURE_CODES["ps-worker"]
    intra = np.select([is_local, is_cluster, is_ps], [local_ring, cluster_intra, ps_intra], zeros)
    network = np.select([is_cluster, is_ps], [cluster_network, ps_network], zeros)
    return CommTimes(intra + zeros, network + zeros, is_ps & (fan_in > 1.0))


@dataclass(frozen=True)
class BreakdownArrays:
    """Seconds per component for each job, and both ways of adding them up."""

    io_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    comm: CommTimes
    #: Computes the roofline physics of the same jobs on first use (None: not available).
    physics_fn: "Callable[[], PhysicsArrays] | None" = None

    @property
    def physics(self) -> "PhysicsArrays | None":
        """The roofline physics (:mod:`features.physics`), computed once when first asked for."""
        if self.physics_fn is None:
            return None
        if "_physics" not in self.__dict__:
            object.__setattr__(self, "_physics", self.physics_fn())
        return self.__dict__["_physics"]

    @property
    def comm_s(self) -> np.ndarray:
        return self.comm.total_s

    @property
    def additive_s(self) -> np.ndarray:
        """The PAI model: the components one after another."""
        return self.io_s + self.compute_s + self.memory_s + self.comm_s

    @property
    def overlapped_s(self) -> np.ndarray:
        """Roofline device time, communication hidden behind the backward pass, input prefetched."""
        device_s = np.maximum(self.compute_s, self.memory_s)
        exposed_comm_s = np.maximum(0.0, self.comm_s - BACKWARD_SHARE * device_s)
        return np.maximum(self.io_s, device_s + exposed_comm_s)

    def step_time_s(self, overlap: str) -> np.ndarray:
        if overlap == "none":
            return self.additive_s
        if overlap == "overlapped":
            return self.overlapped_s
        if overlap == "roofline" and self.physics is not None:
            return self.physics.step_time_s
        raise ValueError(f"overlap {overlap!r}; allowed: {', '.join(OVERLAP_STRATEGIES)}")

    def component_matrix_s(self) -> np.ndarray:
        """Rows of (io, compute, memory, communication) seconds."""
        return np.stack([self.io_s, self.compute_s, self.memory_s, self.comm_s], axis=-1)

    def bottleneck_code(self, overlap: str = "none") -> np.ndarray:
        """Index into :data:`BOTTLENECKS` of what bounds each job's step under ``overlap``.

        On the roofline physics: io where the prefetched input outlasts the rest
        of the step, else the largest of its matrix operators (compute),
        memory-bound operators (memory), exposed communication and dispatch
        (kernel launches plus host overhead). Otherwise the largest PAI component.
        """
        physics = self.physics if overlap == "roofline" else None
        if physics is None:
            return np.argmax(self.component_matrix_s(), axis=-1)
        matrix, memory_bound, launches, host, exposed, input_beyond = np.moveaxis(physics.parts_s(), -1, 0)
        code = 1 + np.argmax(np.stack([matrix, memory_bound, exposed, launches + host], axis=-1), axis=-1)
        return np.where(input_beyond > 0, 0, code)
