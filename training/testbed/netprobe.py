"""TCP probes between two emulated hosts: round-trip latency and bulk goodput.

``python -m training.testbed.netprobe serve PORT`` echoes small messages and
acknowledges bulk transfers; ``... probe ADDR PORT BULK_BYTES`` measures and
prints one JSON line ``{"rtt_s": [...], "goodput_bytes_per_s": [...]}``.
Plain sockets, no torch, so the probe starts in a fraction of a second.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

_HEADER = struct.Struct("!cQ")  # kind (b"p" ping, b"b" bulk, b"q" quit), payload bytes
_CHUNK = 1 << 20


def _recv_exact(conn: socket.socket, n_bytes: int) -> bytes:
    parts, left = [], n_bytes
    while left:
        part = conn.recv(min(left, _CHUNK))
        if not part:
            raise ConnectionError("peer closed the connection")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def serve(port: int) -> None:
    """Answer pings with one byte and bulk transfers with one byte after the last byte arrived."""
    with socket.create_server(("0.0.0.0", port)) as server:
        print("ready", flush=True)
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                kind, size = _HEADER.unpack(_recv_exact(conn, _HEADER.size))
                if kind == b"q":
                    return
                left = size
                while left:
                    left -= len(conn.recv(min(left, _CHUNK)))
                conn.sendall(b"k")


def probe(address: str, port: int, bulk_bytes: int, pings: int = 50, bulks: int = 3) -> dict:
    """Median-ready samples: ``pings`` 1-byte round trips and ``bulks`` transfers of ``bulk_bytes``."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=10.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtt_s = []
        for _ in range(pings):
            start = time.perf_counter()
            conn.sendall(_HEADER.pack(b"p", 1) + b"x")
            _recv_exact(conn, 1)
            rtt_s.append(time.perf_counter() - start)
        payload = bytes(_CHUNK)
        goodput = []
        for _ in range(bulks):
            start = time.perf_counter()
            conn.sendall(_HEADER.pack(b"b", bulk_bytes))
            left = bulk_bytes
            while left:
                n = min(left, _CHUNK)
                conn.sendall(payload[:n])
                left -= n
            _recv_exact(conn, 1)
            goodput.append(bulk_bytes / (time.perf_counter() - start))
        conn.sendall(_HEADER.pack(b"q", 0))
    return {"rtt_s": rtt_s, "goodput_bytes_per_s": goodput}


def main(argv: list[str]) -> None:
    if argv[:1] == ["serve"]:
        serve(int(argv[1]))
    elif argv[:1] == ["probe"]:
        print(json.dumps(probe(argv[1], int(argv[2]), int(argv[3]))), flush=True)
    else:
        raise SystemExit("usage: netprobe serve PORT | netprobe probe ADDR PORT BULK_BYTES")


if __name__ == "__main__":
    main(sys.argv[1:])
