"""Worker hosts of the test's own: a network namespace each, joined to the root namespace by a veth
pair, reaching the test PostgreSQL through a TCP relay bound to the host's gateway address.
Imports no pytest.

The shared server listens on 127.0.0.1 only and is never reconfigured, so each host's gateway
address (the root end of its veth) has a relay in front of it that forwards bytes to the server: a
cut between a namespace and its relay is a real network cut for the workers in it, and the server
sees their sessions stay open, as it would across a real one. Cutting a host off is `ip link set
<its veth> down`: its packets are dropped, its TCP connections hang and its connects time out.

Names start with `lsd-<pid>-` (namespaces) and `lsd<pid>h` (veths), so leftovers of a crashed run
are recognised by their dead pid and removed by the next one, and runs side by side keep apart.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

SUBNETS = "10.233"  # host n of a run: 10.233.X.(4n+1) (its gateway) and .(4n+2) (the host), a /30
_LOCK = Path("/tmp/leased-hosts.lock")  # picking a free /24 and taking it, one run at a time


def missing() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no ip command (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    return None


def _ip(*arguments: str) -> str:
    done = subprocess.run(["ip", *arguments], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(arguments)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _dead(pid: str) -> bool:
    return pid.isdigit() and not Path(f"/proc/{pid}").exists()


def remove_leftovers() -> None:
    """Namespaces and veths of runs whose process is gone (a crash, a SIGKILLed pytest)."""
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0]
        if name.startswith("lsd-") and _dead(name.split("-")[1]):
            _ip("netns", "delete", name)  # its veth end goes with it, and so the root end
    for line in _ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith("lsd") and "h" in name and _dead(name[3:].split("h")[0]):
            _ip("link", "delete", name)


def _free_subnet() -> str:
    taken = _ip("-4", "-o", "addr", "show")
    for third in range(os.getpid() % 200, os.getpid() % 200 + 256):
        prefix = f"{SUBNETS}.{third % 256}."
        if f" {prefix}" not in taken:
            return prefix
    raise RuntimeError(f"no free /24 in {SUBNETS}.0.0/16")


@dataclass(frozen=True)
class Host:
    """One worker host: `command()` runs a program inside it; its workers reach PostgreSQL at
    `gateway`:`port` (the relay)."""

    name: str
    namespace: str
    veth: str  # the root namespace's end
    gateway: str
    address: str
    port: int  # the relay's on the gateway: the server's own


    def command(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv]

    def cut(self) -> None:
        """The host's link down: nothing passes either way until restore()."""
        _ip("link", "set", self.veth, "down")

    def restore(self) -> None:
        _ip("link", "set", self.veth, "up")

    def url(self, database_url: str) -> str:
        """The PostgreSQL URL as this host reaches it: through its gateway, the rest unchanged."""
        scheme, rest = database_url.split("://", 1)
        user, _, location = rest.rpartition("@")
        path = location[location.index("/"):]
        return f"{scheme}://{user}{'@' if user else ''}{self.gateway}:{self.port}{path}"


class Relay:
    """Forwards each connection accepted on a host's gateway address to the server, byte for
    byte, on an event loop of its own thread; knows how many are open per host."""

    def __init__(self, server: tuple[str, int]):
        self._server = server
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self.open: dict[str, int] = {}  # gateway address: connections open through it now
        self._thread = threading.Thread(target=self._loop.run_forever, name="hosts-relay", daemon=True)
        self._thread.start()

    def listen(self, address: str, port: int) -> None:
        self.open[address] = 0

        async def start() -> None:
            self._servers.append(await asyncio.start_server(lambda r, w: self._relay(address, r, w), address, port))

        asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)

    async def _relay(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._server)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, upstream_writer}
        self.open[address] += 1
        try:
            # Either side ending ends both, as a server's closed session does for its client.
            await asyncio.wait([asyncio.create_task(self._pipe(reader, upstream_writer)),
                                asyncio.create_task(self._pipe(upstream_reader, writer))],
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.open[address] -= 1
            for end in (writer, upstream_writer):
                end.close()
                self._writers.discard(end)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            relaying = asyncio.all_tasks() - {asyncio.current_task()}  # the loop is the relay's alone
            for task in relaying:
                task.cancel()
            await asyncio.gather(*relaying, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@contextmanager
def worker_hosts(count: int, server: tuple[str, int] = ("127.0.0.1", 5432)) -> Iterator[tuple[list[Host], Relay]]:
    """`count` hosts, each a namespace with a /30 link to the root namespace and a relay on its
    gateway to `server`; everything removed afterwards, whatever happened. Processes started in a
    host must be ended before the block ends (a namespace outlives its deletion while a process
    holds it)."""
    remove_leftovers()
    pid = os.getpid()
    hosts: list[Host] = []
    relay = Relay(server)
    try:
        with open(_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be picking a subnet right now
            prefix = _free_subnet()
            for n in range(count):
                host = Host(chr(ord("a") + n), f"lsd-{pid}-{n}", f"lsd{pid}h{n}", f"{prefix}{4 * n + 1}",
                            f"{prefix}{4 * n + 2}", server[1])
                _ip("netns", "add", host.namespace)
                hosts.append(host)
                _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
                _ip("addr", "add", f"{host.gateway}/30", "dev", host.veth)
                _ip("link", "set", host.veth, "up")
                _ip("-n", host.namespace, "addr", "add", f"{host.address}/30", "dev", "eth0")
                _ip("-n", host.namespace, "link", "set", "eth0", "up")
                _ip("-n", host.namespace, "link", "set", "lo", "up")
        for host in hosts:
            relay.listen(host.gateway, host.port)
        yield hosts, relay
    finally:
        relay.close()
        for host in hosts:
            try:
                _ip("netns", "delete", host.namespace)  # the veth pair goes with it
            except RuntimeError:
                pass
        for host in hosts:  # a root end whose peer was never moved into the namespace
            subprocess.run(["ip", "link", "delete", host.veth], capture_output=True)
