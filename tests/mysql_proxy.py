"""A TCP proxy between leased and the test MariaDB server that loses one answer on purpose: it
passes every packet through until a COM_QUERY whose SQL starts with a given word, lets the server
run it and answer, then closes the client's connection without passing the answer on. So the write
happened, and the client cannot know: what a connection lost during COMMIT looks like, every time.
"""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from typing import Iterator

COM_QUERY = 0x03


def _first_word_is(sql: bytes, word: bytes) -> bool:
    """Whether a query's first word, past its leading comment lines, is `word`."""
    lines = [line.strip() for line in sql.splitlines()]
    code = b" ".join(line for line in lines if line and not line.startswith(b"--"))
    return code.upper().startswith(word)


class LosingProxy:
    def __init__(self, server: tuple[str, int]):
        self.server = server
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lose_after: bytes | None = None  # the first word of the query whose answer is lost, once
        self.lost = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.server)
            losing = threading.Event()
            threading.Thread(target=self._to_server, args=(client, upstream, losing), daemon=True).start()
            threading.Thread(target=self._to_client, args=(upstream, client, losing), daemon=True).start()

    def _to_server(self, client: socket.socket, upstream: socket.socket, losing: threading.Event) -> None:
        buffered = b""
        try:
            while data := client.recv(65536):
                buffered += data
                while len(buffered) >= 4 and len(buffered) >= 4 + int.from_bytes(buffered[:3], "little"):
                    size = int.from_bytes(buffered[:3], "little")
                    packet, buffered = buffered[:4 + size], buffered[4 + size:]
                    word = self.lose_after
                    if word is not None and packet[4] == COM_QUERY and _first_word_is(packet[5:], word):
                        self.lose_after = None
                        losing.set()  # set before the server can answer: its answer is the one lost
                    upstream.sendall(packet)
        except OSError:
            pass

    def _to_client(self, upstream: socket.socket, client: socket.socket, losing: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if losing.is_set():  # the server ran the query and answered: the client never hears it
                    self.lost.set()  # before the close, which the client may act on at once
                    client.shutdown(socket.SHUT_RDWR)
                    client.close()
                    upstream.close()
                    return
                client.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()


@contextmanager
def losing_proxy(host: str, port: int) -> Iterator[LosingProxy]:
    proxy = LosingProxy((host, port))
    try:
        yield proxy
    finally:
        proxy.close()
