"""An async transactional handler's connection on SQLite: an aiosqlite.Connection over a sqlite3
connection of ours, in a BEGIN IMMEDIATE transaction for the handler's whole run, as a sync
handler's is (backend.attempt_transaction).

aiosqlite runs each connection's statements on a thread of its own. The transaction is begun,
and the attempt's end (the fence, the finish, a step's record: sql/fenced.py's sync code, written once
for every backend) is written, on a worker thread over the same sqlite3 connection while the
handler is not using it; sqlite3 connections of ours allow other threads (check_same_thread off).
The commit and the rollback go through aiosqlite, so that they wait behind a statement the handler
may have left running when it was cancelled. The process's write lock is taken on a thread too:
the loop never waits for it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import weakref
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, AsyncIterator, Callable

from leased.errors import ConfigurationError


class AsyncHandlerConnections:
    """Idle aiosqlite connections, per event loop (each connection's futures belong to one), reused
    one attempt after another; each attempt's sqlite3 connection is found from its aiosqlite one."""

    def __init__(self, open_connection: Callable[[], sqlite3.Connection],
                 write_lock: Callable[[sqlite3.Connection], AbstractContextManager[None]]):
        self._open = open_connection
        self._write_lock = write_lock
        self._idle: dict[asyncio.AbstractEventLoop, list[tuple[Any, sqlite3.Connection]]] = {}
        self._raw: weakref.WeakKeyDictionary[Any, sqlite3.Connection] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def raw(self, connection: Any) -> sqlite3.Connection:
        """The sqlite3 connection under an attempt's aiosqlite one."""
        try:
            return self._raw[connection]
        except (KeyError, TypeError):
            raise ConfigurationError("this connection is not an async transactional handler's: pass "
                                     "context.connection") from None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        connection, raw = await self._take()
        lock = self._write_lock(raw)
        acquiring = asyncio.ensure_future(asyncio.to_thread(lock.__enter__))
        try:
            await asyncio.shield(acquiring)
        except asyncio.CancelledError:  # the lock may still be taken, on its thread: then let it go
            acquiring.add_done_callback(lambda done: self._abandon(done, lock, connection, raw))
            raise
        except BaseException:
            self._give_back(connection, raw)
            raise
        try:
            yield connection
            if raw.in_transaction:
                await connection.execute("COMMIT")
        except BaseException:
            if raw.in_transaction:
                await asyncio.shield(connection.execute("ROLLBACK"))
            raise
        finally:
            lock.__exit__(None, None, None)
            self._give_back(connection, raw)

    def _abandon(self, acquiring: asyncio.Future, lock: AbstractContextManager[None], connection: Any,
                 raw: sqlite3.Connection) -> None:
        """On the loop, once the lock's thread is done for an attempt cancelled while it waited:
        the lock, if it was taken, rolled back and released at once; the connection kept for another."""
        try:
            if not acquiring.cancelled() and acquiring.exception() is None:
                try:
                    if raw.in_transaction:
                        raw.execute("ROLLBACK")
                finally:
                    lock.__exit__(None, None, None)
        finally:
            self._give_back(connection, raw)

    async def _take(self) -> tuple[Any, sqlite3.Connection]:
        loop = asyncio.get_running_loop()
        with self._lock:
            idle = self._idle.get(loop)
            if idle:
                return idle.pop()
        import aiosqlite

        raw = await asyncio.to_thread(self._open)
        connection = aiosqlite.Connection(lambda: raw, 64)
        await connection
        self._raw[connection] = raw
        return connection, raw

    def _give_back(self, connection: Any, raw: sqlite3.Connection) -> None:
        with self._lock:
            self._idle.setdefault(asyncio.get_running_loop(), []).append((connection, raw))

    async def close(self) -> None:
        """The worker's loop is ending: its connections close."""
        with self._lock:
            idle = self._idle.pop(asyncio.get_running_loop(), [])
        for connection, _ in idle:
            await connection.close()
