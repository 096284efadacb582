"""PostgreSQL's pools of connections, each opened on first use (so that e.g. printing the migration
SQL needs no server), and whether a pooler (PgBouncer) stands between them and the server."""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool, PoolTimeout

from leased.backends.postgres.checkout import POOL_TIMEOUT_SECONDS
from leased.backends.postgres.outages import OwnPoolWarnings, described
from leased.backends.postgres.queries import QUERIES
from leased.backends.postgres.url import CONNECT_TIMEOUT_SECONDS
from leased.backends.worker_calls import are_worker_calls
from leased.errors import DatabaseUnavailable

# How long the pool keeps retrying to replace a lost connection (psycopg_pool backs off 1, 2, 4, 8 s
# for up to 5 minutes): after a second it gives up, and the next call that waits asks again at once.
RECONNECT_SECONDS = 1.0
# Transactional handlers' connections (a pool of their own, so that they never take the ones the
# lease keeper renews on): one per handler running at once, closed when idle.
HANDLER_CONNECTIONS = 100
OWN_POOLS = OwnPoolWarnings(("leased", "leased-worker", "leased-claims", "leased-handlers", "leased-async-handlers"))
logging.getLogger("psycopg.pool").addFilter(OWN_POOLS)


def set_up(connection: psycopg.Connection[Any]) -> None:
    connection.execute(QUERIES["session_settings"])


def set_up_for_claims(connection: psycopg.Connection) -> None:
    connection.execute(QUERIES["claim_settings"], {"for_transaction": False})


class PostgresPools:
    def __init__(self, url: str, connect_kwargs: dict[str, Any], where: str, min_connections: int,
                 max_connections: int):
        self.url, self.connect_kwargs, self.where = url, connect_kwargs, where
        self._sizes = (min_connections, max_connections)
        self._pool: ConnectionPool | None = None
        # The workers' own calls (leased.backends.worker_calls) share one connection per worker
        # running in this process, apart from the main pool, which producers and handlers use: so
        # a worker process holds this one, a claims connection and the listener, at any
        # concurrency, and a handler's enqueue can neither grow them nor wait behind a renewal.
        # Its writers are short statements that take turns (an end batch, a renewal, a beat).
        self._worker_pool: ConnectionPool | None = None
        self._workers = 0  # serving_worker() blocks open: the worker pool's size, at least 1
        # Claims get connections of their own, set up once for them (see claim_settings in
        # queries.sql): the claim is then one statement, where sending the settings with every
        # claim cost a transaction block and more time than the claim itself.
        self._claims_pool: ConnectionPool | None = None
        self._handlers_pool: ConnectionPool | None = None
        self._pool_lock = threading.Lock()
        # Whether the URL reaches the server through a pooler: None until the first connection tells.
        self.behind_pooler: bool | None = None

    # Pools, opened on first use, so that e.g. printing the migration SQL needs no server.
    def _open_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._pool is None:
                self._pool = self._new_pool("leased", *self._sizes, set_up)
            return self._pool

    def _open_worker_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._worker_pool is None:
                size = max(1, self._workers)
                self._worker_pool = self._new_pool("leased-worker", size, size, set_up)
            return self._worker_pool

    @contextmanager
    def serving_worker(self) -> Iterator[None]:
        """While a worker runs in this process: one more connection for the workers' own calls."""
        self._resize_worker_pool(+1)
        try:
            yield
        finally:
            self._resize_worker_pool(-1)

    def _resize_worker_pool(self, change: int) -> None:
        with self._pool_lock:
            self._workers += change
            if self._worker_pool is not None:
                size = max(1, self._workers)
                self._worker_pool.resize(size, size)

    def open_claims_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._claims_pool is None:
                self._claims_pool = self._new_pool("leased-claims", 1, 2, set_up_for_claims)
            return self._claims_pool

    def _open_handlers_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._handlers_pool is None:
                self._handlers_pool = self._new_pool("leased-handlers", 0, HANDLER_CONNECTIONS, set_up)
            return self._handlers_pool

    def pooled(self) -> bool:
        """Whether the URL goes through a pooler; the first call connects to find out, opening the
        pool the caller's calls use (a worker's finds it out on the worker pool, say)."""
        if self.behind_pooler is None:
            self._pool_for_caller()
        return bool(self.behind_pooler)

    def for_call(self, for_claims: bool, for_handlers: bool
                 ) -> tuple[ConnectionPool, Callable[[psycopg.Connection], None]]:
        """The pool a call takes its connection from, and how a direct one is set up as its are."""
        if for_claims:
            return self._claims_pool or self.open_claims_pool(), set_up_for_claims
        if for_handlers:
            return self._handlers_pool or self._open_handlers_pool(), set_up
        return self._pool_for_caller(), set_up

    def _pool_for_caller(self) -> ConnectionPool:
        if are_worker_calls():
            return self._worker_pool or self._open_worker_pool()
        return self._pool or self._open_pool()

    def _new_pool(self, name: str, min_connections: int, max_connections: int,
                  configure: Callable[[psycopg.Connection], None] | None = None) -> ConnectionPool:
        url, connect_kwargs = self.url, self.connect_kwargs
        # One plain connection first: it fails at once with libpq's reason (refused, bad password,
        # no such database), where the pool would retry quietly until its wait timed out.
        try:
            with psycopg.connect(url, **connect_kwargs) as connection:
                if self.behind_pooler is None:
                    self._found_pooler(reaches_pooler(connection))
        except psycopg.OperationalError as error:
            raise DatabaseUnavailable(f"cannot connect to {self.where}: {described(error)}") from None

        def set_up_pooled(connection: psycopg.Connection) -> None:
            OWN_POOLS.adopt(connection)
            # Behind a pooler a session setting would stay with whichever server connection ran it,
            # the next client's.
            if configure is not None and not self.behind_pooler:
                configure(connection)

        pool = ConnectionPool(url, min_size=min_connections, max_size=max_connections, kwargs=connect_kwargs,
                              configure=set_up_pooled, timeout=POOL_TIMEOUT_SECONDS, name=name,
                              reconnect_timeout=RECONNECT_SECONDS, open=True)
        try:
            pool.wait(timeout=CONNECT_TIMEOUT_SECONDS)
        except PoolTimeout:
            pool.close()
            raise DatabaseUnavailable(
                f"cannot connect to {self.where}: no connection within {CONNECT_TIMEOUT_SECONDS} s") from None
        return pool

    def _found_pooler(self, pooled: bool) -> None:
        self.behind_pooler = pooled
        if pooled:
            # psycopg prepares a statement it ran 5 times, on the server connection it then had:
            # through a transaction pooler the next run meets another ("does not exist"), or a
            # prepared one by that name ("already exists"). PgBouncer 1.18 cannot track them.
            self.connect_kwargs["prepare_threshold"] = None

    def close(self) -> None:
        with self._pool_lock:
            for pool in (self._pool, self._worker_pool, self._claims_pool, self._handlers_pool):
                if pool is not None:
                    pool.close()
            self._pool = self._worker_pool = self._claims_pool = self._handlers_pool = None



def reaches_pooler(connection: psycopg.Connection) -> bool:
    """Whether the connection goes through a pooler such as PgBouncer. A pooler hands its clients
    a cancel key of its own (it must route their cancel requests), so the process id the client was
    told differs from the server process that runs its statements; a direct connection, or a TCP
    proxy that forwards bytes, is told the real one. Asking costs one round trip per backend."""
    with connection.cursor(row_factory=tuple_row) as cursor:
        (server_pid,) = cursor.execute("SELECT pg_backend_pid()").fetchall()[0]
    return connection.info.backend_pid != server_pid
