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


# bench/run.py's jobs (its django-ox peer): they report on the suite's probe (peers.probe), whose
# clock is the monotonic one the suite's latency workload reads.
@task()
def suite_noop(n: int) -> None:
    return None


@task()
def suite_probe(n: int) -> None:
    from peers.probe import report_start

    report_start(n)


@task()
def suite_nap(n: int, seconds: float) -> None:
    from peers.probe import report_end, report_start

    report_start(n)
    time.sleep(seconds)
    report_end(n)
