"""From validated job columns to the physical quantities the breakdown needs.

Names resolve against the catalogues once per distinct value; catalogue
defaults fill what a job leaves out (batch size, intra-node link, node count);
rules that tie fields together (:mod:`features.rules`) are checked per row,
without stopping the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from features import analytical, physics
from features.analytical import ARCHITECTURE_CODES, BreakdownArrays, communication_s
from features.catalog_arrays import CatalogArrays, catalog_arrays
from features.errors import UnknownNameError
from features.fields import DEFAULT_SOFTWARE_YEAR, FRAMEWORKS, MIXED_PRECISION_MODES, PRECISIONS, SOFTWARE_STACKS
from features.mechanisms import PhysicsConstants, physics_constants
from features.op_class_split import first_given, op_classes
from features.rules import check_links, check_not_layout, check_parallelism, check_passes, check_workload
from features.table import JobTable, map_values
from features.units import BYTES_PER_ELEMENT, GRADIENT_BYTES_PER_ELEMENT



@dataclass
class ResolvedJobs:
    """Per-job physical inputs of the analytical model (numpy arrays, NaN on failed rows)."""

    table: JobTable
    device_index: np.ndarray  # into catalog.devices.names(); -1 on failed rows
    workload_index: np.ndarray  # into catalog workloads; -1 for explicit-figure models
    intra_link_index: np.ndarray
    network_link_index: np.ndarray
    architecture_code: np.ndarray
    batch_size_per_gpu: np.ndarray
    bytes_per_element: np.ndarray
    flops_per_sample: np.ndarray
    memory_bytes_per_sample: np.ndarray
    input_bytes_per_sample: np.ndarray
    param_count: np.ndarray
    gradient_bytes: np.ndarray
    peak_flops_per_s: np.ndarray
    fp32_peak_flops_per_s: np.ndarray
    device_release_year: np.ndarray
    memory_bw_bytes_per_s: np.ndarray
    host_link_bw_bytes_per_s: np.ndarray
    intra_node_bw_bytes_per_s: np.ndarray
    intra_node_latency_s: np.ndarray
    network_bw_bytes_per_s: np.ndarray
    network_latency_s: np.ndarray
    workers: np.ndarray
    gpus_per_worker: np.ndarray
    total_gpus: np.ndarray
    parameter_servers: np.ndarray
    nodes: np.ndarray
    gpus_per_node_used: np.ndarray
    nics_per_node: np.ndarray
    #: Forward and backward passes per step (gradient accumulation); the batch per GPU is split among them.
    passes_per_step: np.ndarray | None = None
    # The roofline physics' inputs (features.physics).
    matrix_flops_per_sample: np.ndarray | None = None
    other_flops_per_sample: np.ndarray | None = None
    matrix_bytes_per_sample: np.ndarray | None = None
    memory_bound_bytes_per_sample: np.ndarray | None = None
    kernels_per_step: np.ndarray | None = None
    backward_kernels_per_step: np.ndarray | None = None
    matrix_kernels_per_step: np.ndarray | None = None
    winograd_flops_per_sample: np.ndarray | None = None
    #: Matrix FLOPs per sample of multiplies with a dimension of the model no multiple of 8 (features.op_counting).
    unaligned_gemm_flops_per_sample: np.ndarray | None = None
    #: The job's cuBLAS puts a half-precision multiply on tensor cores only where its dimensions are multiples
    #: of 8 (physics.needs_tensor_core_alignment: a release before cuBLAS 11 on Volta or Turing).
    tensor_cores_need_alignment: np.ndarray | None = None
    sm_count: np.ndarray | None = None
    #: CPU devices: the job's ranks (the processes that compute) per core they share; NaN elsewhere.
    processes_per_core: np.ndarray | None = None
    tensor_hardware_scale: np.ndarray | None = None
    device_is_gpu: np.ndarray | None = None
    kernel_launch_latency_s: np.ndarray | None = None
    host_overhead_s: np.ndarray | None = None
    intra_ring_efficiency: np.ndarray | None = None
    intra_call_latency_s: np.ndarray | None = None
    network_ring_efficiency: np.ndarray | None = None
    network_tree_efficiency: np.ndarray | None = None
    network_call_latency_s: np.ndarray | None = None
    is_tuned: np.ndarray | None = None
    #: A graph compiler fuses element-wise operators (software_stack "compiled").
    is_compiled: np.ndarray | None = None
    #: Index into features.fields.SOFTWARE_STACKS; -1 on failed rows.
    software_stack_index: np.ndarray | None = None
    #: The whole model held at the reduced precision (mixed_precision "half"): no memory-bound traffic
    #: stays at FP32, where autocast keeps a share of it there.
    half_model: np.ndarray | None = None
    #: Matrix operators run on tensor cores: the catalogue's peak at the training precision is above
    #: its FP32 peak. Fixed at resolution, so a what-if on a peak changes the rate, never the class.
    uses_tensor_cores: np.ndarray | None = None
    catalogs: CatalogArrays | None = None

    @property
    def errors(self) -> np.ndarray:
        return self.table.errors

    @property
    def ok(self) -> np.ndarray:
        return self.table.ok

    def breakdown(self) -> BreakdownArrays:
        """The analytical breakdown of every job (NaN on failed rows)."""
        traffic = analytical.memory_traffic_bytes(
            self.memory_bytes_per_sample, self.batch_size_per_gpu, self.param_count, self.bytes_per_element
        )
        comm = communication_s(
            self.architecture_code,
            self.gradient_bytes,
            self.total_gpus,
            self.gpus_per_node_used,
            self.nodes,
            self.workers,
            self.gpus_per_worker,
            self.parameter_servers,
            self.intra_node_bw_bytes_per_s,
            self.intra_node_latency_s,
            self.host_link_bw_bytes_per_s,
            self.network_bw_bytes_per_s,
            self.network_latency_s,
            self.nics_per_node,
        )
        io = analytical.io_s(self.input_bytes_per_sample, self.batch_size_per_gpu, self.host_link_bw_bytes_per_s)
        return BreakdownArrays(
            io_s=io,
            compute_s=analytical.compute_s(self.flops_per_sample, self.batch_size_per_gpu, self.peak_flops_per_s),
            memory_s=analytical.memory_s(traffic, self.memory_bw_bytes_per_s),
            comm=comm,
            physics_fn=lambda: self.physics(comm, io),
        )

    def device_inputs(self) -> physics.DeviceInputs:
        """Per-step op-class volumes of one GPU, its rates and the software's costs."""
        b = self.batch_size_per_gpu
        optimizer_bytes = self.param_count * (
            analytical.WEIGHT_ELEMENTS_PER_PARAM * self.bytes_per_element + analytical.OPTIMIZER_BYTES_PER_PARAM
        )
        data_parallel = np.nan_to_num(self.total_gpus) > 1
        bucket_copy_bytes = physics.BUCKET_COPY_PASSES * np.where(data_parallel, self._allreduce_gradient_bytes(), 0.0)
        return physics.DeviceInputs(
            matrix_flops=self.matrix_flops_per_sample * b,
            other_flops=self.other_flops_per_sample * b,
            matrix_bytes=self.matrix_bytes_per_sample * b,
            memory_bound_bytes=self.memory_bound_bytes_per_sample * b + optimizer_bytes + bucket_copy_bytes,
            memory_bound_fp32_extra_bytes=self.memory_bound_bytes_per_sample * b * (BYTES_PER_ELEMENT["fp32"] / self.bytes_per_element - 1.0)
            * (1.0 if self.half_model is None else np.where(self.half_model, 0.0, 1.0)),
            kernels=self.kernels_per_step,
            backward_kernels=self.backward_kernels_per_step,
            matrix_kernels=self.matrix_kernels_per_step,
            winograd_flops=None if self.winograd_flops_per_sample is None else self.winograd_flops_per_sample * b,
            untensored_matrix_flops=(
                None if self.tensor_cores_need_alignment is None or self.unaligned_gemm_flops_per_sample is None
                else np.where(self.tensor_cores_need_alignment, self.unaligned_gemm_flops_per_sample * b, 0.0)
            ),
            band_flop_shares=self._band_shares("workload_band_flop_shares"),
            band_byte_shares=self._band_shares("workload_band_byte_shares"),
            peak_flops_per_s=self.peak_flops_per_s,
            fp32_peak_flops_per_s=self.fp32_peak_flops_per_s,
            memory_bw_bytes_per_s=self.memory_bw_bytes_per_s,
            uses_tensor_cores=(
                self.peak_flops_per_s > self.fp32_peak_flops_per_s if self.uses_tensor_cores is None else self.uses_tensor_cores
            ),
            sm_count=self.sm_count,
            processes_per_core=self.processes_per_core,
            tensor_hardware_scale=self.tensor_hardware_scale,
            is_gpu=self.device_is_gpu,
            kernel_launch_latency_s=self.kernel_launch_latency_s,
            host_overhead_s=self.host_overhead_s,
            passes=self.passes_per_step,
            is_tuned=self.is_tuned,
            is_compiled=self.is_compiled,
        )

    def _band_shares(self, name: str) -> np.ndarray | None:
        """A catalogue model's matrix intensity bands, per job (NaN rows for a custom model or a failed row)."""
        if self.catalogs is None:
            return None
        shares = getattr(self.catalogs, name)
        index = np.asarray(self.workload_index)
        return np.where((index >= 0)[:, None], shares[np.maximum(index, 0)], np.nan)

    def collective_inputs(self) -> physics.CollectiveInputs:
        code = self.architecture_code
        local = code == ARCHITECTURE_CODES["allreduce-local"]
        cluster = code == ARCHITECTURE_CODES["allreduce-cluster"]
        return physics.CollectiveInputs(
            is_allreduce=local | cluster,
            gpus_per_node=np.where(local, self.total_gpus, self.gpus_per_node_used),
            nodes=np.where(cluster, self.nodes, 1.0),
            intra_bw_bytes_per_s=self.intra_node_bw_bytes_per_s,
            intra_latency_s=self.intra_node_latency_s,
            intra_ring_efficiency=self.intra_ring_efficiency,
            intra_call_latency_s=self.intra_call_latency_s,
            node_bw_bytes_per_s=self.network_bw_bytes_per_s * self.nics_per_node,
            network_latency_s=self.network_latency_s,
            network_ring_efficiency=self.network_ring_efficiency,
            network_tree_efficiency=self.network_tree_efficiency,
            network_call_latency_s=self.network_call_latency_s,
        )

    def physics(self, comm: analytical.CommTimes, io_s: np.ndarray, constants: PhysicsConstants | None = None):
        """The roofline physics (:mod:`features.physics`) of every job; ``comm`` gives the PS/Worker fan-in times."""
        k = constants or physics_constants()
        d = self.__dict__.get("_device_inputs_cache") or self.device_inputs()
        device = physics.device_times(d, k)
        backward = physics.backward_s(device, d, k)
        comm_s, exposed = self.allreduce_overlap(backward)
        exposed = physics.interfered_exposed_s(comm_s, exposed, np.where(self.device_is_gpu, k.overlap_interference, 0.0))
        is_ps = self.architecture_code == ARCHITECTURE_CODES["ps-worker"]
        comm_s = np.where(is_ps, comm.total_s, comm_s)
        exposed = np.where(is_ps, comm.total_s, exposed)
        return physics.PhysicsArrays(device, backward, comm_s, exposed, io_s)

    def allreduce_overlap(self, backward_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All-reduce seconds per step and the part the backward pass cannot hide, bucket by bucket."""
        n = len(backward_s)
        total = np.zeros(n)
        exposed = np.zeros(n)
        envelope = self.__dict__.get("_envelope_cache")
        if envelope is not None:
            index, total_s, slopes, intercepts = envelope
            total[index] = total_s
            exposed[index] = physics.envelope_exposed_s(slopes, intercepts, backward_s[index])
        else:
            for index, bucket_s, ready in self._allreduce_buckets():
                total[index] = bucket_s.sum(axis=1)
                exposed[index] = physics.exposed_tail_s(bucket_s, ready, backward_s[index])
        index, per_bucket, k = self._uniform_buckets()
        if len(index):
            total[index] = per_bucket * k
            exposed[index] = physics.uniform_exposed_s(per_bucket, k, backward_s[index])
        nan = np.where(self.ok, 0.0, np.nan)
        return total + nan, exposed + nan

    def prepare_repeated_physics(self) -> None:
        """Keep each job's bucket ends on their upper envelope (:func:`features.physics.tail_envelope`) and its
        device inputs: the same physics, about three times faster for a fit that evaluates it thousands of times."""
        if "_envelope_cache" in self.__dict__:
            return
        self.__dict__["_device_inputs_cache"] = self.device_inputs()
        groups = [(index, bucket_s.sum(axis=1), *physics.tail_envelope(bucket_s, ready)) for index, bucket_s, ready in self._allreduce_buckets()]
        width = max((g[2].shape[1] for g in groups), default=1)

        def padded(lines: np.ndarray) -> np.ndarray:  # repeat each job's last line: the maximum stays its own
            return np.concatenate([lines, np.repeat(lines[:, -1:], width - lines.shape[1], axis=1)], axis=1)

        self.__dict__["_envelope_cache"] = (
            np.concatenate([g[0] for g in groups]).astype(int) if groups else np.zeros(0, int),
            np.concatenate([g[1] for g in groups]) if groups else np.zeros(0),
            np.concatenate([padded(g[2]) for g in groups]) if groups else np.zeros((0, 1)),
            np.concatenate([padded(g[3]) for g in groups]) if groups else np.zeros((0, 1)),
        )

    def _allreduce_gradient_bytes(self) -> np.ndarray:
        c_allreduce = np.isin(
            self.architecture_code, [ARCHITECTURE_CODES["allreduce-local"], ARCHITECTURE_CODES["allreduce-cluster"]]
        )
        return np.where(c_allreduce & self.ok, self.gradient_bytes, 0.0)

    def _allreduce_buckets(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per group of jobs sharing a counted gradient layout: (job rows, bucket seconds, ready fractions).

        The bucket times do not depend on the physics' constants, so they are
        computed once per resolved table.
        """
        cached = self.__dict__.get("_bucket_cache")
        if cached is not None:
            return cached
        gradient = self._allreduce_gradient_bytes()
        active = gradient > 0
        per_element = self.gradient_bytes / np.maximum(self.param_count, 1.0)
        groups = []
        covered = np.zeros(len(gradient), bool)
        c = self.collective_inputs()
        if self.catalogs is not None:
            # Python sets, not np.unique: its first call imports a numpy submodule (tens of ms of a cold start).
            for w in sorted(set(self.workload_index[active & (self.workload_index >= 0)].tolist())):
                rows = active & (self.workload_index == w)
                for bpe in sorted(set(per_element[rows].tolist())):
                    layout = self.catalogs.gradient_layout(int(w), float(bpe))
                    if layout is None:
                        continue
                    shares, ready = layout
                    index = np.flatnonzero(rows & (per_element == bpe))
                    covered[index] = True
                    bucket_s = physics.hierarchical_allreduce_s(gradient[index, None] * shares[None, :], c, index)
                    groups.append((index, bucket_s, ready))
        self.__dict__["_bucket_cache"] = groups
        self.__dict__["_uniform_rows"] = active & ~covered
        return groups

    def _uniform_buckets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Jobs without a counted layout: equal 25 MB buckets, gradients produced evenly through backward."""
        cached = self.__dict__.get("_uniform_cache")
        if cached is not None:
            return cached
        self._allreduce_buckets()
        index = np.flatnonzero(self.__dict__["_uniform_rows"])
        gradient = self._allreduce_gradient_bytes()[index]
        k = np.clip(np.ceil(gradient / physics.BUCKET_CAP_BYTES), 1, physics.MAX_BUCKETS)
        per_bucket = physics.hierarchical_allreduce_s(gradient / k, self.collective_inputs(), index)
        self.__dict__["_uniform_cache"] = (index, per_bucket, k)
        return index, per_bucket, k


def _lookup(table: JobTable, leaf: str, path: str, index, names: list[str], strict: bool = True) -> np.ndarray:
    """Positions in ``names`` of a name column's values; -1 where missing or unknown.

    ``index`` is a catalogue NameIndex. An unknown name is a row error when
    ``strict``; otherwise the caller decides (a model outside the catalogue is
    fine when the job gives its figures).
    """
    codes, uniques = table.codes(leaf)
    position = {name: i for i, name in enumerate(names)}
    resolved = np.full(len(uniques), -1)
    messages: list[str | None] = [None] * len(uniques)
    for u, value in enumerate(uniques):
        if value is None:
            continue
        try:
            resolved[u] = position[index.get(value, path).name]
        except UnknownNameError as exc:
            messages[u] = str(exc)
    out = resolved[codes]
    if strict:
        for u, message in enumerate(messages):
            if message is not None:
                table.fail(codes == u, message)
    return out


def resolve(table: JobTable, catalogs: CatalogArrays | None = None) -> ResolvedJobs:
    """Resolve names, fill catalogue defaults and check cross-field rules, row by row."""
    cat = catalogs or catalog_arrays()
    cols = table.columns
    n = len(table)

    device = _lookup(table, "gpu", "cluster.gpu", cat.hardware.devices, cat.device_names)
    model = _lookup(table, "model", "workload.model", cat.workloads.workloads, cat.workload_names, strict=False)
    network = _lookup(table, "network", "cluster.network", cat.hardware.links, cat.link_names)
    intra = _lookup(table, "intra_node_link", "cluster.intra_node_link", cat.hardware.links, cat.link_names)
    has_device = device >= 0
    safe_device = np.where(has_device, device, 0)
    intra = np.where((intra < 0) & has_device, cat.default_intra_link_index[safe_device], intra)
    check_links(table, cat, device, intra, network)

    # Workload figures: explicit figures win over the catalogue's.
    has_model = model >= 0
    safe_model = np.where(has_model, model, 0)
    precision = cols["precision"]
    bytes_per_element = _per_precision(precision, BYTES_PER_ELEMENT)
    framework = table.map_column("framework", {f: i for i, f in enumerate(FRAMEWORKS)}, FRAMEWORKS.index("other"), int)
    stack = table.map_column("software_stack", {s: i for i, s in enumerate(SOFTWARE_STACKS)}, 0, int)
    half_model = table.map_column("mixed_precision", {m: m == "half" for m in MIXED_PRECISION_MODES}, False, bool)
    gradient_bytes_per_element = np.where(
        autocast_keeps_fp32_gradients(precision, framework, stack, half_model),
        GRADIENT_BYTES_PER_ELEMENT["fp32"], _per_precision(precision, GRADIENT_BYTES_PER_ELEMENT),
    )

    def catalogue_or_nan(values: np.ndarray) -> np.ndarray:
        return np.where(has_model, values[safe_model], np.nan)

    flops = first_given(cols["flops_per_sample"], catalogue_or_nan(cat.workload_flops_per_sample))
    memory = first_given(
        cols["memory_bytes_per_sample"],
        catalogue_or_nan(cat.workload_memory_bytes_per_sample_fp32) * bytes_per_element / BYTES_PER_ELEMENT["fp32"],
    )
    input_bytes = first_given(cols["input_bytes_per_sample"], catalogue_or_nan(cat.workload_input_bytes_per_sample))
    param_count = first_given(
        cols["param_count"],
        cols["gradient_bytes"] / gradient_bytes_per_element,
        catalogue_or_nan(cat.workload_dense_param_count),
    )
    gradient_bytes = first_given(cols["gradient_bytes"], param_count * gradient_bytes_per_element)
    batch = first_given(cols["batch_size_per_gpu"], catalogue_or_nan(cat.workload_default_batch))
    passes = np.where(np.isnan(cols["gradient_accumulation_steps"]), 1.0, cols["gradient_accumulation_steps"])
    op = op_classes(cols, cat, has_model, safe_model, flops, memory, per_tensor_optimizer=~cat.device_is_gpu[safe_device], passes=passes)
    check_workload(table, cat, has_model, flops, memory, input_bytes, param_count, batch)
    check_passes(table, batch, passes)

    # Parallelism.
    arch = table.map_column("architecture", ARCHITECTURE_CODES, -1, int)
    workers = cols["workers"]
    gpus_per_worker = cols["gpus_per_worker"]
    total_gpus = workers * gpus_per_worker
    gpus_per_node = cols["gpus_per_node"]
    fewest_nodes = np.ceil(total_gpus / gpus_per_node)
    nodes = np.where(np.isnan(cols["nodes"]), fewest_nodes, cols["nodes"])
    parameter_servers = np.where(np.isnan(cols["parameter_servers"]), 1.0, cols["parameter_servers"])
    gpus_per_node_used = np.select(
        [arch == ARCHITECTURE_CODES["allreduce-cluster"], arch == ARCHITECTURE_CODES["ps-worker"]],
        [total_gpus / nodes, gpus_per_worker],
        total_gpus,
    )
    nodes = np.select(
        [arch == ARCHITECTURE_CODES["allreduce-cluster"], arch == ARCHITECTURE_CODES["ps-worker"]],
        [nodes, workers],
        1.0,
    )
    check_parallelism(table, arch, total_gpus, gpus_per_node, nodes, gpus_per_worker, cols)
    check_not_layout(table)

    ok = table.ok
    precision_index = map_values(precision, {p: i for i, p in enumerate(PRECISIONS)}, 0, int)
    safe_intra = np.where(intra >= 0, intra, 0)
    safe_network = np.where(network >= 0, network, 0)

    def masked(values: np.ndarray) -> np.ndarray:
        return np.where(ok, values, np.nan)

    # A link that joins fewer GPUs than the node's ring holds (an NVLink bridge joins two) leaves
    # the ring's other hops on the GPUs' host link: the ring runs at the slower of the two.
    host_link = cat.host_link_index[safe_device]
    host_bw, host_latency = cat.link_bw_bytes_per_s[host_link], cat.link_latency_s[host_link]
    intra_bw, intra_latency = cat.link_bw_bytes_per_s[safe_intra], cat.link_latency_s[safe_intra]
    bridged = cat.link_max_gpus[safe_intra] < gpus_per_node_used

    # A CPU device's own measured per-operator and per-step costs replace the software catalogue's GPU figures.
    device_latency, device_host = cat.device_launch_latency_s[safe_device], cat.device_host_overhead_s[safe_device]
    software_latency = np.where(np.isfinite(device_latency), device_latency, cat.software_launch_latency_s[framework, stack])
    software_host = np.where(np.isfinite(device_host), device_host, cat.software_host_overhead_s[framework, stack])

    precision_peak = cat.peak_flops_per_s[safe_device, precision_index]
    fp32_peak = cat.peak_flops_per_s[safe_device, PRECISIONS.index("fp32")]
    return ResolvedJobs(
        table=table,
        device_index=np.where(ok, device, -1),
        workload_index=np.where(ok, model, -1),
        intra_link_index=np.where(ok, intra, -1),
        network_link_index=np.where(ok, network, -1),
        architecture_code=np.where(ok, arch, -1),
        batch_size_per_gpu=masked(batch),
        passes_per_step=masked(passes),
        bytes_per_element=masked(bytes_per_element),
        flops_per_sample=masked(flops),
        memory_bytes_per_sample=masked(memory),
        input_bytes_per_sample=masked(input_bytes),
        param_count=masked(param_count),
        gradient_bytes=masked(gradient_bytes),
        peak_flops_per_s=masked(precision_peak),
        fp32_peak_flops_per_s=masked(fp32_peak),
        device_release_year=masked(cat.release_year[safe_device]),
        memory_bw_bytes_per_s=masked(cat.memory_bw_bytes_per_s[safe_device]),
        host_link_bw_bytes_per_s=masked(cat.link_bw_bytes_per_s[cat.host_link_index[safe_device]]),
        intra_node_bw_bytes_per_s=masked(np.where(bridged, np.minimum(intra_bw, host_bw), intra_bw)),
        intra_node_latency_s=masked(np.where(bridged, np.maximum(intra_latency, host_latency), intra_latency)),
        network_bw_bytes_per_s=masked(cat.link_bw_bytes_per_s[safe_network]),
        network_latency_s=masked(cat.link_latency_s[safe_network]),
        workers=masked(workers),
        gpus_per_worker=masked(gpus_per_worker),
        total_gpus=masked(total_gpus),
        parameter_servers=masked(parameter_servers),
        nodes=masked(nodes),
        gpus_per_node_used=masked(gpus_per_node_used),
        nics_per_node=masked(cols["nics_per_node"]),
        **{name: masked(values) for name, values in op.items()},
        sm_count=masked(cat.device_sm_count[safe_device]),
        # Every rank computes at once; parameter servers sleep while the workers compute (a gloo
        # process waiting for a message uses no CPU), so they take no core from them.
        processes_per_core=masked(total_gpus / cat.device_cores[safe_device]),
        tensor_hardware_scale=np.where(ok, cat.device_tensor_hardware_scale[safe_device], 1.0),
        device_is_gpu=np.where(ok, cat.device_is_gpu[safe_device], False),
        kernel_launch_latency_s=masked(software_latency),
        host_overhead_s=masked(software_host),
        intra_ring_efficiency=masked(cat.link_ring_efficiency[safe_intra]),
        intra_call_latency_s=masked(cat.link_call_latency_s[safe_intra]),
        network_ring_efficiency=masked(cat.link_ring_efficiency[safe_network]),
        network_tree_efficiency=masked(cat.link_tree_efficiency[safe_network]),
        network_call_latency_s=masked(cat.link_call_latency_s[safe_network]),
        is_tuned=np.where(ok, stack == SOFTWARE_STACKS.index("tuned"), False),
        is_compiled=np.where(ok, stack == SOFTWARE_STACKS.index("compiled"), False),
        tensor_cores_need_alignment=ok & physics.needs_tensor_core_alignment(
            np.nan_to_num(np.asarray(cols["software_year"], float), nan=DEFAULT_SOFTWARE_YEAR),
            cat.device_tensor_core_generation[safe_device],
            stack == SOFTWARE_STACKS.index("tuned"),
        ),
        software_stack_index=np.where(ok, stack, -1),
        half_model=np.where(ok, half_model, False),
        uses_tensor_cores=np.where(ok, precision_peak > fp32_peak, False),
        catalogs=cat,
    )


def autocast_keeps_fp32_gradients(precision: np.ndarray, framework: np.ndarray, stack: np.ndarray, half_model: np.ndarray) -> np.ndarray:
    """Jobs whose gradients stay FP32 at a 16-bit training precision: PyTorch under autocast (the
    default ``mixed_precision``), whose parameters, and so their ``.grad``, stay FP32, and whose
    DistributedDataParallel all-reduces them as they are. A model held at half precision (apex AMP
    O2, ``model.half()``) exchanges 16-bit gradients, and so, as stated, do vendor-tuned stacks and the
    other frameworks (which of their scripts compress gradients to 16 bits is not established)."""
    sixteen_bit = np.isin(precision, ("fp16", "bf16"))
    return sixteen_bit & (framework == FRAMEWORKS.index("pytorch")) & (stack != SOFTWARE_STACKS.index("tuned")) & ~half_model


def _per_precision(precision: np.ndarray, table: dict[str, float]) -> np.ndarray:
    return map_values(precision, table, np.nan)
