"""The processes of one topology, started in their namespaces and kept alive across runs."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from training.testbed.netns import INNER_IFNAME, EmulatedNetwork
from training.testbed.plan import Topology

REPO_ROOT = Path(__file__).resolve().parents[2]
INIT_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 600.0
EXIT_TIMEOUT_S = 10.0


class TestbedRunError(RuntimeError):
    """A testbed process failed, died or did not answer in time."""


def roles(topology: Topology) -> list[str]:
    """The role of each rank: workers first, then parameter servers."""
    if topology.architecture == "single":
        return ["single"]
    if topology.architecture == "ps-worker":
        return ["ps-worker"] * topology.workers + ["ps-server"] * topology.servers
    return ["allreduce"] * topology.workers


class ProcessSet:
    """One process per rank of ``topology``, each in its emulated host; a context manager.

    Networked topologies put rank ``r`` on host ``r`` and rendezvous at host
    0's address; the others put every rank on host 0 and use loopback.
    Each process's stderr goes to a log file whose tail is quoted when the
    process fails; the logs are removed after a clean close.
    """

    def __init__(self, topology: Topology, network: EmulatedNetwork, port: int):
        self.topology = topology
        self.network = network
        self.port = port
        self.roles = roles(topology)
        self.log_dir = Path(tempfile.mkdtemp(prefix="testbed-logs-"))
        self._procs: list[subprocess.Popen] = []
        self._answers: queue.Queue = queue.Queue()  # (rank, line or None at end of output)
        self._logs: list[Path] = []
        self.init_replies: list[dict] = []

    def __enter__(self) -> "ProcessSet":
        try:
            self._start()
        except BaseException as error:
            self.close(clean=False, keep_logs=not isinstance(error, KeyboardInterrupt))
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Logs are kept after a failure (its message names them), not after an interrupt.
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        self.close(clean=exc_type is None, keep_logs=exc_type is not None and not interrupted)

    def _start(self) -> None:
        networked = self.topology.networked
        env = dict(os.environ)
        env.update(
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            GLOO_SOCKET_IFNAME=INNER_IFNAME if networked else "lo",
            PYTHONUNBUFFERED="1",
        )
        for rank, role in enumerate(self.roles):
            host = rank if networked else 0
            log = self.log_dir / f"rank{rank}-{role}.log"
            with open(log, "w") as stderr:
                proc = subprocess.Popen(
                    self.network.exec_prefix(host) + [sys.executable, "-m", "training.testbed.proc"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                    cwd=REPO_ROOT,
                    env=env,
                    start_new_session=True,  # Ctrl-C reaches the collector only; it stops these.
                )
            threading.Thread(target=_pump, args=(rank, proc.stdout, self._answers), daemon=True).start()
            self._procs.append(proc)
            self._logs.append(log)
        master = self.network.address(0) if networked else "127.0.0.1"
        commands = [
            {
                "op": "init",
                "role": role,
                "rank": rank,
                "world_size": len(self.roles),
                "master_addr": master,
                "master_port": self.port,
                "workers": self.topology.workers,
                "servers": self.topology.servers,
            }
            for rank, role in enumerate(self.roles)
        ]
        self.init_replies = self._exchange(commands, INIT_TIMEOUT_S)

    def run(self, request: dict, timeout_s: float = RUN_TIMEOUT_S) -> list[dict]:
        """Send ``request`` to every rank; their answers in rank order."""
        return self._exchange([request] * len(self._procs), timeout_s)

    def _exchange(self, commands: list[dict], timeout_s: float) -> list[dict]:
        for proc, command in zip(self._procs, commands):
            try:
                proc.stdin.write(json.dumps(command) + "\n")
                proc.stdin.flush()
            except BrokenPipeError:
                pass  # reported below with the process's log
        # One queue for all ranks, so a failure anywhere surfaces at once rather
        # than after the others time out in a collective waiting for it.
        deadline = time.monotonic() + timeout_s
        replies: dict[int, dict] = {}
        while len(replies) < len(self._procs):
            try:
                rank, line = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                silent = min(set(range(len(self._procs))) - set(replies))
                raise TestbedRunError(self._failure(silent, f"no answer within {timeout_s:.0f} s")) from None
            if line is None:
                raise TestbedRunError(self._failure(rank, "exited"))
            reply = json.loads(line)
            if not reply.get("ok"):
                raise TestbedRunError(self._failure(rank, "failed:\n" + reply.get("error", "")))
            replies[rank] = reply
        return [replies[rank] for rank in range(len(self._procs))]

    def _failure(self, rank: int, what: str) -> str:
        tail = self._logs[rank].read_text(errors="replace")[-2000:] if self._logs[rank].exists() else ""
        return (
            f"{self.topology.label} rank {rank} ({self.roles[rank]}) {what}\n"
            f"log {self._logs[rank]}:\n{tail}"
        )

    def close(self, clean: bool = True, keep_logs: bool = False) -> None:
        """Ask every process to exit (``clean``) or kill it at once; drop the logs unless ``keep_logs``."""
        for proc in self._procs:
            if proc.poll() is None and clean:
                try:
                    proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                    proc.stdin.flush()
                except (BrokenPipeError, OSError):
                    pass
        deadline = time.monotonic() + (EXIT_TIMEOUT_S if clean else 0.0)
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdin:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        self._procs.clear()
        if not keep_logs:
            shutil.rmtree(self.log_dir, ignore_errors=True)


def _pump(rank: int, stream, answers: queue.Queue) -> None:
    for line in stream:
        answers.put((rank, line))
    answers.put((rank, None))
