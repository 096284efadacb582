"""Wake-ups where the database has no LISTEN/NOTIFY (SQLite, MariaDB): a datagram on loopback.

Each worker binds a UDP port on 127.0.0.1 and records it in its worker row (with its host, on
MariaDB); a producer that commits a job due now sends the queue's name to the port of every live
worker on its own host. A lost datagram, or a worker on another host, costs at most one poll
interval, which stays the fallback. SQLite is one host's database, so there loopback reaches every
worker that can open the file.
"""

from __future__ import annotations

import socket
import time
from typing import Callable

REFRESH_SECONDS = 1.0  # how stale the producer's list of worker ports may be


class DatagramListener:
    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]

    def wait(self, timeout: float) -> list[str]:
        self._socket.settimeout(timeout)
        try:
            queues = [self._socket.recv(256).decode(errors="replace")]
        except (TimeoutError, socket.timeout):
            return []
        self._socket.setblocking(False)
        try:
            while True:
                queues.append(self._socket.recv(256).decode(errors="replace"))
        except BlockingIOError:
            return queues

    def close(self) -> None:
        self._socket.close()


class Waker:
    """The producer's side: one datagram per live worker, to a list of ports re-read each second.
    Its socket lives as long as the backend, which may be used again after close(); it has no
    close() of its own."""

    def __init__(self, read_ports: Callable[[], list[int]]):
        self._read_ports = read_ports
        self._ports: list[int] = []
        self._read_at = float("-inf")
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.setblocking(False)

    def wake(self, queue_name: str) -> None:
        now = time.monotonic()
        if now - self._read_at > REFRESH_SECONDS:
            self._ports, self._read_at = self._read_ports(), now
        for port in self._ports:
            try:
                self._socket.sendto(queue_name.encode(), ("127.0.0.1", port))
            except OSError:  # a worker that just went away; polling covers anything missed
                pass
