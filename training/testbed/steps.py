"""Training steps of each testbed architecture, run inside one process.

Every process runs torch with one thread. A run builds the model from a
fixed seed, runs ``warmup_steps`` untimed steps, agrees with the other
processes on a step count that fills ``budget_s`` (rank 0 decides from its
last warm-up step, clamped to ``[min_steps, max_steps]``, and broadcasts it)
and times that many steps. Per step it records wall time, the time in
forward and backward (compute) and the time waiting on gradient exchange
(communication), as this process observes them.

* single: SGD on one process; communication is zero.
* allreduce: DistributedDataParallel over gloo; gradient all-reduce
  overlaps backward, so compute comes from ``compute_probe_steps`` extra
  forward/backward passes under ``no_sync()`` (no exchange) and
  communication is the step time not explained by them.
* ps-worker: workers push their whole flat gradient, split into one
  contiguous shard per server, and pull the updated shards; each server
  averages its shard over all workers and applies the SGD update
  (synchronous parameter server, point-to-point gloo messages).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from features.model_defs.testbed import testbed_model

LEARNING_RATE = 0.01
MODEL_SEED = 0
BATCH_SEED = 1


@dataclass(frozen=True)
class RunRequest:
    """What one run measures and how long it may take."""

    model: str
    batch_size: int
    warmup_steps: int
    budget_s: float
    min_steps: int
    max_steps: int
    compute_probe_steps: int

    @classmethod
    def from_dict(cls, data: dict) -> "RunRequest":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def _now() -> float:
    return time.perf_counter()


def step_count(last_step_s: float, request: RunRequest) -> int:
    """Timed steps that fill the run's time budget, within its bounds."""
    wanted = math.ceil(request.budget_s / max(last_step_s, 1e-6))
    return max(request.min_steps, min(request.max_steps, wanted))


def _agree(n_steps: int, distributed: bool) -> int:
    if not distributed:
        return n_steps
    value = torch.tensor([n_steps], dtype=torch.int64)
    dist.broadcast(value, src=0)
    return int(value.item())


def _timed(step, request: RunRequest, distributed: bool) -> dict:
    last = None
    for _ in range(request.warmup_steps):
        last = step()
    n_steps = _agree(step_count(last[0] if last else request.budget_s, request), distributed)
    records = [step() for _ in range(n_steps)]
    return {
        "step_s": [r[0] for r in records],
        "compute_s": [r[1] for r in records],
        "comm_s": [r[2] for r in records],
    }


def run_single(request: RunRequest) -> dict:
    spec = testbed_model(request.model)
    model = spec.build(MODEL_SEED)
    batch = spec.make_batch(request.batch_size, BATCH_SEED)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    def step():
        start = _now()
        optimizer.zero_grad(set_to_none=False)
        spec.loss(model, batch).backward()
        computed = _now()
        optimizer.step()
        return _now() - start, computed - start, 0.0

    return _timed(step, request, distributed=False)


def run_allreduce(request: RunRequest) -> dict:
    spec = testbed_model(request.model)
    model = DistributedDataParallel(spec.build(MODEL_SEED))
    batch = spec.make_batch(request.batch_size, BATCH_SEED + dist.get_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    def step():
        start = _now()
        optimizer.zero_grad(set_to_none=False)
        spec.loss(model, batch).backward()
        optimizer.step()
        elapsed = _now() - start
        return elapsed, float("nan"), float("nan")

    result = _timed(step, request, distributed=True)
    probes = []
    for _ in range(request.compute_probe_steps):
        optimizer.zero_grad(set_to_none=False)
        start = _now()
        with model.no_sync():
            spec.loss(model, batch).backward()
        probes.append(_now() - start)
    result["compute_probe_s"] = probes
    del model, optimizer
    return result


def _flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def shard_bounds(n_elements: int, servers: int) -> list[tuple[int, int]]:
    """Contiguous element ranges of the flat parameter vector, one per server, sizes within 1."""
    base, extra = divmod(n_elements, servers)
    bounds, start = [], 0
    for s in range(servers):
        end = start + base + (1 if s < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def run_ps_worker(request: RunRequest, workers: int, servers: int) -> dict:
    spec = testbed_model(request.model)
    model = spec.build(MODEL_SEED)
    params = list(model.parameters())
    batch = spec.make_batch(request.batch_size, BATCH_SEED + dist.get_rank())
    bounds = shard_bounds(sum(p.numel() for p in params), servers)
    weights = _flat_params(model).clone()

    def step():
        start = _now()
        for p in params:
            p.grad = None
        spec.loss(model, batch).backward()
        computed = _now()
        grads = torch.cat([p.grad.reshape(-1) for p in params])
        requests = []
        for s, (lo, hi) in enumerate(bounds):
            requests.append(dist.isend(grads[lo:hi], dst=workers + s))
            requests.append(dist.irecv(weights[lo:hi], src=workers + s))
        for r in requests:
            r.wait()
        torch.nn.utils.vector_to_parameters(weights, params)
        end = _now()
        return end - start, computed - start, end - computed

    return _timed(step, request, distributed=True)


def run_ps_server(request: RunRequest, workers: int, servers: int, server_index: int) -> dict:
    spec = testbed_model(request.model)
    flat = _flat_params(spec.build(MODEL_SEED))
    lo, hi = shard_bounds(flat.numel(), servers)[server_index]
    shard = flat[lo:hi].clone()
    received = [torch.empty_like(shard) for _ in range(workers)]

    def step():
        start = _now()
        for r in [dist.irecv(received[w], src=w) for w in range(workers)]:
            r.wait()
        pushed = _now()
        shard.add_(torch.stack(received).sum(dim=0), alpha=-LEARNING_RATE / workers)
        updated = _now()
        for r in [dist.isend(shard, dst=w) for w in range(workers)]:
            r.wait()
        end = _now()
        return end - start, updated - pushed, (pushed - start) + (end - updated)

    return _timed(step, request, distributed=True)


def time_allreduce(sizes_bytes: list[int], repeats: int, warmup: int = 3) -> dict[str, list[float]]:
    """Wall time of each of ``repeats`` gloo all-reduces (sum) of a float32 tensor of each size, after ``warmup``.

    Every rank runs the same sequence; a barrier before each timed call lets
    no rank start its clock while another is still in the last one.
    """
    out: dict[str, list[float]] = {}
    for size in sizes_bytes:
        tensor = torch.zeros(max(1, size // 4), dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        times = []
        for _ in range(repeats):
            dist.barrier()
            start = _now()
            dist.all_reduce(tensor)
            times.append(_now() - start)
        out[str(size)] = times
    return out
