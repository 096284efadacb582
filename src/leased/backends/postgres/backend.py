"""PostgreSQL: many workers on many hosts, one pool of connections per process.

The backend is the shared body (backends/sql/) over PostgreSQL's parts: its connections
(connections.py over pools.py: pools, the pooler, the clock seam, outages, stale plans), its claim
(claims.py), transactional handlers' connections (handlers.py), and the write verbs it does in one
statement each (fused.py). `PostgresBackend(url, fused=False)` runs the shared sequence of those
verbs instead, as the conformance suite does to keep the two from drifting. Times come from now()
on the server, so the clocks of worker hosts never decide a lease.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import psycopg
from psycopg import errors
from psycopg.rows import dict_row, tuple_row

from leased.admin import OldTransaction
from leased.backends import capabilities
from leased.backends.ports import AttemptEnd, ClaimRequest, PruneRule
from leased.backends.postgres import callers
from leased.backends.postgres.blocking import BlockingConnection
from leased.backends.postgres.claims import PostgresClaims, rotate_due
from leased.backends.postgres.connections import CLOCK_SET, PostgresConnections, is_missing_table
from leased.backends.postgres.fused import FusedWrites
from leased.backends.postgres.handlers import HandlerConnections
from leased.backends.postgres.horizon import old_transactions
from leased.backends.postgres.listener import Listener
from leased.backends.postgres.pruning import pruning_lock
from leased.backends.postgres.queries import MIGRATIONS, MIGRATOR, QUERIES, decoded, run_at, utc
from leased.backends.postgres.url import connect_kwargs, described, listen_target, own_parameters, parsed
from leased.backends.sql.async_drivers import asyncpg_identity, enqueue_asyncpg
from leased.backends.sql.callers import type_name, wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.backends.sql.scripts import schema_problem
from leased.backends.sql.store import SQLStore
from leased.backends.sql.writes import SharedSequence, Writes
from leased.clock import Clock
from leased.errors import ConfigurationError
from leased.jobs import ClaimedJob, Job, Lease, NewJob, Outcome
from leased.limits import QueueLimit

T = TypeVar("T")


class PostgresBackend(SQLStore):
    capabilities = capabilities.POSTGRES
    # The reclaim reads every job claimed since the oldest open transaction began, and a claim waiting for it
    # held up every job enqueued meanwhile (bench/long_transaction_notes.md): workers take turns (0020).
    reclaims_beside_claims = True

    def __init__(self, url: str, *, min_connections: int = 1, max_connections: int = 10, fused: bool = True):
        if not 0 <= min_connections <= max_connections or max_connections < 1:
            raise ConfigurationError(f"need 0 <= min_connections <= max_connections and max_connections >= 1, "
                                     f"got {min_connections} and {max_connections}")
        url, own = own_parameters(url)
        params = parsed(url, "PostgreSQL URL")
        self._where = described(params)
        self._listen = listen_target(own)  # a direct connection for LISTEN, when the URL goes through a pooler
        self.connections = PostgresConnections(url, connect_kwargs(params), self._where, min_connections,
                                               max_connections)
        self._handlers = HandlerConnections(self.connections)
        # The write verbs in one statement each, or (fused=False) the shared sequence of statements.
        fused_writes = FusedWrites(self.connections, self)
        self.writes: Writes = fused_writes if fused else SharedSequence(self)
        # The claim's reclaim is one statement whatever the writes: the steps it leaves, the fused way.
        self.claims = PostgresClaims(self.connections, self._claimed, fused_writes.reclaim_expired_steps,
                                     self.wake_sleepers)

    def __repr__(self) -> str:
        return f"PostgresBackend({self._where})"

    @property
    def clock(self) -> Clock:
        """leased_now()'s offset for this backend's sessions (see leased.clock)."""
        return self.connections.clock

    @property
    def behind_pooler(self) -> bool | None:
        """Whether the URL reaches the server through a pooler: None until the first connection tells."""
        return self.connections.pools.behind_pooler

    def serving_worker(self) -> AbstractContextManager[None]:
        return self.connections.pools.serving_worker()

    def close(self) -> None:
        self.connections.pools.close()

    def listener(self) -> Listener | None:
        if not self.connections.pools.pooled():
            return Listener(self.connections.url, self.connections.connect_kwargs, QUERIES["wake_channel"],
                            self._where)
        if self._listen is None:
            return None  # see polling_reason
        listen_url, listen_kwargs, listen_where = self._listen
        return Listener(listen_url, listen_kwargs, QUERIES["wake_channel"], listen_where,
                        expected=self.connections.reached_now, identity_query=QUERIES["connection_identity"])

    @property
    def polling_reason(self) -> str | None:
        """Why this backend gives no wake-ups (listener() is None), in a line; None when it does."""
        if self.connections.pools.pooled() and self._listen is None:
            return (f"{self._where} is reached through a pooler (PgBouncer?), where LISTEN cannot work; "
                    "add listen_url=<a direct URL> to the database URL for push wake-ups")
        return None

    def old_transactions(self, older_than_seconds: float) -> tuple[OldTransaction, ...]:
        return old_transactions(self._rows, older_than_seconds)

    def pruning(self) -> AbstractContextManager[bool]:
        return pruning_lock(self.connections)

    # The runtime: the claim, and the write verbs: fused (fused.py), or the shared sequence.
    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        return self.claims.claim(request)

    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]:
        return self.writes.renew(leases, wait_seconds, progress)

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        return self.writes.finish(ends)

    def _finish_on(self, connection: psycopg.Connection[Any], ends: Sequence[AttemptEnd], prepared: Any = None,
                   held: Any = None, counted_as: str | None = None) -> tuple[list[bool], set[str]]:
        return self.writes.finish_on(connection, ends, counted_as)

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False) -> None:
        self.writes.release(leases, outcome, message, explains_expiry)

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        reclaimed = self.writes.reclaim_expired(skip_if_done_within)
        # Once a second per worker, its turn at the reclaim or not: the rotation, and the sleepers woken.
        with self.connections.connection() as connection:
            rotate_due(connection)
        return reclaimed + self.wake_sleepers()

    def bury_workers(self, id_prefix: str, how: str) -> int:
        return self.writes.bury_workers(id_prefix, how)

    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int:
        return self.writes.retry_failed(task_name, queue_name)

    def retry(self, job_id: int) -> Job:
        return self.writes.retry(job_id)

    def cancel(self, job_id: int) -> Job:
        return self.writes.cancel(job_id)

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int:
        return self.writes.cancel_pending(task_name, queue_name)

    def pause_queue(self, queue_name: str) -> bool:
        return self.writes.pause_queue(queue_name)

    def resume_queue(self, queue_name: str) -> bool:
        return self.writes.resume_queue(queue_name)

    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        return self.writes.prune_batch(rule, limit)

    def fold_throughput(self, older_than_seconds: float) -> int:
        return self.writes.fold_throughput(older_than_seconds)

    def set_queue_limit(self, limit: QueueLimit) -> None:
        super().set_queue_limit(limit)
        if not limit.is_empty:
            self.claims.limits_in_use = True  # claims look for limited jobs from now on

    # Transactional handlers.
    def attempt_transaction(self) -> AbstractContextManager[psycopg.Connection[dict[str, Any]]]:
        return self._handlers.transaction()

    # An async transactional handler's transaction, on the worker's loop: its end and its steps are
    # written by the same fenced code as a sync handler's, on a thread, over the async connection
    # (blocking.py), once the handler has returned or while it awaits the step.
    def attempt_transaction_async(self) -> Any:
        return self._handlers.transaction_async()

    async def finish_in_async(self, connection: psycopg.AsyncConnection, end: AttemptEnd) -> tuple[bool, set[str]]:
        await self._handlers.set_clock_async(connection)  # the fence reads the clock as it is now
        blocking = BlockingConnection(connection, asyncio.get_running_loop())
        return await asyncio.to_thread(self._finish_fenced, blocking, end)

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: psycopg.AsyncConnection) -> bool:
        await self._handlers.set_clock_async(connection)
        blocking = BlockingConnection(connection, asyncio.get_running_loop())
        return await asyncio.to_thread(self.record_step, lease, name, result_json, seconds, blocking)

    async def close_async(self) -> None:
        await self._handlers.close_async()

    # Enqueue's two steps (leased.backends.sql.enqueue), on our connection or the caller's; the row
    # factory goes on the cursor, since the caller's connection may use any.
    def _in_callers(self, connection: psycopg.Connection[Any], work: Callable[[psycopg.Connection[Any]], T]) -> T:
        if isinstance(connection, BlockingConnection):  # an async handler's, of our own pool: set up already
            return work(connection)
        if not isinstance(connection, psycopg.Connection):
            raise ConfigurationError(wrong_connection(connection, "psycopg.Connection", "PostgreSQL",
                                                      "for a psycopg.AsyncConnection use aenqueue()"))
        self.connections.check_reach(callers.identity(connection, QUERIES["connection_identity"]))
        self.connections.set_clock(connection)
        return work(connection)

    def _insert_rows(self, connection: psycopg.Connection[Any], jobs: Sequence[NewJob]) -> list[tuple[Any, ...]]:
        with connection.cursor(row_factory=tuple_row) as cursor:
            return cursor.execute(*insert_statement(QUERIES, jobs, run_at)).fetchall()

    def _pending_with_key(self, connection: psycopg.Connection[Any], key: str) -> dict[str, Any] | None:
        with connection.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key}).fetchone()

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: psycopg.AsyncConnection
                            ) -> list[tuple[Job, bool]]:
        check_reach, offset = self.connections.check_reach, self.clock.interval()
        if type_name(connection) == "asyncpg.Connection":  # e.g. under SQLAlchemy's AsyncSession
            check_reach(await asyncpg_identity(connection, QUERIES["connection_identity"]))
            return await enqueue_asyncpg(connection, QUERIES, jobs, offset, utc)
        if not isinstance(connection, psycopg.AsyncConnection):
            raise ConfigurationError(wrong_connection(connection, "psycopg.AsyncConnection", "PostgreSQL",
                                                      "aenqueue() writes with an async connection"))
        check_reach(await callers.identity_async(connection, QUERIES["connection_identity"]))
        if CLOCK_SET.get(connection, "") != offset:
            await connection.execute(QUERIES["set_clock_offset"], {"offset": offset})
            CLOCK_SET[connection] = offset
        return await self._insert_async(connection, jobs)

    async def _insert_rows_async(self, connection: psycopg.AsyncConnection, jobs: Sequence[NewJob]
                                 ) -> list[tuple[Any, ...]]:
        async with connection.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(*insert_statement(QUERIES, jobs, run_at))
            return await cursor.fetchall()

    async def _pending_with_key_async(self, connection: psycopg.AsyncConnection, key: str
                                      ) -> dict[str, Any] | None:
        async with connection.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key})
            return await cursor.fetchone()

    # The dialect's hooks (sql/dialect.py).
    _to_time = staticmethod(utc)
    _from_json = staticmethod(decoded)
    # Schema: the shared runner (MIGRATOR), serialized by an advisory lock, in a transaction of
    # ours. A caller's open transaction (`callers_connection`) holds no lock of ours, so a missing
    # schema is created meanwhile on a connection of our own.
    _migrator = MIGRATOR

    def _transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                     ) -> AbstractContextManager[psycopg.Connection[dict[str, Any]]]:
        # wait_seconds bounds SQLite's wait for its one write lock; PostgreSQL has none to wait for.
        return self.connections.transaction(one_statement)

    @contextmanager
    def _migration_connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A transaction to apply a version in, whose lock waits are short (migration_lock_timeout):
        a DDL statement waiting for its lock holds up every claim, enqueue and renewal queued behind
        it, so it gives way and the runner tries again (SQLStore._apply_up_to)."""
        with self.connections.transaction() as connection:
            connection.execute(QUERIES["migration_lock_timeout"])
            yield connection

    def _execute(self, connection: psycopg.Connection[Any], name: str, /, **params: Any
                 ) -> psycopg.Cursor[dict[str, Any]]:
        # Rows as mappings on the caller's connection too, whatever its row factory.
        return connection.cursor(row_factory=dict_row).execute(QUERIES[name], params)

    def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return self.connections.rows(name, **params)

    def nudge(self, queue_names: Iterable[str]) -> None:  # a NOTIFY per queue, with no commit to ride on
        self._rows("nudge", queue_names=sorted(set(queue_names)))

    def _snapshot(self) -> AbstractContextManager[Callable[..., list[dict[str, Any]]]]:
        return self.connections.snapshot()

    def _time_in(self, value: datetime) -> datetime:
        return value

    def _list_param(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, errors.UniqueViolation)

    def _is_missing_table(self, error: BaseException) -> bool:
        return is_missing_table(error)

    def _schema_problem(self, applied: set[int]) -> str | None:
        if applied:
            return super()._schema_problem(applied)
        # No version table where the search path looks: name the search path, for it is often the
        # cause (a URL's options, or a role's setting, pointing at a schema leased never migrated).
        searched = self.connections.fetch_one("search_path")
        where = f"{self._where} with search_path {searched['search_path'] if searched else '?'!r}"
        return schema_problem(applied, MIGRATIONS, where)
