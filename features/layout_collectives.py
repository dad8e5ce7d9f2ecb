"""The collectives of a tensor/pipeline/context/data-parallel layout: bytes moved and seconds, per GPU.

Rank order is Megatron's (tensor fastest, then context, data, pipeline), so a
GPU's tensor-parallel peers are its neighbours in the node, its context- and
data-parallel peers are ``tensor_parallel`` (x ``context_parallel``) ranks
apart and its pipeline peers are a whole model replica apart. A group stays
on NVLink while it fits in one node; beyond it each GPU gets its share of
the node's NICs (``nics_per_node`` x NIC rate / ``gpus_per_node``).
Collectives are rings (:func:`features.analytical.ring_allreduce_s`): a
reduce-scatter or an all-gather moves half an all-reduce's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from features.analytical import ring_allreduce_s


@dataclass(frozen=True)
class Links:
    """The two link rates a GPU sees: NVLink/NVSwitch inside its node, its share of the NICs beyond."""

    gpus_per_node: int
    intra_node_bw_bytes_per_s: float
    intra_node_latency_s: float
    network_bw_bytes_per_s: float  # one NIC
    network_latency_s: float
    nics_per_node: int

    @property
    def network_bw_per_gpu_bytes_per_s(self) -> float:
        return self.network_bw_bytes_per_s * self.nics_per_node / self.gpus_per_node

    def group_link(self, span_gpus: int) -> tuple[float, float]:
        """(bandwidth, latency) of a group whose members lie within ``span_gpus`` consecutive ranks."""
        if span_gpus <= self.gpus_per_node:
            return self.intra_node_bw_bytes_per_s, self.intra_node_latency_s
        return self.network_bw_per_gpu_bytes_per_s, self.network_latency_s


def allreduce_s(message_bytes: float, participants: int, bw_bytes_per_s: float, latency_s: float) -> float:
    return float(ring_allreduce_s(message_bytes, participants, bw_bytes_per_s, latency_s))


def tensor_parallel_s(
    activation_bytes: float, tensor_parallel: int, collectives: int, links: Links
) -> float:
    """``collectives`` all-reduces (or, with sequence parallelism, reduce-scatter + all-gather
    pairs of the same volume) of one micro-batch's ``activation_bytes`` in the tensor-parallel group."""
    if tensor_parallel <= 1:
        return 0.0
    bw, latency = links.group_link(tensor_parallel)
    return collectives * allreduce_s(activation_bytes, tensor_parallel, bw, latency)


def context_parallel_ring_s(kv_block_bytes: float, context_parallel: int, tensor_parallel: int, passes: float, links: Links) -> float:
    """Ring exchange of K/V blocks: each GPU passes its block ``cp - 1`` times, ``passes`` times per layer."""
    if context_parallel <= 1:
        return 0.0
    bw, latency = links.group_link(tensor_parallel * context_parallel)
    return passes * (context_parallel - 1) * (kv_block_bytes / bw + latency)


def pipeline_transfer_s(boundary_bytes: float, transfers: float, neighbour_distance_gpus: int, links: Links) -> float:
    """Point-to-point sends of ``boundary_bytes`` between adjacent stages, ``transfers`` of them."""
    bw, latency = links.group_link(neighbour_distance_gpus + 1)
    return transfers * (boundary_bytes / bw + latency)


@dataclass(frozen=True)
class DataParallelTimes:
    """Data-parallel traffic of one step: gradient reduction and, under full sharding, parameter gathers."""

    gradient_s: float
    parameter_gather_s: float

    @property
    def total_s(self) -> float:
        return self.gradient_s + self.parameter_gather_s


def data_parallel_s(
    gradient_bytes: float,
    parameter_bytes: float,
    group_size: int,
    stride_gpus: int,
    sharding: str,
    micro_batches: int,
    links: Links,
) -> DataParallelTimes:
    """Gradient all-reduce of the GPU's shard (reduce-scatter + all-gather under sharding: the
    same bytes), hierarchical across nodes; full sharding (ZeRO-3 / FSDP) instead reduce-scatters
    the gradients once and all-gathers the parameters in forward and again in backward of every
    micro-batch.

    Members ``stride_gpus`` apart: ``g`` of them share a node and ring over NVLink; each then
    all-reduces its 1/g slice with its peers on the other nodes over its share of the NICs.
    """
    if group_size <= 1:
        return DataParallelTimes(0.0, 0.0)
    in_node = max(1, min(group_size, links.gpus_per_node // max(stride_gpus, 1)))
    across = group_size // in_node

    def hierarchical_allreduce_s(message_bytes: float) -> float:
        intra = allreduce_s(message_bytes, in_node, links.intra_node_bw_bytes_per_s, links.intra_node_latency_s)
        network = allreduce_s(message_bytes / in_node, across, links.network_bw_per_gpu_bytes_per_s, links.network_latency_s)
        return intra + network

    if sharding == "full":
        gradient = 0.5 * hierarchical_allreduce_s(gradient_bytes)
        gathers = 2.0 * micro_batches * 0.5 * hierarchical_allreduce_s(parameter_bytes)
        return DataParallelTimes(gradient, gathers)
    return DataParallelTimes(hierarchical_allreduce_s(gradient_bytes), 0.0)
