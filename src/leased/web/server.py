"""Serving the dashboard from `leased dashboard`: where it may listen, and the uvicorn server."""

from __future__ import annotations

import ipaddress
import signal
import socket
from typing import Any, Iterable

TOKEN_VARIABLE = "LEASED_DASHBOARD_TOKEN"
# What a browser on this machine calls a loopback server; `*.localhost` resolves to it too (RFC 6761).
LOOPBACK_NAMES = ("localhost", "*.localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    """True when every address `host` names is a loopback one, so only this machine can connect.

    A name is resolved rather than trusted: `localhost` is loopback on every sane machine, but a
    name that resolves to a public address is not, whatever it is called.
    """
    if not host:
        return False  # the empty host means every interface
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(str(address).split("%")[0]).is_loopback
                                   for address in addresses)


def loopback_hosts(listening_on: str, also: Iterable[str] = ()) -> list[str]:
    """The Host names a loopback dashboard without a token answers to: the loopback names, the
    address it listens on (as a Host header writes it), and the names the user gave (--allow-host)."""
    bound = listening_on.strip("[]")
    return list(dict.fromkeys([*LOOPBACK_NAMES, f"[{bound}]" if ":" in bound else bound, *also]))


def listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound here so that a busy port is one clear error before anything starts."""
    family, kind, protocol, _, address = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM,
                                                            flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, protocol)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def run(asgi_app: Any, sock: socket.socket) -> None:
    """Serve until SIGINT/SIGTERM, then return. Access logs are off: pages refresh themselves."""
    import uvicorn

    config = uvicorn.Config(asgi_app, log_level="warning", access_log=False, lifespan="off")
    # uvicorn shuts down on the signal, then raises it again for whoever handled it before; here
    # the signal was the request to stop, so either one ends serving quietly.
    previous = signal.signal(signal.SIGTERM, _stop_serving)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_serving(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
