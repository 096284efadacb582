"""A web server the tests start as a user would (runserver, uvicorn), on a free port, and stop.
Imports no pytest."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from conftest import wait_for


def free_port() -> int:
    """A port nothing listens on, for a server a test starts.

    Below the kernel's ephemeral range: a port the kernel hands out (bind to port 0) is free only
    until the next outgoing connection, and under xdist the other workers' database connections
    take such ports all the time, between this check and the server's bind. Each xdist worker
    draws from a band of its own, at random (other runs may share the machine)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    band = max(64, (low - 10_000) // 32)
    start = 10_000 + (worker % 32) * band
    for port in random.sample(range(start, start + band), band):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # in use
                continue
            return port
    raise RuntimeError(f"no free port from {start} to {start + band - 1}")


def get(url: str, **headers: str) -> tuple[int, str, str]:
    """GET `url`: its status, Content-Type and body; an HTTP error status is an answer too."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


def _answers(url: str, server: subprocess.Popen, log: Path) -> bool:
    if server.poll() is not None:
        raise AssertionError(f"the server exited ({server.returncode}) before answering:\n{log.read_text()}")
    try:
        get(url)
        return True
    except OSError:  # not listening yet
        return False


@contextmanager
def serving(command: list[str] | str, cwd: Path, env: dict[str, str], url: str, log: Path) -> Iterator[None]:
    """`command` running (a shell line if a str) until the block ends, once `url` answers; its
    output goes to `log`, shown if it exits early."""
    with open(log, "w") as sink:
        server = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                  shell=isinstance(command, str), start_new_session=True)
        try:
            wait_for(lambda: _answers(url, server, log), timeout=60, message=f"{url} to answer")
            yield
        finally:
            os.killpg(server.pid, signal.SIGTERM)  # the shell and the server it started
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
