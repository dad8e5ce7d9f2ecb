"""Microbenchmarks that put the testbed host into the hardware catalogue.

The host is a device (``cpu-host``) whose peak is what one process with one
torch thread reaches, since every testbed process runs that way:

* FP32 FLOP/s: median over repeats of a 1024 x 1024 x 1024 matmul
  (2 * 1024**3 FLOPs each);
* memory bandwidth: median over repeats of a STREAM-triad-like
  ``a = b + s * c`` over three 64 Mi-element float32 arrays, counted as
  3 * 256 MiB of DRAM traffic (two reads, one write).

* per-operator and per-step cost of an eager training step: two small
  MLPs (:data:`DISPATCH_PROBE_LAYERS` layers of ``Linear(4, 4)`` and ReLU,
  batch 4, too small for their arithmetic to matter) train as the testbed
  trains (zero the gradients, forward, backward, SGD step); their kernels
  are counted as the workload catalogue counts them
  (:func:`features.op_counting.count_step_ops`), and the line through the
  two (kernels, median step time) points gives the cost per counted kernel
  (its slope) and the step's fixed cost (its intercept). They replace the
  software catalogue's GPU figures (a CUDA launch, a device
  synchronisation) for jobs on the host.

The links are ``shared-memory`` (what processes on one host use: gloo's
loopback TCP, measured as goodput and one-way latency between two
processes) and one ``emulated-<rate>`` network link per tier, whose
bandwidth is the configured ``tc`` rate and whose latency is measured
between two emulated hosts at that tier.

``calibrate-collectives`` measures what gloo's all-reduce makes of each
link (:func:`calibrate_collectives`): two testbed processes (on one host
for ``shared-memory``, on two emulated hosts for a tier) time bare
all-reduces of a small and a large message, and the ring model of
:func:`features.physics.ring_allreduce_s` with two ranks,
``t = S / (efficiency * bw) + 2 * latency + call latency``, solved at the
two sizes gives the link's bus-bandwidth efficiency and gloo's fixed cost
per call. Over several rounds, each link's entry in
``catalog/collectives.json`` takes its median efficiency and one fixed cost,
the median over every link and round (it does not depend on the link).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from features.hardware import HARDWARE_DIR
from features.catalog_base import CATALOG_DIR
from training.testbed.netns import EmulatedNetwork, check_available
from training.testbed.plan import DEVICE_NAME, FULL_TIERS, INTRA_NODE_LINK, SMOKE_TIERS
from training.testbed.tiers import Tier, parse_tiers

HARDWARE_PATH = HARDWARE_DIR / "testbed.json"
COLLECTIVES_PATH = CATALOG_DIR / "collectives.json"
MATMUL_N = 1024
TRIAD_ELEMENTS = 64 * 2**20
PROBE_PORT = 5201
COMMAND = "python -m training.testbed calibrate"
COLLECTIVES_COMMAND = "python -m training.testbed calibrate-collectives"
#: The small message of the all-reduce probe (its time is almost all fixed cost).
SMALL_MESSAGE_BYTES = 4096
#: The large message moves for about this long at the link's rate, within the bounds below.
LARGE_MESSAGE_S = 0.25
LARGE_MESSAGE_BOUNDS_BYTES = (2**20, 16 * 2**20)
PROBE_REPEATS = {"small": 30, "large": 7}
#: Rounds of the host benchmarks and the loopback probe (the host's speed drifts; the figures are medians).
HOST_ROUNDS = 3
#: Rounds of the all-reduce probes (the call cost varies from run to run; the figures are medians over rounds).
COLLECTIVE_ROUNDS = 5
#: Layers of the two MLPs whose training steps give the per-kernel and per-step costs.
DISPATCH_PROBE_LAYERS = (2, 64)
DISPATCH_PROBE_STEPS = 200
#: The tiers the plans use.
DEFAULT_TIERS = parse_tiers(FULL_TIERS + SMOKE_TIERS)


@dataclass(frozen=True)
class DispatchProbe:
    """Counted kernels and median step time of two small training steps, and the line through them."""

    kernels: tuple[float, float]
    step_s: tuple[float, float]

    @property
    def per_kernel_s(self) -> float:
        """Seconds per counted kernel: the slope between the two steps."""
        return (self.step_s[1] - self.step_s[0]) / (self.kernels[1] - self.kernels[0])

    @property
    def step_overhead_s(self) -> float:
        """Seconds per step beyond its kernels: the intercept (at least 0)."""
        return max(0.0, self.step_s[0] - self.kernels[0] * self.per_kernel_s)


@dataclass(frozen=True)
class HostBenchmark:
    """Single-thread FP32 matmul FLOP/s and triad memory bandwidth, medians of ``repeats``; the dispatch probe."""

    fp32_flops_per_s: float
    memory_bw_bytes_per_s: float
    repeats: int
    torch_version: str
    dispatch: DispatchProbe
    #: Per-round FLOP/s and bandwidths where this is the median of several rounds (:func:`median_benchmark`).
    fp32_rounds: tuple[float, ...] = ()
    bw_rounds: tuple[float, ...] = ()


def median_benchmark(rounds: list[HostBenchmark]) -> HostBenchmark:
    """Each figure's median over rounds of :func:`benchmark_host` (the host's speed drifts from minute to minute)."""
    med = statistics.median
    dispatch = DispatchProbe(
        rounds[0].dispatch.kernels,
        (med(b.dispatch.step_s[0] for b in rounds), med(b.dispatch.step_s[1] for b in rounds)),
    )
    return HostBenchmark(
        fp32_flops_per_s=med(b.fp32_flops_per_s for b in rounds),
        memory_bw_bytes_per_s=med(b.memory_bw_bytes_per_s for b in rounds),
        repeats=rounds[0].repeats,
        torch_version=rounds[0].torch_version,
        dispatch=dispatch,
        fp32_rounds=tuple(b.fp32_flops_per_s for b in rounds),
        bw_rounds=tuple(b.memory_bw_bytes_per_s for b in rounds),
    )


@dataclass(frozen=True)
class LinkProbe:
    """One-way latency (half the median 1-byte TCP round trip) and median bulk TCP goodput."""

    latency_s: float
    goodput_bytes_per_s: float


def benchmark_host(repeats: int = 9) -> HostBenchmark:
    """Run the matmul and triad benchmarks in this process with one torch thread."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(MATMUL_N, MATMUL_N)
    b = torch.randn(MATMUL_N, MATMUL_N)
    torch.mm(a, b)
    matmul_s = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        matmul_s.append(time.perf_counter() - start)
    x = torch.ones(TRIAD_ELEMENTS)
    y = torch.ones(TRIAD_ELEMENTS)
    z = torch.empty(TRIAD_ELEMENTS)
    torch.add(x, y, alpha=3.0, out=z)
    triad_s = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.add(x, y, alpha=3.0, out=z)
        triad_s.append(time.perf_counter() - start)
    triad_bytes = 3 * TRIAD_ELEMENTS * 4
    return HostBenchmark(
        fp32_flops_per_s=2 * MATMUL_N**3 / statistics.median(matmul_s),
        memory_bw_bytes_per_s=triad_bytes / statistics.median(triad_s),
        repeats=repeats,
        torch_version=torch.__version__,
        dispatch=probe_dispatch(repeats),
    )


def _mlp_probe(layers: int):
    import torch
    from torch import nn

    from features.model_defs.recipe import Probe

    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(4, 4), nn.ReLU())])
    return Probe(model=model, make_batch=lambda b: torch.randn(b, 4), loss=lambda m, x: m(x).square().mean())


def probe_dispatch(repeats: int = 9, steps: int = DISPATCH_PROBE_STEPS) -> DispatchProbe:
    """Time the two MLPs' training steps (one torch thread) and count their kernels as the catalogue does."""
    import torch

    from features.op_counting import count_step_ops

    torch.set_num_threads(1)
    kernels, step_s = [], []
    for layers in DISPATCH_PROBE_LAYERS:
        probe = _mlp_probe(layers)
        counted = count_step_ops(probe, 4).counts
        kernels.append(float(sum(c.kernels for c in counted.values())))
        batch = probe.make_batch(4)
        optimizer = torch.optim.SGD(probe.model.parameters(), lr=0.01)

        def step():
            optimizer.zero_grad(set_to_none=False)
            probe.loss(probe.model, batch).backward()
            optimizer.step()

        for _ in range(steps // 4):
            step()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times.append((time.perf_counter() - start) / steps)
        step_s.append(statistics.median(times))
    return DispatchProbe((kernels[0], kernels[1]), (step_s[0], step_s[1]))


def probe_link(network: EmulatedNetwork, server_host: int, client_host: int, bulk_bytes: int) -> LinkProbe:
    """TCP probe from ``client_host`` to ``server_host`` (the same host probes loopback)."""
    address = "127.0.0.1" if server_host == client_host else network.address(server_host)
    module = [sys.executable, "-m", "training.testbed.netprobe"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    server = subprocess.Popen(
        network.exec_prefix(server_host) + module + ["serve", str(PROBE_PORT)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        server.stdout.readline()
        out = subprocess.run(
            network.exec_prefix(client_host) + module + ["probe", address, str(PROBE_PORT), str(bulk_bytes)],
            capture_output=True, text=True, env=env, timeout=120, check=True,
        )  # fmt: skip
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    result = json.loads(out.stdout)
    return LinkProbe(statistics.median(result["rtt_s"]) / 2, statistics.median(result["goodput_bytes_per_s"]))


def _meminfo_bytes() -> float:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    raise RuntimeError("MemTotal missing from /proc/meminfo")


def _cpu_model() -> tuple[str, str]:
    vendor, model = "unknown", platform.processor() or "unknown"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id":
                vendor = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(value.strip(), value.strip())
            elif key.strip() == "model name":
                model = value.strip()
                break
    return vendor, model


def catalogue_entries(bench: HostBenchmark, loopback: LinkProbe, tiers: dict[Tier, LinkProbe], host: str, date: str) -> dict:
    """The ``{"devices": [...], "links": [...]}`` document of ``testbed.json``."""
    vendor, model = _cpu_model()
    where = f"`{COMMAND}` on {host}, {date}"
    d = bench.dispatch
    rounds = ""
    if len(bench.fp32_rounds) > 1:
        rounds = (
            f"; each figure the median of {len(bench.fp32_rounds)} rounds (FLOP/s {min(bench.fp32_rounds) / 1e9:.1f}-"
            f"{max(bench.fp32_rounds) / 1e9:.1f} G, bandwidth {min(bench.bw_rounds) / 1e9:.1f}-{max(bench.bw_rounds) / 1e9:.1f} GB/s)"
        )
    device = {
        "name": DEVICE_NAME,
        "kind": "cpu",
        "family": DEVICE_NAME,
        "vendor": vendor,
        "architecture": model,
        "form_factor": f"{os.cpu_count()}-core host",
        "peak_fp32_flops_per_s": round(bench.fp32_flops_per_s, -6),
        "memory_bw_bytes_per_s": round(bench.memory_bw_bytes_per_s, -6),
        "memory_bytes": int(_meminfo_bytes()),
        "host_link": INTRA_NODE_LINK,
        "default_intra_node_link": INTRA_NODE_LINK,
        "cores": os.cpu_count(),
        "kernel_launch_latency_s": float(f"{d.per_kernel_s:.3g}"),
        "host_overhead_s": float(f"{d.step_overhead_s:.3g}"),
        "provenance": "measured",
        "source": (
            f"{where}: median of {bench.repeats} single-thread fp32 {MATMUL_N}^3 matmuls (torch "
            f"{bench.torch_version}, 1 thread) and of {bench.repeats} single-thread triads a = b + s*c "
            f"over 3 x {TRIAD_ELEMENTS * 4 // 2**20} MiB arrays; kernel_launch_latency_s and host_overhead_s: "
            f"training steps (zero_grad, forward, backward, SGD) of {DISPATCH_PROBE_LAYERS[0]}- and "
            f"{DISPATCH_PROBE_LAYERS[1]}-layer Linear(4, 4) MLPs at batch 4, {d.kernels[0]:.0f} and {d.kernels[1]:.0f} "
            f"counted kernels, medians of {bench.repeats} x {DISPATCH_PROBE_STEPS} steps {d.step_s[0] * 1e6:.0f} and "
            f"{d.step_s[1] * 1e6:.0f} us: the line through them, slope per kernel and intercept per step{rounds}"
        ),
        "notes": (
            f"One testbed process (one torch thread). The host's {os.cpu_count()} cores (cores: os.cpu_count() on "
            "the host) are shared by all processes of a run, on every emulated host, so runs with more processes "
            "than cores see less than this per process. "
            "memory_bytes is the host's total RAM."
        ),
    }
    links = [
        {
            "name": INTRA_NODE_LINK,
            "kind": "shared-memory",
            "bw_bytes_per_s": round(loopback.goodput_bytes_per_s, -6),
            "latency_s": float(f"{loopback.latency_s:.3g}"),
            "provenance": "measured",
            "source": (
                f"{where}: median TCP goodput of 3 bulk transfers and half the median 1-byte round trip "
                "between two processes over loopback, the path gloo takes between processes on one host"
                + (f"; medians over {len(bench.fp32_rounds)} rounds" if len(bench.fp32_rounds) > 1 else "")
            ),
            "notes": "Processes on one testbed host; single and allreduce-local runs use it.",
        }
    ]
    for tier, probe in tiers.items():
        links.append(
            {
                "name": tier.link_name,
                "kind": "network",
                "bw_bytes_per_s": tier.bw_bytes_per_s,
                "latency_s": float(f"{probe.latency_s:.3g}"),
                "provenance": "configured",
                "source": (
                    f"{tier.describe()} (bandwidth configured); latency measured by {where} as half the "
                    "median 1-byte TCP round trip between two emulated hosts"
                ),
                "notes": (
                    f"Emulated per-host NIC, each direction. Measured TCP goodput "
                    f"{probe.goodput_bytes_per_s / 1e6:.1f} MB/s ({probe.goodput_bytes_per_s / tier.bw_bytes_per_s:.0%} "
                    "of the rate)."
                ),
            }
        )
    return {"devices": [device], "links": links}


def calibrate(tiers: tuple[Tier, ...], out_path: Path = HARDWARE_PATH, rounds: int = HOST_ROUNDS, progress=print) -> dict:
    """Benchmark the host (``rounds`` times: medians) and its links and write the catalogue file ``out_path``."""
    check_available()
    host = socket.gethostname()
    date = datetime.now(timezone.utc).date().isoformat()
    progress(f"calibrate: host benchmarks on {host} (one thread), {rounds} round{'s' if rounds > 1 else ''}")
    benches = []
    for _ in range(rounds):
        benches.append(benchmark_host())
        b = benches[-1]
        progress(
            f"  fp32 {b.fp32_flops_per_s / 1e9:.1f} GFLOP/s, triad {b.memory_bw_bytes_per_s / 1e9:.1f} GB/s, "
            f"{b.dispatch.per_kernel_s * 1e6:.2f} us per kernel, {b.dispatch.step_overhead_s * 1e6:.0f} us per step"
        )
    bench = median_benchmark(benches)
    with EmulatedNetwork(2) as network:
        loopbacks = [probe_link(network, 0, 0, bulk_bytes=256 * 2**20) for _ in range(rounds)]
        loopback = LinkProbe(
            statistics.median(p.latency_s for p in loopbacks), statistics.median(p.goodput_bytes_per_s for p in loopbacks)
        )
        progress(f"  shared-memory: {loopback.goodput_bytes_per_s / 1e6:.0f} MB/s, {loopback.latency_s * 1e6:.0f} us")
        probes = {}
        for tier in tiers:
            network.set_tier(tier)
            probes[tier] = probe_link(network, 1, 0, bulk_bytes=max(2**20, int(tier.bw_bytes_per_s * 0.5)))
            progress(
                f"  {tier.link_name}: {probes[tier].goodput_bytes_per_s / 1e6:.1f} MB/s goodput, "
                f"{probes[tier].latency_s * 1e6:.0f} us"
            )
    document = catalogue_entries(bench, loopback, probes, host, date)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    progress(f"calibrate: wrote {out_path}")
    return document



@dataclass(frozen=True)
class CollectiveProbe:
    """Medians of bare two-rank gloo all-reduces of two sizes over one link, and the ring model solved at them."""

    link: str
    bw_bytes_per_s: float
    latency_s: float
    small_bytes: int
    small_s: float
    large_bytes: int
    large_s: float

    @property
    def efficiency(self) -> float:
        """Bus bandwidth over the link's: the large message's extra bytes over its extra time, over ``bw``."""
        return (self.large_bytes - self.small_bytes) / ((self.large_s - self.small_s) * self.bw_bytes_per_s)

    @property
    def call_latency_s(self) -> float:
        """The small message's time less its two hops and its bytes at the measured bus bandwidth (at least 0)."""
        bytes_s = self.small_bytes / (self.efficiency * self.bw_bytes_per_s)
        return max(0.0, self.small_s - 2 * self.latency_s - bytes_s)


def large_message_bytes(bw_bytes_per_s: float) -> int:
    """About :data:`LARGE_MESSAGE_S` of the link's rate, in whole MiB within :data:`LARGE_MESSAGE_BOUNDS_BYTES`."""
    low, high = LARGE_MESSAGE_BOUNDS_BYTES
    wanted = int(bw_bytes_per_s * LARGE_MESSAGE_S) // 2**20 * 2**20
    return min(high, max(low, wanted))


def probe_allreduce(network: EmulatedNetwork, topology, link: str, bw_bytes_per_s: float, latency_s: float, port: int) -> CollectiveProbe:
    """Two testbed processes of ``topology`` time all-reduces of the small and the large message; rank 0's medians."""
    from training.testbed.processes import ProcessSet

    large = large_message_bytes(bw_bytes_per_s)
    medians = {}
    with ProcessSet(topology, network, port) as processes:
        for label, size in (("small", SMALL_MESSAGE_BYTES), ("large", large)):
            replies = processes.run({"op": "allreduce-probe", "sizes_bytes": [size], "repeats": PROBE_REPEATS[label]})
            medians[label] = statistics.median(replies[0]["seconds"][str(size)])
    return CollectiveProbe(link, bw_bytes_per_s, latency_s, SMALL_MESSAGE_BYTES, medians["small"], large, medians["large"])


def pooled_call_latency_s(probes: list[CollectiveProbe]) -> float:
    """gloo's fixed cost per call on this host: the median over every round of every link.

    It does not depend on the link (a 4 KiB all-reduce between two processes
    costs the same over loopback as over an emulated 100 Mbit/s tier) and is
    bimodal from run to run on a 2-core host (about 0.5 or 3 ms), so one
    pooled median describes it better than one figure per link.
    """
    return statistics.median(p.call_latency_s for p in probes)


def collective_entry(probes: list[CollectiveProbe], call_latency_s: float, host: str, date: str) -> dict:
    """One link's ``links`` entry of ``collectives.json``: its median bus efficiency over rounds and the pooled call cost."""
    first = probes[0]
    efficiencies = sorted(p.efficiency for p in probes)
    median = statistics.median(efficiencies)
    efficiency = round(min(1.0, median), 3)
    rounds = len(probes)
    small = statistics.median(p.small_s for p in probes)
    large = statistics.median(p.large_s for p in probes)
    return {
        "name": first.link,
        "ring_bus_bw_efficiency": efficiency,
        # gloo runs a ring whatever the size; with two ranks a tree is the same exchange.
        "tree_bus_bw_efficiency": efficiency,
        "call_latency_s": float(f"{call_latency_s:.3g}"),
        "provenance": "measured",
        "source": (
            f"`{COLLECTIVES_COMMAND}` on {host}, {date}, {rounds} round{'s' if rounds > 1 else ''}: two testbed processes "
            f"(one torch thread each) time bare gloo all-reduces of {first.small_bytes} B (median of "
            f"{PROBE_REPEATS['small']} per round; {small * 1e3:.3f} ms over rounds) and {first.large_bytes // 2**20} MiB "
            f"(median of {PROBE_REPEATS['large']}; {large * 1e3:.1f} ms); the two-rank ring model solved at both sizes "
            f"gives a bus bandwidth of {efficiencies[0]:.0%} to {efficiencies[-1]:.0%} of the link's "
            f"{first.bw_bytes_per_s / 1e6:.0f} MB/s (median {median:.0%}"
            + (", capped at 1" if median > 1 else "")
            + f"); fixed cost per call: the median over every link and round ({call_latency_s * 1e3:.2f} ms), "
            "since it does not depend on the link"
        ),
    }


def update_collectives(entries: list[dict], path: Path = COLLECTIVES_PATH) -> dict:
    """Replace (or add) the named links' entries of ``collectives.json``; every other entry stays as it is."""
    document = json.loads(path.read_text(encoding="utf-8"))
    names = {e["name"] for e in entries}
    kept = [e for e in document["links"] if e["name"] not in names]
    document["links"] = kept + entries
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return document


def calibrate_collectives(
    tiers: tuple[Tier, ...], path: Path | None = None, rounds: int = COLLECTIVE_ROUNDS, progress=print
) -> list[CollectiveProbe]:
    """Probe gloo's all-reduce over the host's loopback and each tier, ``rounds`` times; write the links' entries to ``path`` if given.

    Link bandwidths and latencies are the hardware catalogue's (``calibrate``),
    so the efficiency is of the same figure the physics divides by.
    """
    from features.hardware import hardware_catalog
    from training.testbed.plan import Topology

    check_available()
    host = socket.gethostname()
    date = datetime.now(timezone.utc).date().isoformat()
    links = hardware_catalog().links
    probes: list[CollectiveProbe] = []
    with EmulatedNetwork(2) as network:
        chosen = [(None, INTRA_NODE_LINK, Topology("allreduce-local", workers=2))]
        chosen += [(tier, tier.link_name, Topology("allreduce-cluster", workers=2)) for tier in tiers]
        for r in range(rounds):
            progress(f"  round {r + 1} of {rounds}")
            for i, (tier, name, topology) in enumerate(chosen):
                if tier is not None:
                    network.set_tier(tier)
                link = links.get(name, "link")
                port = PROBE_PORT + 1 + r * len(chosen) + i
                probe = probe_allreduce(network, topology, name, link.bw_bytes_per_s, link.latency_s, port)
                probes.append(probe)
                progress(
                    f"    {name}: {probe.small_s * 1e3:.3f} ms at {probe.small_bytes} B, {probe.large_s * 1e3:.1f} ms at "
                    f"{probe.large_bytes // 2**20} MiB: efficiency {probe.efficiency:.2f}, call {probe.call_latency_s * 1e3:.3f} ms"
                )
    call = pooled_call_latency_s(probes)
    by_link = {name: [p for p in probes if p.link == name] for _, name, _ in chosen}
    for name, mine in by_link.items():
        efficiencies = [p.efficiency for p in mine]
        progress(f"  {name}: efficiency median {statistics.median(efficiencies):.2f} ({min(efficiencies):.2f}-{max(efficiencies):.2f})")
    progress(f"  call cost, every link and round: median {call * 1e3:.2f} ms")
    if path is not None:
        update_collectives([collective_entry(mine, call, host, date) for mine in by_link.values()], path)
        progress(f"calibrate-collectives: wrote {path}")
    return probes
