"""The roofline physics (``overlap="roofline"``): op classes, launches, bucketed overlap, NCCL collectives.

One training step of one GPU:

* **Device time** is the sum over op classes of that class's roofline,
  plus a launch cost per kernel, plus the framework's host overhead per step:

  - matrix operators (matmul, convolution, attention):
    ``FLOPs / (eta_matrix * peak at the precision) + bytes / B_mem``.
    On GeForce parts the catalogue's tensor peak is the FP32-accumulate rate,
    which their firmware holds at half the tensor cores' hardware rate: a
    kernel there reaches ``min(eta_matrix * 2 * peak, peak)``, the same
    fraction of the hardware that a full-rate part reaches, up to the cap
    (a GeForce part is as fast as a full-rate one until the cap binds).
    On the FP32 path (no tensor cores), the Winograd-eligible share of the
    matrix FLOPs (3x3 stride-1 convolutions, counted apart) runs a fitted
    ``winograd_speedup`` faster: cuDNN's Winograd algorithms, which the
    frameworks' autotuners pick for those shapes at FP32, compute them with
    2.25x (F(2x2,3x3)) to 4x (F(4x4,3x3)) fewer multiplies (Lavin & Gray
    2016, arXiv:1509.09308), less their transforms' cost. On tensor cores
    the implicit-GEMM kernels are faster and no credit is given. A release
    before cuBLAS 11 on Volta or Turing runs a half-precision matrix multiply
    on tensor cores only where its dimensions are multiples of 8
    (:func:`needs_tensor_core_alignment`): multiplies with a model width that
    is not (counted apart: Transformer-XL's 267,735-word output layer, most of
    its FLOPs) run on the FP32 path at its attainable rate; nothing is fitted
    for it.
    The sum over operators of each one's own roofline lies between the
    larger of the class's two terms and their sum (operators differ in
    intensity). On a vendor-tuned stack each band of arithmetic intensity
    (half an octave wide, counted operator by operator:
    ``matrix_intensity_bands``) takes the longer of its share of the two
    terms, a roofline per operator: its kernels overlap operand traffic
    with the math. Everywhere else the class keeps the sum, which the
    measured runs of stock stacks favour (Lambda leave-one-GPU-type-out
    14.80% against 16.34% with the per-band roofline on every stack, and
    19.8% against 21.3% with the class's larger term at an earlier
    physics); what the sum stands for there (kernels that do not pipeline
    their loads, layout conversions the counts miss) the public runs cannot
    tell apart. ``eta_matrix`` is the attainable fraction (tensor-core or FP32
    path) times an operator-size curve ``s / (s + s_half)``, ``s`` the
    matrix FLOPs of one matrix kernel per SM: an operator too small to
    fill the GPU's SMs reaches less of the peak (computed as ``s_half`` FLOPs
    added per matrix kernel per SM, which keeps the time finite however few
    the FLOPs: a kernel costs at least a wave's worth);
  - memory-bound operators (element-wise, normalisation, softmax,
    embeddings, the optimizer's weight, gradient and state traffic, and on
    more than one GPU of an all-reduce job the gradient bucket copies,
    :data:`BUCKET_COPY_PASSES` passes over the gradient bytes):
    ``max(FLOPs / FP32 peak, bytes / B_mem)``. ``B_mem``, the bandwidth
    operators attain, is the DRAM's attainable share ``eta_memory x DRAM
    bandwidth`` combined harmonically with what the SMs sustain,
    ``1 / (1 / (eta_memory B) + 1 / (c_sm x SMs))``: by Little's law an SM
    moves the bytes its outstanding loads and stores hold per memory latency,
    a fitted ``c_sm`` bytes per second, so a part with much bandwidth per SM
    (H200, B200: 36 and 52 GB/s per SM, against 9 on an RTX A6000) cannot use
    all of it. Lambda's runs show it plainly: the physics with one attainable
    fraction of the DRAM was too fast on every part in proportion to its
    bandwidth per SM and too slow on the parts with little (leave-one-GPU-type-out
    15.2% -> 14.8%, MLPerf v3.1 leave-one-benchmark-out 21.8% -> 20.3%).
    Under mixed precision a fitted share of their traffic stays at FP32
    (autocast keeps softmax, normalisation, losses and reductions there),
    moving 4 bytes per element instead of the training precision's 2; none
    where the whole model is held at the reduced precision (``mixed_precision``
    half: apex AMP O2, ``model.half()``);
  - ``kernels x launch latency`` (the software catalogue's latency times a
    fitted scale): small batches on fast GPUs become launch-bound;
  - the per-step host overhead of the framework.

  A CPU device (the testbed's host) carries its own per-operator and
  per-step costs, measured with the framework on the host
  (``python -m training.testbed calibrate``: about 3 us per operator and
  0.1 ms per step, against a GPU stack's 10 us launch and 2 ms step); they
  replace the software catalogue's and are not scaled.

  On a CPU device (the testbed's host) the measured rates are attainable as
  they are, per process; a job whose ranks (the processes that compute)
  outnumber the cores they share time-slices them, and its device time is
  ``ranks / cores`` times as long. Parameter servers take no core from the
  workers: they wait while the workers compute, and a gloo process waiting
  for a message uses no CPU (0.01 s of CPU in a 3 s wait, measured on the
  testbed host).

  Kernels per step are the counted forward, backward and optimizer kernels,
  the optimizer with PyTorch's multi-tensor ``foreach`` kernels (its default
  on GPUs); on a CPU device, where PyTorch's optimizers default to one
  kernel per tensor, the counted per-tensor optimizer kernels.

  A vendor-tuned stack (``software_stack="tuned"``) reaches a fitted
  multiple of the attainable fractions (capped at 1) and, by fusing
  element-wise operators into their neighbours, moves a fitted share of the
  memory-bound traffic. A graph compiler (``software_stack="compiled"``:
  XLA, torch.compile) fuses chains of element-wise operators into one
  kernel that reads its inputs and writes its outputs once, so it too moves
  a fitted share of the memory-bound traffic (a constant of its own), with
  the stock stack's kernels and rates.

* **Communication** of all-reduce jobs is split into DDP-style buckets
  (25 MB by default) in the order backward produces the gradients; a bucket
  is all-reduced once its last gradient is ready, one bucket at a time. The
  exposed part is the tail that the rest of the backward pass cannot hide:
  with bucket ``k`` ready at ``r_k`` of the backward time ``B`` and taking
  ``t_k``, the last bucket ends at ``max_k (r_k B + sum_{j>=k} t_j)``, and
  what lies past ``B`` is exposed. On a GPU the hidden part is not free:
  NCCL's kernels run on SMs of their own and move their bytes through the
  same memory as the backward pass they overlap, which runs slower while
  they do; a fitted share of the hidden time (``overlap_interference``) is
  added to the step. The fit puts it at its bound, 1: on the public GPU
  runs the overlap gains nothing visible (the share stands as well for
  all-reduces slower at bucket sizes than the catalogue's bus efficiencies).

* **Collectives** follow the alpha-beta model of NCCL's algorithms: a ring
  all-reduce of ``S`` bytes among ``n`` costs ``2(n-1)/n S / (e_ring bw) +
  2(n-1) alpha``, a double binary tree ``2 S / (e_tree bw) + 2 ceil(log2 n)
  alpha``, each plus a fixed call cost; the faster is taken, as NCCL's tuner
  does. Inside a node NCCL's tree is a chain, so the ring is used; across
  nodes the all-reduce is hierarchical (ring inside each node, the faster
  of ring and tree between nodes over all of a node's NICs together). Bus
  bandwidth efficiencies and call costs are catalogue figures per link
  (``catalog/collectives.json``); per-hop latencies are the links' own.

* **Parameter servers** keep the fan-in model of
  :func:`features.analytical.communication_s`, exposed in full (pushes
  follow the backward pass, pulls precede the next forward).

* **Input** is prefetched: the step is the longer of the host-to-device copy
  and device time plus exposed communication.

Every function is pure and elementwise over numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features.mechanisms import PhysicsConstants, attainable_memory_bw_bytes_per_s

#: DDP's default gradient bucket (``bucket_cap_mb=25``).
BUCKET_CAP_BYTES = 25 * 2**20

#: Passes over the gradient bytes that data-parallel all-reduce adds to device memory traffic: each
#: gradient is copied into its bucket (read, write) and the reduced bucket back into the gradients
#: (read, write). PyTorch's DistributedDataParallel does so by default (``gradient_as_bucket_view``
#: False, which its documentation says avoids "the overhead of copying between gradients and
#: allreduce communication buckets" when set), as Horovod's fusion buffer does.
BUCKET_COPY_PASSES = 4

#: At most this many buckets per step: larger models get larger buckets (the
#: exposed tail changes by under a bucket's time).
MAX_BUCKETS = 256

#: Share of the forward+backward operator time spent in backward (backward
#: costs about twice the forward), the window that can hide communication.
BACKWARD_SHARE = 2.0 / 3.0


def ring_allreduce_s(message_bytes, n, bw_bytes_per_s, hop_latency_s, efficiency, call_latency_s):
    """NCCL ring all-reduce: ``2(n-1)/n`` of the message over the bus bandwidth, ``2(n-1)`` hops; free for one rank."""
    n = np.asarray(n, dtype=float)
    steps = 2.0 * (n - 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        volume = np.where(n > 1, steps / n * message_bytes, 0.0)
        t = volume / (efficiency * bw_bytes_per_s) + steps * hop_latency_s
    return np.where(n > 1, t + call_latency_s, 0.0)


def tree_allreduce_s(message_bytes, n, bw_bytes_per_s, hop_latency_s, efficiency, call_latency_s):
    """NCCL double binary tree all-reduce: twice the message over the bus bandwidth, ``2 ceil(log2 n)`` hops."""
    n = np.asarray(n, dtype=float)
    depth = np.ceil(np.log2(np.maximum(n, 1.0)))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = 2.0 * message_bytes / (efficiency * bw_bytes_per_s) + 2.0 * depth * hop_latency_s
    return np.where(n > 1, t + call_latency_s, 0.0)


def best_allreduce_s(message_bytes, n, bw_bytes_per_s, hop_latency_s, ring_efficiency, tree_efficiency, call_latency_s):
    """The faster of ring and tree, as NCCL's tuner chooses."""
    ring = ring_allreduce_s(message_bytes, n, bw_bytes_per_s, hop_latency_s, ring_efficiency, call_latency_s)
    tree = tree_allreduce_s(message_bytes, n, bw_bytes_per_s, hop_latency_s, tree_efficiency, call_latency_s)
    return np.minimum(ring, tree)


@dataclass(frozen=True)
class CollectiveInputs:
    """Per job, what an all-reduce needs: ranks per level, link figures and efficiencies (arrays)."""

    is_allreduce: np.ndarray  # allreduce-local or allreduce-cluster
    gpus_per_node: np.ndarray  # ranks of the intra-node ring
    nodes: np.ndarray  # ranks across nodes (1 inside a node)
    intra_bw_bytes_per_s: np.ndarray
    intra_latency_s: np.ndarray
    intra_ring_efficiency: np.ndarray
    intra_call_latency_s: np.ndarray
    node_bw_bytes_per_s: np.ndarray  # all of a node's NICs together
    network_latency_s: np.ndarray
    network_ring_efficiency: np.ndarray
    network_tree_efficiency: np.ndarray
    network_call_latency_s: np.ndarray


def hierarchical_allreduce_s(message_bytes, c: CollectiveInputs, index=slice(None)):
    """All-reduce of ``message_bytes`` per job: a ring inside each node, then the faster of ring and tree across nodes.

    ``message_bytes`` may carry a trailing bucket axis; ``index`` selects the
    jobs of ``c`` it belongs to.
    """

    def col(x):
        x = np.asarray(x)[index]
        return x[:, None] if np.ndim(message_bytes) == 2 else x

    intra = ring_allreduce_s(
        message_bytes, col(c.gpus_per_node), col(c.intra_bw_bytes_per_s), col(c.intra_latency_s),
        col(c.intra_ring_efficiency), col(c.intra_call_latency_s),
    )
    across = best_allreduce_s(
        message_bytes, col(c.nodes), col(c.node_bw_bytes_per_s), col(c.network_latency_s),
        col(c.network_ring_efficiency), col(c.network_tree_efficiency), col(c.network_call_latency_s),
    )
    return intra + across


def bucket_layout(gradient_elements, ready_fraction, bytes_per_element: float, cap_bytes: float = BUCKET_CAP_BYTES):
    """DDP buckets over gradients in backward order: (share of the gradient bytes, ready fraction of backward) per bucket.

    Gradients join the open bucket until it holds ``cap_bytes``; a bucket is
    ready when its last gradient is. The cap grows where more than
    :data:`MAX_BUCKETS` buckets would form.
    """
    elements = np.asarray(gradient_elements, float)
    ready = np.asarray(ready_fraction, float)
    total = elements.sum() * bytes_per_element
    cap = max(cap_bytes, total / MAX_BUCKETS)
    shares, readies = [], []
    open_bytes = 0.0
    for n, r in zip(elements, ready):
        open_bytes += n * bytes_per_element
        if open_bytes >= cap:
            shares.append(open_bytes)
            readies.append(r)
            open_bytes = 0.0
    if open_bytes > 0 or not shares:
        shares.append(open_bytes)
        readies.append(ready[-1] if len(ready) else 1.0)
    shares_arr = np.asarray(shares) / max(total, 1.0)
    return shares_arr, np.maximum.accumulate(np.asarray(readies))


def exposed_tail_s(bucket_s: np.ndarray, ready_fraction: np.ndarray, backward_s: np.ndarray) -> np.ndarray:
    """Communication past the end of backward; ``bucket_s`` is (jobs, buckets), ``ready_fraction`` (buckets,)."""
    suffix = np.cumsum(bucket_s[:, ::-1], axis=1)[:, ::-1]
    end = np.max(ready_fraction[None, :] * backward_s[:, None] + suffix, axis=1)
    return np.maximum(0.0, end - backward_s)


def tail_envelope(bucket_s: np.ndarray, ready_fraction: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lines of :func:`exposed_tail_s` that can end a job's communication last, for repeated evaluation.

    Bucket ``k`` ends at ``r_k B + S_k`` (``S_k`` the seconds of buckets
    ``k`` onward), a line in the backward time ``B``; the last end is their
    upper envelope. Per job, only the lines on it for some ``B >= 0`` are
    kept (slopes ascend with ``k``; a monotone-chain hull), padded by
    repeating each job's last kept line. Returns (slopes, intercepts), both
    (jobs, lines): :func:`envelope_exposed_s` of them equals
    :func:`exposed_tail_s` for every ``B``, in a few lines instead of every
    bucket (a physics fit evaluates it thousands of times).
    """
    suffix = np.cumsum(bucket_s[:, ::-1], axis=1)[:, ::-1]
    ready = np.asarray(ready_fraction, float).tolist()
    kept = []
    for intercepts in suffix.tolist():
        hull: list[tuple[float, float]] = []
        for m, c in zip(ready, intercepts):
            if hull and m == hull[-1][0]:
                if c <= hull[-1][1]:
                    continue
                hull.pop()
            while len(hull) >= 2:
                (m1, c1), (m2, c2) = hull[-2], hull[-1]
                # The middle line never tops both: the outer two cross at or before it rises above the first.
                if (c1 - c) * (m2 - m1) <= (c1 - c2) * (m - m1):
                    hull.pop()
                else:
                    break
            hull.append((m, c))
        # Lines that lead only where B < 0 (the next one already ties or tops them at B = 0).
        while len(hull) >= 2 and hull[1][1] >= hull[0][1]:
            hull.pop(0)
        kept.append(hull)
    width = max((len(h) for h in kept), default=1)
    padded = [h + [h[-1]] * (width - len(h)) for h in kept]
    lines = np.asarray(padded, float).reshape(len(kept), width, 2)
    return lines[:, :, 0], lines[:, :, 1]


def envelope_exposed_s(slopes: np.ndarray, intercepts: np.ndarray, backward_s: np.ndarray) -> np.ndarray:
    """:func:`exposed_tail_s` from the lines :func:`tail_envelope` kept."""
    end = np.max(slopes * backward_s[:, None] + intercepts, axis=1)
    return np.maximum(0.0, end - backward_s)


def uniform_exposed_s(total_comm_s_per_bucket, n_buckets, backward_s):
    """:func:`exposed_tail_s` for ``K`` equal buckets ready at ``k/K`` of backward (gradients produced evenly).

    The end time ``max_k (k/K B + (K-k+1) t)`` is linear in ``k``, so the
    maximum is at ``k = 1`` or ``k = K``.
    """
    t, k, b = total_comm_s_per_bucket, n_buckets, backward_s
    end = np.maximum(b / k + k * t, b + t)
    return np.maximum(0.0, end - b)


def interfered_exposed_s(comm_s: np.ndarray, exposed_s: np.ndarray, interference: np.ndarray | float) -> np.ndarray:
    """Exposed communication plus the share ``interference`` of the hidden part, which the overlapped computation loses."""
    return exposed_s + interference * (comm_s - exposed_s)


@dataclass(frozen=True)
class DeviceInputs:
    """Per job, per step of one GPU: op-class volumes, rates and software costs (arrays)."""

    matrix_flops: np.ndarray
    other_flops: np.ndarray
    matrix_bytes: np.ndarray
    memory_bound_bytes: np.ndarray  # including the optimizer's weight, gradient and state traffic
    kernels: np.ndarray
    backward_kernels: np.ndarray
    matrix_kernels: np.ndarray
    peak_flops_per_s: np.ndarray  # at the training precision
    fp32_peak_flops_per_s: np.ndarray
    memory_bw_bytes_per_s: np.ndarray
    uses_tensor_cores: np.ndarray  # bool
    sm_count: np.ndarray  # NaN where unknown: no operator-size curve
    is_gpu: np.ndarray  # bool; the CPU host's measured rates are attainable as they are
    kernel_launch_latency_s: np.ndarray
    host_overhead_s: np.ndarray
    is_tuned: np.ndarray | None = None  # bool; a vendor-tuned software stack
    is_compiled: np.ndarray | None = None  # bool; a graph compiler fusing element-wise operators
    #: Bytes the memory-bound operators (the optimizer's traffic aside) would move more at FP32 than at the
    #: training precision: zero at FP32 and TF32.
    memory_bound_fp32_extra_bytes: np.ndarray | None = None
    #: Tensor cores' hardware rate over ``peak_flops_per_s`` (2 on GeForce parts, whose FP32-accumulate
    #: tensor rate is half the hardware's; 1 elsewhere; None: 1).
    tensor_hardware_scale: np.ndarray | None = None
    #: Matrix FLOPs of 3x3 stride-1 convolutions, which Winograd algorithms compute on the FP32 path (None: 0).
    winograd_flops: np.ndarray | None = None
    #: The matrix operators by band of arithmetic intensity: each band's share of the matrix FLOPs and of the
    #: matrix bytes ([job, band]; NaN rows, or None, where not counted: those jobs take the class's sum).
    band_flop_shares: np.ndarray | None = None
    band_byte_shares: np.ndarray | None = None
    #: A CPU device's computing processes per core they share, where above 1 (None or NaN: 1).
    processes_per_core: np.ndarray | None = None
    #: Forward and backward passes per step (gradient accumulation; None: 1): the host's per-step work
    #: repeats per pass, and the gradient exchange overlaps the last pass's backward only.
    passes: np.ndarray | None = None
    #: Matrix FLOPs that a precision on tensor cores still runs on the FP32 path: multiplies whose cuBLAS
    #: needs dimensions in multiples of 8 that the model does not have (None: none).
    untensored_matrix_flops: np.ndarray | None = None


@dataclass(frozen=True)
class DeviceTimes:
    matrix_s: np.ndarray
    memory_bound_s: np.ndarray
    launch_s: np.ndarray
    host_s: np.ndarray

    @property
    def operators_s(self) -> np.ndarray:
        return self.matrix_s + self.memory_bound_s

    @property
    def total_s(self) -> np.ndarray:
        return self.operators_s + self.launch_s + self.host_s


#: The first software release year counted as shipping cuBLAS 11 (CUDA 11.0, NGC containers from 20.06) for
#: Volta and Turing: a release of 2020 or before is taken for cuBLAS 10 there (Lambda's first suite ran NGC
#: 20.01); Ampere and later need CUDA 11 to run at all.
CUBLAS_11_YEAR = 2021
#: Tensor-core generations whose jobs may run cuBLAS before 11: Volta (1) and Turing (2).
PRE_CUDA_11_TENSOR_CORES = (1, 2)


def needs_tensor_core_alignment(software_year, tensor_core_generation, tuned) -> np.ndarray:
    """Jobs whose cuBLAS runs a half-precision multiply on tensor cores only where m, n and k are multiples of 8.

    cuBLAS before 11.0 does (NVIDIA, Matrix Multiplication Background User's
    Guide, "Tensor Core Requirements"; from 11.0 any size runs on them): a
    release before :data:`CUBLAS_11_YEAR` on Volta or Turing. A vendor-tuned
    stack pads its models' widths (NVIDIA's MLPerf BERT its vocabulary to
    30,528), so its jobs never need it.
    """
    generation = np.asarray(tensor_core_generation, float)
    old = np.asarray(software_year, float) < CUBLAS_11_YEAR
    return old & np.isin(generation, PRE_CUDA_11_TENSOR_CORES) & ~np.asarray(tuned, bool)


def per_band_roofline_s(compute_s, bytes_s, flop_shares, byte_shares) -> np.ndarray:
    """Matrix operators each at their own roofline: per band of intensity, the longer of its FLOPs' and its bytes' time.

    ``compute_s`` and ``bytes_s`` are the class's two terms (one per job); a
    band takes its share of each (``flop_shares`` and ``byte_shares``, [job, band]).
    """
    compute = np.asarray(compute_s, float).reshape(-1, 1) * flop_shares
    moved = np.asarray(bytes_s, float).reshape(-1, 1) * byte_shares
    return np.maximum(compute, moved).sum(axis=1)


def operator_size_flops(matrix_flops, matrix_kernels, sm_count, half_flops_per_sm):
    """The operator-size curve as FLOPs added to the matrix work: ``s_half`` per matrix kernel per SM.

    A kernel of ``s`` FLOPs per SM reaches ``s / (s + s_half)`` of the
    attainable rate, so its time is that of ``s + s_half`` FLOPs at the full
    attainable rate: the step's matrix work grows by ``s_half`` x kernels x
    SMs. Written this way the time stays finite for any number of FLOPs, none
    included (no matrix operators, no time). Zero where the SM count is unknown.
    """
    added = half_flops_per_sm * np.maximum(matrix_kernels, 1.0) * sm_count
    return np.where((matrix_flops > 0) & np.isfinite(added), added, 0.0)


def device_times(d: DeviceInputs, k: PhysicsConstants) -> DeviceTimes:
    """Op-class rooflines, launches and host overhead of one step (see the module docstring)."""
    gpu = d.is_gpu
    tuned = np.zeros(np.shape(gpu), bool) if d.is_tuned is None else d.is_tuned
    gain = np.where(tuned, k.tuned_efficiency_gain, 1.0)
    eta_matrix = np.where(d.uses_tensor_cores, k.matrix_efficiency_tensor, k.matrix_efficiency_fp32)
    eta_matrix = np.minimum(eta_matrix * gain, 1.0)
    if d.tensor_hardware_scale is not None:
        # The attainable fraction is of the hardware rate; a capped part reaches at most its cap (below).
        eta_matrix = eta_matrix * np.where(d.uses_tensor_cores, d.tensor_hardware_scale, 1.0)
    eta_memory = np.where(gpu, np.minimum(k.memory_efficiency * gain, 1.0), 1.0)
    # The SMs' limit holds on a GPU; a CPU host's measured bandwidth is attainable as it is.
    sm_count = np.where(gpu, np.nan if d.sm_count is None else d.sm_count, np.nan)
    memory_bw = attainable_memory_bw_bytes_per_s(eta_memory * d.memory_bw_bytes_per_s, sm_count, k)
    fused = np.where(gpu & tuned, k.tuned_memory_bound_fraction, 1.0)
    if d.is_compiled is not None:
        fused = np.where(gpu & d.is_compiled, k.compiled_memory_bound_fraction, fused)
    bound_bytes = d.memory_bound_bytes
    if d.memory_bound_fp32_extra_bytes is not None:
        bound_bytes = bound_bytes + np.where(gpu, k.mixed_precision_fp32_share, 0.0) * d.memory_bound_fp32_extra_bytes
    # A zero rate (a job's own tiny figures) gives an infinite time, which the prediction refuses
    # with the field's name (predictor.api): no warning on the way.
    matrix_flops = d.matrix_flops
    kept = 1.0  # of the matrix FLOPs, after Winograd
    if d.winograd_flops is not None:
        winograd = np.where(gpu & ~np.asarray(d.uses_tensor_cores, bool), d.winograd_flops, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            kept = np.where(d.matrix_flops > 0, 1.0 - winograd / d.matrix_flops * (1.0 - 1.0 / k.winograd_speedup), 1.0)
        matrix_flops = matrix_flops * kept
    # The operator-size curve slows the attainable rate (never past the peak itself): the same as
    # matrix FLOPs / (eta x s / (s + s_half) x peak), capped at the peak.
    sized = matrix_flops + kept * operator_size_flops(d.matrix_flops, d.matrix_kernels, d.sm_count, k.half_efficiency_flops_per_sm)
    # Multiplies the job's cuBLAS keeps off the tensor cores run at the attainable FP32 rate (their FP32 accumulation).
    off = 0.0
    if d.untensored_matrix_flops is not None:
        off = np.where(gpu & np.asarray(d.uses_tensor_cores, bool), np.nan_to_num(d.untensored_matrix_flops), 0.0)
    eta_fp32 = np.minimum(k.matrix_efficiency_fp32 * gain, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix_compute_s = np.where(
            gpu,
            np.maximum((sized - off) / (eta_matrix * d.peak_flops_per_s), (matrix_flops - off) / d.peak_flops_per_s)
            + off / (eta_fp32 * d.fp32_peak_flops_per_s),
            matrix_flops / d.peak_flops_per_s,
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        matrix_bytes_s = d.matrix_bytes / memory_bw
        matrix_s = matrix_compute_s + matrix_bytes_s
        if d.band_flop_shares is not None:
            # A vendor-tuned stack's matrix kernels: each band of intensity at its own roofline (where counted).
            rows = np.flatnonzero(gpu & tuned & ~np.isnan(d.band_flop_shares[:, 0]))
            if rows.size:
                n = len(d.band_flop_shares)
                matrix_s = np.array(np.broadcast_to(matrix_s, (n,)), float)
                matrix_s[rows] = per_band_roofline_s(
                    np.broadcast_to(matrix_compute_s, (n,))[rows], np.broadcast_to(matrix_bytes_s, (n,))[rows],
                    d.band_flop_shares[rows], d.band_byte_shares[rows],
                )
        memory_bound_s = np.maximum(
            d.other_flops / d.fp32_peak_flops_per_s, fused * bound_bytes / memory_bw
        )
    launch_scale = overhead_scale(d, k, k.launch_scale)
    host_scale = overhead_scale(d, k, k.host_scale)
    slicing = time_slicing(d)
    return DeviceTimes(
        matrix_s=matrix_s * slicing,
        memory_bound_s=memory_bound_s * slicing,
        launch_s=d.kernels * d.kernel_launch_latency_s * launch_scale * slicing,
        host_s=d.host_overhead_s * host_scale * slicing * (1.0 if d.passes is None else d.passes),
    )


#: The most that Winograd's algorithms cut a 3x3 convolution's multiplies: F(4x4,3x3), 4x (Lavin & Gray 2016).
WINOGRAD_MAX_REDUCTION = 4.0


def arithmetic_floor_s(d: DeviceInputs) -> np.ndarray:
    """The least time a GPU step's arithmetic can take: every FLOP at the hardware's dense peak.

    Matrix FLOPs at the peak of the training precision (a GeForce part's
    tensor hardware rate, twice its FP32-accumulate figure), the
    Winograd-eligible ones cut :data:`WINOGRAD_MAX_REDUCTION` times whatever
    the precision, the rest at the FP32 peak; no memory traffic, launches or
    communication. A measured step shorter than this is not a measurement of
    the job as stated (a mislabelled precision, batch or GPU count). NaN on a
    CPU device, whose catalogue rates are measured, not a hardware ceiling.
    """
    scale = 1.0 if d.tensor_hardware_scale is None else np.where(d.uses_tensor_cores, np.nan_to_num(d.tensor_hardware_scale, nan=1.0), 1.0)
    winograd = 0.0 if d.winograd_flops is None else np.nan_to_num(d.winograd_flops)
    matrix_flops = d.matrix_flops - winograd * (1.0 - 1.0 / WINOGRAD_MAX_REDUCTION)
    with np.errstate(divide="ignore", invalid="ignore"):
        floor_s = matrix_flops / (d.peak_flops_per_s * scale) + d.other_flops / d.fp32_peak_flops_per_s
    return np.where(np.asarray(d.is_gpu, bool), floor_s, np.nan)


def time_slicing(d: DeviceInputs) -> np.ndarray | float:
    """How many times longer a CPU device's operators take when its ranks outnumber its cores (1 elsewhere)."""
    if d.processes_per_core is None:
        return 1.0
    share = np.where(np.asarray(d.is_gpu, bool), 1.0, np.nan_to_num(d.processes_per_core, nan=1.0))
    return np.maximum(share, 1.0)


#: The parts of a step in the roofline physics, as reports list them; a job's parts add up to its step.
STEP_PARTS = ("matrix operators", "memory-bound operators", "kernel launches", "host overhead", "exposed communication", "input")


@dataclass(frozen=True)
class PhysicsArrays:
    """The roofline physics of each job, by mechanism (seconds)."""

    device: DeviceTimes
    backward_s: np.ndarray
    comm_s: np.ndarray  # all communication of the step, hidden or not
    exposed_comm_s: np.ndarray
    io_s: np.ndarray

    @property
    def step_time_s(self) -> np.ndarray:
        return np.maximum(self.io_s, self.device.total_s + self.exposed_comm_s)

    def parts_s(self) -> np.ndarray:
        """Seconds of each of :data:`STEP_PARTS` (jobs x parts); each row adds up to :attr:`step_time_s`.

        Input is prefetched behind the rest of the step, so only what it takes
        beyond the rest counts.
        """
        d = self.device
        rest = d.total_s + self.exposed_comm_s
        parts = (d.matrix_s, d.memory_bound_s, d.launch_s, d.host_s, self.exposed_comm_s, np.maximum(0.0, self.io_s - rest))
        return np.stack(np.broadcast_arrays(*(np.asarray(p, float) for p in parts)), axis=-1)


def overhead_scale(d: DeviceInputs, k: PhysicsConstants, scale: float) -> np.ndarray:
    """The fitted multiplier on a catalogue overhead (launch latency or host overhead): ``scale`` on a GPU,
    times ``tuned_overhead_scale`` on a vendor-tuned stack; 1 on a CPU host (its measured costs as they are)."""
    tuned = np.zeros(np.shape(d.is_gpu), bool) if d.is_tuned is None else np.asarray(d.is_tuned, bool)
    return np.where(d.is_gpu, scale * np.where(tuned, k.tuned_overhead_scale, 1.0), 1.0)


def backward_s(device: DeviceTimes, d: DeviceInputs, k: PhysicsConstants) -> np.ndarray:
    """Seconds of the (last) backward pass: its share of one pass's operator time and its own kernels' launches."""
    launch_scale = overhead_scale(d, k, k.launch_scale)
    passes = 1.0 if d.passes is None else d.passes
    return BACKWARD_SHARE * device.operators_s / passes + d.backward_kernels * d.kernel_launch_latency_s * launch_scale
