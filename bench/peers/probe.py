"""What the benchmark's jobs do, shared by every library's handlers.

noop(n) does nothing; probe(n) reports its start on a loopback datagram to the benchmark process
(BENCH_PROBE_PORT), so enqueue-to-start latency is measured on one clock (CLOCK_MONOTONIC is
system-wide on Linux) without touching the store; nap(n, seconds) sleeps.
"""

from __future__ import annotations

import os
import socket
import time

_socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def report_start(n: int) -> None:
    port = int(os.environ.get("BENCH_PROBE_PORT", "0"))
    if port:
        _socket.sendto(f"{n} {time.monotonic()}".encode(), ("127.0.0.1", port))


def report_end(n: int) -> None:
    """Sleeping jobs report their end too (as -(n + 1)) when BENCH_REPORT_END is set."""
    if os.environ.get("BENCH_REPORT_END"):
        report_start(-(n + 1))
