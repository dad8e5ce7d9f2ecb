"""Emulated hosts: one Linux network namespace per host, joined by a bridge.

Each host ``i`` is the namespace ``<prefix>-h<i>`` with one interface
``eth0`` (address ``10.213.0.<i+2>/24``), the inner end of a veth pair
whose outer end ``<prefix>h<i>`` is a port of the bridge ``<prefix>br``.
A tier installs a ``tc`` token bucket on both ends: on ``eth0`` it limits
what the host sends, on the bridge port what the host receives, so every
host has a NIC of the tier's rate in each direction and a parameter server
receiving from many workers is limited by its own NIC, as on a real switch.

``<prefix>`` is ``pdtb`` followed by the owning process id in base 36 and
a per-process counter, so leftovers of a collector that died without
cleaning up are recognised (their process is gone) and removed, while the
namespaces of a collection still running are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import count

from training.testbed.tiers import Tier

NAME_PREFIX = "pdtb"
SUBNET = "10.213.0"
INNER_IFNAME = "eth0"

_PREFIX_RE = re.compile(rf"^{NAME_PREFIX}([0-9a-z]{{5}})[0-9a-z]")
_instances = count()
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


class TestbedUnavailable(RuntimeError):
    """The host cannot emulate a network: not root, or ``ip``/``tc`` missing."""


def _base36(value: int, width: int) -> str:
    digits = ""
    while value:
        value, digit = divmod(value, 36)
        digits = _BASE36[digit] + digits
    return digits.rjust(width, "0")[-width:]


def check_available() -> None:
    """Raise :class:`TestbedUnavailable` with a one-line reason unless namespaces and tc can be used."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        raise TestbedUnavailable("the testbed needs Linux network namespaces")
    if os.geteuid() != 0:
        raise TestbedUnavailable("the testbed needs root to create network namespaces and tc qdiscs")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise TestbedUnavailable(f"the testbed needs {' and '.join(missing)} (iproute2) on PATH")
    lacking = [name for name, bit in _CAPABILITIES.items() if not _effective_capabilities() >> bit & 1]
    if lacking:
        raise TestbedUnavailable(
            f"the testbed needs {' and '.join(lacking)} to create namespaces and qdiscs (root without them, "
            "as in an unprivileged container, is not enough)"
        )


#: Capability bits (linux/capability.h) that ``ip netns add`` and ``tc`` need.
_CAPABILITIES = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21}


def _effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip()}")
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def list_links() -> list[str]:
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def testbed_names(prefix: str = NAME_PREFIX) -> list[str]:
    """Namespaces and links in the root namespace whose name starts with ``prefix``."""
    return [n for n in list_namespaces() + list_links() if n.startswith(prefix)]


def remove_stale(prefix: str = NAME_PREFIX) -> list[str]:
    """Remove namespaces and links left by collectors whose process is gone; return their names."""
    removed = []
    for name in list_namespaces():
        owner = owner_pid(name)
        if name.startswith(prefix) and owner is not None and not _alive(owner):
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    for name in list_links():
        owner = owner_pid(name)
        if name.startswith(prefix) and owner is not None and not _alive(owner):
            _run(["ip", "link", "del", name], check=False)
            removed.append(name)
    return removed


def owner_pid(name: str) -> int | None:
    """The process id encoded in a testbed namespace or link name; None for other names."""
    match = _PREFIX_RE.match(name)
    return int(match.group(1), 36) if match else None


class EmulatedNetwork:
    """``hosts`` namespaces on one bridge; use as a context manager.

    Entering creates everything (after removing stale leftovers); leaving
    removes everything, also on an exception, Ctrl-C or SIGTERM (turned
    into ``KeyboardInterrupt`` while the network exists). Processes started
    in the namespaces must be stopped before leaving; :meth:`close` kills
    whatever still runs inside them.
    """

    def __init__(self, hosts: int):
        if hosts < 1:
            raise ValueError(f"hosts must be positive, got {hosts}")
        self.hosts = hosts
        self.prefix = f"{NAME_PREFIX}{_base36(os.getpid(), 5)}{_base36(next(_instances), 1)}"
        self.bridge = f"{self.prefix}br"
        self.tier: Tier | None = None
        self._created: list[tuple[str, str]] = []
        self._old_handlers: dict[int, object] = {}

    def namespace(self, host: int) -> str:
        return f"{self.prefix}-h{host}"

    def outer_ifname(self, host: int) -> str:
        return f"{self.prefix}h{host}"

    def address(self, host: int) -> str:
        return f"{SUBNET}.{host + 2}"

    def exec_prefix(self, host: int) -> list[str]:
        """Command prefix that runs a program inside host ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def __enter__(self) -> "EmulatedNetwork":
        check_available()
        remove_stale()
        self._install_signal_handlers()
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _create(self) -> None:
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._created.append(("link", self.bridge))
        _run(["ip", "link", "set", self.bridge, "up"])
        for host in range(self.hosts):
            ns, outer = self.namespace(host), self.outer_ifname(host)
            _run(["ip", "netns", "add", ns])
            self._created.append(("netns", ns))
            _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", INNER_IFNAME, "netns", ns])
            self._created.append(("link", outer))
            _run(["ip", "link", "set", outer, "master", self.bridge])
            _run(["ip", "link", "set", outer, "up"])
            inside = self.exec_prefix(host)
            _run(inside + ["ip", "addr", "add", f"{self.address(host)}/24", "dev", INNER_IFNAME])
            _run(inside + ["ip", "link", "set", INNER_IFNAME, "up"])
            _run(inside + ["ip", "link", "set", "lo", "up"])

    def set_tier(self, tier: Tier) -> None:
        """Limit every host's NIC to ``tier`` in both directions (``tc qdisc replace``).

        Running processes keep their connections; the new rate applies to
        the next packet.
        """
        for host in range(self.hosts):
            _run(["tc", "qdisc", "replace", "dev", self.outer_ifname(host), "root"] + tier.tbf_args())
            _run(self.exec_prefix(host) + ["tc", "qdisc", "replace", "dev", INNER_IFNAME, "root"] + tier.tbf_args())
        self.tier = tier

    def qdiscs(self, host: int) -> tuple[str, str]:
        """``tc qdisc show`` of host ``host``'s outer and inner interface, for checks."""
        outer = _run(["tc", "qdisc", "show", "dev", self.outer_ifname(host)]).stdout.strip()
        inner = _run(self.exec_prefix(host) + ["tc", "qdisc", "show", "dev", INNER_IFNAME]).stdout.strip()
        return outer, inner

    def close(self) -> None:
        """Kill processes left in the namespaces, delete namespaces, veth pairs and bridge."""
        for kind, name in reversed(self._created):
            if kind == "netns":
                _kill_namespace_processes(name)
        for kind, name in reversed(self._created):
            if kind == "link":
                _run(["ip", "link", "del", name], check=False)
            else:
                _run(["ip", "netns", "del", name], check=False)
        self._created.clear()
        self.tier = None
        self._restore_signal_handlers()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def interrupt(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        for signum in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[signum] = signal.signal(signum, interrupt)

    def _restore_signal_handlers(self) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self._old_handlers.clear()


def _kill_namespace_processes(namespace: str) -> None:
    pids = _run(["ip", "netns", "pids", namespace], check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@contextmanager
def emulated_network(hosts: int) -> Iterator[EmulatedNetwork]:
    """``with emulated_network(4) as net: ...``: the functional form of :class:`EmulatedNetwork`."""
    with EmulatedNetwork(hosts) as net:
        yield net
