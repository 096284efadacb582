"""The benchmark's tasks: a no-op, and a probe that reports its start time on a loopback datagram."""

import socket
import time

from django.tasks import task

_socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


@task()
def noop(n: int) -> None:
    return None


@task()
def probe(n: int, port: int) -> None:
    _socket.sendto(f"{n} {time.time()}".encode(), ("127.0.0.1", port))
