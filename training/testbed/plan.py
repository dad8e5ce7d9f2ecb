"""What a collection measures: topologies, tiers, models, batch sizes and timing.

A :class:`Plan` is a list of blocks; each block is one topology (a set of
processes kept alive for the whole block) crossed with tiers, models and
batch sizes. Runs are ordered topology, tier, model, batch size, so the
processes start once per topology and the tier changes once per tier.
"""

from __future__ import annotations

from dataclasses import dataclass

from features.errors import SpecError
from training.testbed.tiers import Tier, parse_tiers

ARCHITECTURES = ("single", "allreduce-local", "allreduce-cluster", "ps-worker")
NETWORKED = ("allreduce-cluster", "ps-worker")
MODELS = ("testbed-recsys", "testbed-transformer", "testbed-resnet")
PLAN_NAMES = ("smoke", "full")

DEVICE_NAME = "cpu-host"
INTRA_NODE_LINK = "shared-memory"


@dataclass(frozen=True, order=True)
class Topology:
    """The processes of one measured architecture.

    ``workers`` processes compute gradients (1 for single); ``servers``
    parameter-server processes apply updates (ps-worker only). Networked
    architectures put every process on its own emulated host; single and
    allreduce-local put all processes on one host and talk over loopback.
    """

    architecture: str
    workers: int = 1
    servers: int = 0

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise SpecError("architecture", self.architecture, f"one of {', '.join(ARCHITECTURES)}")
        if self.workers < 1 or (self.architecture == "single" and self.workers != 1):
            raise SpecError("workers", self.workers, "1 for single, at least 1 otherwise")
        if (self.architecture == "ps-worker") != (self.servers >= 1):
            raise SpecError("parameter_servers", self.servers, "at least 1 for ps-worker, 0 otherwise")

    @property
    def processes(self) -> int:
        return self.workers + self.servers

    @property
    def networked(self) -> bool:
        return self.architecture in NETWORKED

    @property
    def hosts(self) -> int:
        """Emulated hosts (namespaces) the topology occupies."""
        return self.processes if self.networked else 1

    @property
    def label(self) -> str:
        """Short readable form: ``single``, ``allreduce-cluster/n4``, ``ps-worker/w4-s2``."""
        if self.architecture == "single":
            return "single"
        if self.architecture == "ps-worker":
            return f"ps-worker/w{self.workers}-s{self.servers}"
        return f"{self.architecture}/n{self.workers}"

    def job_columns(self) -> dict:
        """The run table's parallelism and cluster columns for this topology."""
        n = self.workers
        columns = {
            "architecture": self.architecture,
            "workers": n,
            "gpus_per_worker": 1,
            "parameter_servers": self.servers if self.architecture == "ps-worker" else None,
            "nodes": n,
            "gpu": DEVICE_NAME,
            "gpus_per_node": 1,
            "intra_node_link": INTRA_NODE_LINK,
            "nics_per_node": 1,
        }
        if self.architecture == "single":
            columns.update(nodes=1, nics_per_node=None)
        elif self.architecture == "allreduce-local":
            # One host with n devices: the catalogue's form for local all-reduce.
            columns.update(workers=1, gpus_per_worker=n, nodes=1, gpus_per_node=n, nics_per_node=None)
        return columns


@dataclass(frozen=True)
class RunConfig:
    """One measured configuration: a row of the run table."""

    topology: Topology
    model: str
    batch_size: int
    tier: Tier | None

    def __post_init__(self) -> None:
        if self.topology.networked != (self.tier is not None):
            raise SpecError("tier", self.tier, "a tier for allreduce-cluster and ps-worker, none otherwise")
        if self.batch_size < 1:
            raise SpecError("batch_size_per_gpu", self.batch_size, "a positive integer")

    @property
    def network(self) -> str | None:
        return self.tier.link_name if self.tier else None

    @property
    def run_id(self) -> str:
        """Stable id of the configuration, the run table's ``source_id``.

        ``ps-worker/w4-s2/testbed-recsys/b128/emulated-250m``; single and
        allreduce-local end in ``loopback``.
        """
        where = self.network or "loopback"
        return f"{self.topology.label}/{self.model}/b{self.batch_size}/{where}"

    @property
    def name(self) -> str:
        """Readable job name: ``testbed-recsys-ps-worker-w4-s2-b128-emulated-250m``."""
        name = f"{self.model}-{self.topology.label.replace('/', '-')}-b{self.batch_size}"
        return f"{name}-{self.network}" if self.network else name


@dataclass(frozen=True)
class Timing:
    """How each run is measured: untimed warm-up, then steps filling a time budget."""

    warmup_steps: int
    budget_s: float
    min_steps: int
    max_steps: int
    compute_probe_steps: int

    def request(self, config: RunConfig) -> dict:
        """The ``run`` command every process of the topology receives."""
        return {
            "op": "run",
            "model": config.model,
            "batch_size": config.batch_size,
            "warmup_steps": self.warmup_steps,
            "budget_s": self.budget_s,
            "min_steps": self.min_steps,
            "max_steps": self.max_steps,
            "compute_probe_steps": self.compute_probe_steps,
        }


@dataclass(frozen=True)
class Block:
    """One topology crossed with tiers (networked only), and per-model batch sizes."""

    topology: Topology
    batch_sizes: tuple[tuple[str, tuple[int, ...]], ...]
    tiers: tuple[Tier, ...] = ()

    def runs(self) -> list[RunConfig]:
        tiers: tuple[Tier | None, ...] = self.tiers if self.topology.networked else (None,)
        return [
            RunConfig(self.topology, model, batch, tier)
            for tier in tiers
            for model, batches in self.batch_sizes
            for batch in batches
        ]


@dataclass(frozen=True)
class Plan:
    name: str
    blocks: tuple[Block, ...]
    timing: Timing

    def runs(self) -> list[RunConfig]:
        return [run for block in self.blocks for run in block.runs()]

    @property
    def max_hosts(self) -> int:
        return max(block.topology.hosts for block in self.blocks)

    @property
    def tiers(self) -> tuple[Tier, ...]:
        return tuple(sorted({t for block in self.blocks for t in block.tiers}))


#: Batch sizes per model in the full plan: each model's step at batch 1x, 2x, 4x.
FULL_BATCH_SIZES = (
    ("testbed-recsys", (32, 128, 512)),
    ("testbed-transformer", (4, 8, 16)),
    ("testbed-resnet", (8, 16, 32)),
)
FULL_TIERS = ("100m", "250m", "1g", "4g")
SMOKE_TIERS = ("250m", "1g")


def make_plan(name: str) -> Plan:
    """The named plan: ``smoke`` (under a minute) or ``full`` (about 30 minutes on 2 cores).

    smoke: single, all-reduce over 2 hosts and a 2-worker/1-server parameter
    server at 250 Mbit/s and 1 Gbit/s, on the communication-bound model.
    full: every model at three batch sizes on single, allreduce-local (2 and
    4 processes), allreduce-cluster (2, 3, 4 hosts) and ps-worker (2/3/4
    workers with 1 server, 2/4 workers with 2 servers) at 100 Mbit/s,
    250 Mbit/s, 1 Gbit/s and 4 Gbit/s: 315 runs.
    """
    if name == "smoke":
        tiers = parse_tiers(SMOKE_TIERS)
        comm_bound = (("testbed-recsys", (64,)),)
        return Plan(
            "smoke",
            (
                Block(Topology("single"), (("testbed-resnet", (8,)),)),
                Block(Topology("allreduce-cluster", 2), comm_bound, tiers),
                Block(Topology("ps-worker", 2, 1), comm_bound, tiers),
            ),
            Timing(warmup_steps=1, budget_s=0.5, min_steps=5, max_steps=40, compute_probe_steps=2),
        )
    if name == "full":
        tiers = parse_tiers(FULL_TIERS)
        blocks = [Block(Topology("single"), FULL_BATCH_SIZES)]
        blocks += [Block(Topology("allreduce-local", n), FULL_BATCH_SIZES) for n in (2, 4)]
        blocks += [Block(Topology("allreduce-cluster", n), FULL_BATCH_SIZES, tiers) for n in (2, 3, 4)]
        blocks += [
            Block(Topology("ps-worker", w, s), FULL_BATCH_SIZES, tiers) for w, s in ((2, 1), (3, 1), (4, 1), (2, 2), (4, 2))
        ]
        return Plan(
            "full",
            tuple(blocks),
            Timing(warmup_steps=2, budget_s=1.5, min_steps=5, max_steps=60, compute_probe_steps=3),
        )
    raise SpecError("plan", name, f"one of {', '.join(PLAN_NAMES)}")
