"""Transactional handlers' connections on PostgreSQL: a pool of their own for sync handlers, and a
pool per event loop for async ones (psycopg's async pool belongs to the loop that opened it)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from leased.backends.postgres.checkout import POOL_TIMEOUT_SECONDS
from leased.backends.postgres.connections import CLOCK_SET, PostgresConnections
from leased.backends.postgres.pools import HANDLER_CONNECTIONS, OWN_POOLS, RECONNECT_SECONDS
from leased.backends.postgres.queries import QUERIES


class HandlerConnections:
    def __init__(self, connections: PostgresConnections):
        self._connections = connections
        self._async_pools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool] = {}

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A transactional handler's connection, from a pool of their own, in a transaction that
        commits when the block ends (psycopg refuses a commit() of the handler's inside it)."""
        with self._connections.connection(for_handlers=True) as connection, connection.transaction():
            # psycopg's default rows for the handler's own statements (ours set a row factory per cursor).
            connection.row_factory = tuple_row  # type: ignore[assignment]  # the pool's connections are typed as dict rows
            yield connection

    @asynccontextmanager
    async def transaction_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = await self._async_pool()
        async with pool.connection() as connection:
            await self.set_clock_async(connection)
            async with connection.transaction():
                yield connection

    async def set_clock_async(self, connection: psycopg.AsyncConnection) -> None:
        """The clock seam (PostgresConnections.set_clock) on an async connection."""
        offset = self._connections.clock.interval()
        if CLOCK_SET.get(connection, "") != offset:
            if self._connections.pools.behind_pooler:
                raise self._connections.clock_behind_pooler()
            await connection.execute(QUERIES["set_clock_offset"], {"offset": offset})
            CLOCK_SET[connection] = offset

    async def _async_pool(self) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is None:
            pools = self._connections.pools
            await asyncio.to_thread(pools.pooled)  # connects once: says whether a pooler is in between

            async def set_up(connection: psycopg.AsyncConnection) -> None:
                OWN_POOLS.adopt(connection)
                if not pools.behind_pooler:  # see PostgresPools._new_pool
                    await connection.execute(QUERIES["session_settings"])
                await connection.commit()

            kwargs = {key: value for key, value in pools.connect_kwargs.items() if key != "row_factory"}
            pool = AsyncConnectionPool(pools.url, min_size=0, max_size=HANDLER_CONNECTIONS, kwargs=kwargs,
                                       configure=set_up, timeout=POOL_TIMEOUT_SECONDS, name="leased-async-handlers",
                                       reconnect_timeout=RECONNECT_SECONDS, open=False)
            await pool.open()
            self._async_pools[loop] = pool
        return pool

    async def close_async(self) -> None:
        pool = self._async_pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()
