"""An async handler's psycopg AsyncConnection, driven from a thread as a sync connection is.

An async transactional handler writes through a psycopg.AsyncConnection, on the worker's event
loop. Its end, fenced on the lease, must be written in that same transaction, and the writing is
the shared parts' sync code (sql/fenced.py: the fence, the finish, a workflow step's settling):
written once for every backend. So once the handler has returned (nothing else uses the connection then), that code runs
on a thread over this wrapper, which sends each statement to the loop and waits for its answer;
the loop runs on meanwhile. It offers what those parts call: execute(), cursor(row_factory=...),
and a cursor's execute(), fetchone(), fetchall() and rowcount.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, TypeVar

T = TypeVar("T")


class BlockingConnection:
    def __init__(self, connection: Any, loop: asyncio.AbstractEventLoop):
        self.connection = connection  # the psycopg.AsyncConnection
        self._loop = loop

    def run(self, awaitable: Awaitable[T]) -> T:
        """On a thread, never the loop's own: the awaitable's result, run on the loop."""
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop).result()

    def cursor(self, row_factory: Any = None) -> BlockingCursor:
        cursor = self.connection.cursor(row_factory=row_factory) if row_factory else self.connection.cursor()
        return BlockingCursor(cursor, self)

    def execute(self, query: Any, params: Any = None) -> BlockingCursor:
        return self.cursor().execute(query, params)


class BlockingCursor:
    def __init__(self, cursor: Any, connection: BlockingConnection):
        self._cursor = cursor
        self._connection = connection

    def execute(self, query: Any, params: Any = None) -> BlockingCursor:
        self._connection.run(self._cursor.execute(query, params))
        return self

    def fetchone(self) -> Any:
        return self._connection.run(self._cursor.fetchone())

    def fetchall(self) -> list[Any]:
        return self._connection.run(self._cursor.fetchall())

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def description(self) -> Any:
        return self._cursor.description

    def __enter__(self) -> BlockingCursor:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._connection.run(self._cursor.close())


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable
