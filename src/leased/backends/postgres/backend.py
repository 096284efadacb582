"""PostgreSQL: many workers on many hosts, one pool of connections per process.

The backend is the shared parts (backends/sql/store.py) over PostgreSQL's dialect (dialect.py:
its connections, connections.py over pools.py: pools, the pooler, the clock seam, outages, stale
plans), with what only PostgreSQL does: its claim (claims.py), transactional handlers' connections
(handlers.py), and the write verbs it does in one statement each (fused.py).
`PostgresBackend(url, fused=False)` runs the shared sequence of those verbs instead, as the
conformance suite does to keep the two from drifting. Times come from now() on the server, so the
clocks of worker hosts never decide a lease.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from typing import Any, Iterable, Sequence

import psycopg

from leased.admin import OldTransaction
from leased.backends import capabilities
from leased.backends.postgres import callers
from leased.backends.postgres.blocking import BlockingConnection
from leased.backends.postgres.claims import PostgresClaims, rotate_due
from leased.backends.postgres.connections import CLOCK_SET, PostgresConnections
from leased.backends.postgres.dialect import PostgresDialect
from leased.backends.postgres.fused import FusedWrites
from leased.backends.postgres.handlers import HandlerConnections
from leased.backends.postgres.horizon import old_transactions
from leased.backends.postgres.listener import Listener
from leased.backends.postgres.pruning import pruning_lock
from leased.backends.postgres.queries import MIGRATIONS, MIGRATOR, QUERIES, utc
from leased.backends.postgres.url import connect_kwargs, described, listen_target, own_parameters, parsed
from leased.backends.ports import AttemptEnd
from leased.backends.sql.async_drivers import asyncpg_identity, enqueue_asyncpg
from leased.backends.sql.callers import type_name, wrong_connection
from leased.backends.sql.database import Database
from leased.backends.sql.fenced import FencedEnds
from leased.backends.sql.store import SQLParts
from leased.backends.sql.writes import Writes
from leased.clock import Clock
from leased.errors import ConfigurationError
from leased.jobs import Job, Lease, NewJob
from leased.limits import QueueLimit

# What tests and backends/__init__.py import from here.
__all__ = ["MIGRATIONS", "MIGRATOR", "QUERIES", "PostgresBackend"]


class PostgresBackend:
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
        self.where = described(params)
        self._listen = listen_target(own)  # a direct connection for LISTEN, when the URL goes through a pooler
        self.connections = PostgresConnections(url, connect_kwargs(params), self.where, min_connections,
                                               max_connections)
        self._handlers = HandlerConnections(self.connections)
        self.dialect = PostgresDialect(self.connections, self.where)
        database = self.database = Database(self.dialect)  # no waker: NOTIFY is delivered by the commit
        parts = self.parts = SQLParts(database)
        # The shared verbs, each a part's own (backends/sql/store.py).
        self.enqueue, self.wake = parts.producer.enqueue, database.wake
        # The write verbs in one statement each, or (fused=False) the shared sequence of statements.
        fused_writes = FusedWrites(self.connections, database, parts.step_ends, parts.admin)
        writes: Writes = fused_writes if fused else parts.shared_writes
        self.writes = writes
        self.renew, self.finish, self.release = writes.renew, writes.finish, writes.release
        self.bury_workers = writes.bury_workers
        self.retry, self.cancel, self.retry_failed = writes.retry, writes.cancel, writes.retry_failed
        self.cancel_pending, self.pause_queue, self.resume_queue = (
            writes.cancel_pending, writes.pause_queue, writes.resume_queue)
        self.prune_batch, self.fold_throughput = writes.prune_batch, writes.fold_throughput
        self.fenced = FencedEnds(database, writes.finish_on)
        self.finish_in, self.record_step = self.fenced.finish_in, self.fenced.record_step
        leases, retention = parts.leases, parts.retention
        self.register_worker, self.unregister_worker = leases.register_worker, leases.unregister_worker
        self.prune_throughput = retention.prune_throughput
        read = parts.inspection
        self.get_job, self.list_jobs, self.list_workers = read.get_job, read.list_jobs, read.list_workers
        self.counts, self.job_counts, self.oldest_due = read.counts, read.job_counts, read.oldest_due
        self.finished_since, self.task_names, self.queue_names = read.finished_since, read.task_names, read.queue_names
        self.count_jobs, self.recent_quarantined = read.count_jobs, read.recent_quarantined
        self.paused_queues, self.queue_limits, self.throughput = read.paused_queues, read.queue_limits, read.throughput
        self.why_facts, self.count_prunable = read.why_facts, read.count_prunable
        self.durable_steps = read.durable_steps
        self.schedule_states, self.run_schedules = parts.schedules.schedule_states, parts.schedules.run_schedules
        flows = parts.workflows
        self.enqueue_workflow, self.add_steps = flows.enqueue_workflow, flows.add_steps
        self.parents_of, self.step_names = flows.parents_of, flows.step_names
        self.get_workflow, self.list_workflows = flows.get_workflow, flows.list_workflows
        self.cancel_workflow, self.retry_workflow = flows.cancel_workflow, flows.retry_workflow
        self.migration_sql = parts.schema.migration_sql
        self.migrate, self.check_schema = parts.schema.migrate, parts.schema.check_schema
        waits = parts.waits
        self.begin_wait, self.send_signal, self.wake_sleepers = waits.begin_wait, waits.send_signal, waits.wake_sleepers
        self.job_wait, self.signals = waits.job_wait, waits.signals
        # The claim's reclaim is one statement whatever the writes: the steps it leaves, the fused way.
        self.claims = PostgresClaims(self.connections, database.claimed, fused_writes.reclaim_expired_steps,
                                     self.wake_sleepers)
        self.claim = self.claims.claim

    def __repr__(self) -> str:
        return f"PostgresBackend({self.where})"

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
                            self.where)
        if self._listen is None:
            return None  # see polling_reason
        listen_url, listen_kwargs, listen_where = self._listen
        return Listener(listen_url, listen_kwargs, QUERIES["wake_channel"], listen_where,
                        expected=self.connections.reached_now, identity_query=QUERIES["connection_identity"])

    @property
    def polling_reason(self) -> str | None:
        """Why this backend gives no wake-ups (listener() is None), in a line; None when it does."""
        if self.connections.pools.pooled() and self._listen is None:
            return (f"{self.where} is reached through a pooler (PgBouncer?), where LISTEN cannot work; "
                    "add listen_url=<a direct URL> to the database URL for push wake-ups")
        return None

    def nudge(self, queue_names: Iterable[str]) -> None:  # a NOTIFY per queue, with no commit to ride on
        self.dialect.rows("nudge", queue_names=sorted(set(queue_names)))

    def old_transactions(self, older_than_seconds: float) -> tuple[OldTransaction, ...]:
        return old_transactions(self.dialect.rows, older_than_seconds)

    def pruning(self) -> AbstractContextManager[bool]:
        return pruning_lock(self.connections)

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        reclaimed = self.writes.reclaim_expired(skip_if_done_within)
        # Once a second per worker, its turn at the reclaim or not: the rotation, and the sleepers woken.
        with self.connections.connection() as connection:
            rotate_due(connection)
        return reclaimed + self.wake_sleepers()

    def set_queue_limit(self, limit: QueueLimit) -> None:
        self.parts.admin.set_queue_limit(limit)
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
        return await asyncio.to_thread(self.fenced.finish_fenced, blocking, end)

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: psycopg.AsyncConnection) -> bool:
        await self._handlers.set_clock_async(connection)
        blocking = BlockingConnection(connection, asyncio.get_running_loop())
        return await asyncio.to_thread(self.fenced.record_step, lease, name, result_json, seconds, blocking)

    async def close_async(self) -> None:
        await self._handlers.close_async()

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
        return await self.parts.producer.insert_async(connection, jobs, self.dialect.insert_rows_async,
                                                      self.dialect.pending_with_key_async)
