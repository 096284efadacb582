"""SQLite: the embedded default. One file, WAL, every write in a BEGIN IMMEDIATE transaction.

SQLite has one writer at a time. BEGIN IMMEDIATE takes the write lock up front, so a transaction
never has to upgrade a read lock (the case that returns "database is locked" at once, whatever
the busy timeout), and the busy timeout makes other processes queue behind it.

The backend is the shared parts (backends/sql/store.py) over SQLite's dialect (dialect.py), with
what only SQLite does: its claim, async handlers' connections (async_handlers.py), an enqueue on
an aiosqlite connection, and a schema read inside a caller's transaction.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, AsyncContextManager, Iterator, Sequence

from leased.admin import WORKER_SILENT_AFTER, OldTransaction
from leased.backends import capabilities
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.backends.sql.async_drivers import enqueue_aiosqlite
from leased.backends.sql.callers import type_name
from leased.backends.sql.database import Database
from leased.backends.sql.fenced import FencedEnds
from leased.backends.sql.scripts import MIGRATE_HINT, schema_problem
from leased.backends.sql.store import SQLParts
from leased.backends.sql.wakeups import DatagramListener, Waker
from leased.backends.sqlite import queries
from leased.backends.sqlite.async_handlers import AsyncHandlerConnections
from leased.backends.sqlite.connections import SQLiteConnections
from leased.backends.sqlite.dialect import SQLiteDialect, callers
from leased.backends.sqlite.locking import write_lock
from leased.backends.sqlite.queries import (
    MIGRATIONS, MIGRATOR, QUERIES, applied_versions, schema_compatibility, time_value)
from leased.clock import Clock
from leased.errors import SchemaNotReady
from leased.jobs import ClaimedJob, Job, Lease, NewJob

# What tests, Django's tests and backends/__init__.py import from here.
__all__ = ["MIGRATIONS", "MIGRATOR", "QUERIES", "SQLiteBackend"]


class SQLiteBackend:
    capabilities = capabilities.SQLITE
    reclaims_beside_claims = False  # in a claim's transaction once a second (see WorkerPort)
    polling_reason = None  # a datagram's listener is always there

    def __init__(self, path: str):
        self.connections = SQLiteConnections(path)
        self.path = path
        self.where = self.connections.where
        self.dialect = SQLiteDialect(self.connections)
        database = self.database = Database(self.dialect, Waker(self._wake_ports))
        self._async_handlers = AsyncHandlerConnections(
            self.connections.open, lambda connection: write_lock(self.connections.write_lock, connection, path, None,
                                                                 queries.BUSY_TIMEOUT_MS))
        parts = self.parts = SQLParts(database)
        # The shared verbs, each a part's own (backends/sql/store.py).
        self.enqueue, self.wake, self.nudge = parts.producer.enqueue, database.wake, database.wake
        writes = parts.shared_writes
        self.renew, self.finish, self.release = writes.renew, writes.finish, writes.release
        self.reclaim_expired, self.bury_workers = writes.reclaim_expired, writes.bury_workers
        self.retry, self.cancel, self.retry_failed = writes.retry, writes.cancel, writes.retry_failed
        self.cancel_pending, self.pause_queue, self.resume_queue = (
            writes.cancel_pending, writes.pause_queue, writes.resume_queue)
        self.prune_batch, self.fold_throughput = writes.prune_batch, writes.fold_throughput
        self.fenced = FencedEnds(database, writes.finish_on)
        self.finish_in, self.record_step = self.fenced.finish_in, self.fenced.record_step
        leases, admin, retention = parts.leases, parts.admin, parts.retention
        self.register_worker, self.unregister_worker = leases.register_worker, leases.unregister_worker
        self.set_queue_limit, self.prune_throughput = admin.set_queue_limit, retention.prune_throughput
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
        waits = parts.waits
        self.begin_wait, self.send_signal, self.wake_sleepers = waits.begin_wait, waits.send_signal, waits.wake_sleepers
        self.job_wait, self.signals = waits.job_wait, waits.signals

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"

    @property
    def clock(self) -> Clock:
        """What leased_now() reads on our connections and callers' (see leased.clock)."""
        return self.connections.clock

    def connection(self) -> sqlite3.Connection:
        """This thread's connection of ours (for tests and benchmarks that read the file directly)."""
        return self.connections.connection()

    def attempt_transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.attempt_transaction()

    def serving_worker(self) -> AbstractContextManager[None]:
        return nullcontext()  # one set of connections serves every caller

    def close(self) -> None:
        self.connections.close()

    def attempt_transaction_async(self) -> AsyncContextManager[Any]:
        return self._async_handlers.transaction()

    async def finish_in_async(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        return await asyncio.to_thread(self.fenced.finish_in, self._async_handlers.raw(connection), end)

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: Any) -> bool:
        return await asyncio.to_thread(self.fenced.record_step, lease, name, result_json, seconds,
                                       self._async_handlers.raw(connection))

    async def close_async(self) -> None:
        await self._async_handlers.close()

    def _wake_ports(self) -> list[int]:
        return [row["wake_port"] for row in self.dialect.rows("wake_ports", silent_after=WORKER_SILENT_AFTER)]

    def listener(self) -> DatagramListener:
        return DatagramListener()

    def old_transactions(self, older_than_seconds: float) -> tuple[OldTransaction, ...]:
        return ()  # SQLite has no horizon of old row versions that a transaction holds back

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[tuple[Job, bool]]:
        """On a thread, so that waiting for the write lock does not stop the event loop; on the loop
        itself only when the caller's connection refuses other threads (check_same_thread)."""
        if type_name(connection) == "aiosqlite.Connection":  # e.g. under SQLAlchemy's AsyncSession
            async with connection.execute(QUERIES["main_database_file"]) as cursor:
                self.dialect.check_file(tuple(await cursor.fetchone())[0])
            return await enqueue_aiosqlite(connection, QUERIES, jobs, time_value, self.clock.now)
        try:
            return await asyncio.to_thread(self.enqueue, jobs, connection)
        except sqlite3.ProgrammingError as error:
            if "same thread" not in str(error):
                raise
            return self.enqueue(jobs, connection)  # refused at its first call: nothing was written

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        params = {
            "worker_id": request.worker_id,
            "task_names": json.dumps(list(request.task_names)),
            "queue_names": None if request.queue_names is None else json.dumps(list(request.queue_names)),
            "limit": request.limit,
        }
        with self.connections.transaction() as connection:
            if request.reclaim_expired:
                self.parts.leases.reclaim(connection)
            # One writer at a time: no other claim can run between counting a limit's room and taking it.
            limited = connection.execute(QUERIES["limits_in_use"]).fetchone()[0]
            rows = connection.execute(QUERIES["claim_limited" if limited else "claim"], params).fetchall()
            if rows and limited:
                connection.execute(QUERIES["record_starts"], {"job_ids": json.dumps([row["id"] for row in rows])})
                connection.execute(QUERIES["forget_old_starts"])
        return self.database.claimed(rows)

    @contextmanager
    def pruning(self) -> Iterator[bool]:
        yield True  # the write lock already serializes pruners batch by batch

    # Schema: the shared part (sql/schema.py), but for a caller's open transaction.
    def migrate(self, callers_connection: sqlite3.Connection | None = None) -> list[int]:
        """Finding the schema current takes no lock: a first use inside a caller's transaction,
        which holds the write lock, must not wait on it. Inside one, a missing schema is an error
        that says to migrate first: creating it in the caller's transaction would tie our schema to
        their commit or rollback."""
        if callers_connection is not None:
            self.dialect.check_reach(callers(callers_connection))  # before the schema: theirs may have none
        if callers_connection is not None and callers_connection.in_transaction:
            known = {migration.version for migration in self.dialect.migrator.migrations}
            if known - applied_versions(callers_connection):
                raise SchemaNotReady(
                    f"the leased schema is missing or behind in SQLite database {self.path!r}, and this first "
                    "use is inside your open transaction on connection=, whose write lock creating it would "
                    "wait for: create it first with `leased migrate APP`, or app.migrate() at start-up")
            return []
        return self.parts.schema.migrate()

    def check_schema(self, callers_connection: sqlite3.Connection | None = None) -> None:
        if callers_connection is not None:  # inside the caller's transaction: a connection of ours would wait on it
            self.dialect.check_reach(callers(callers_connection))
            applied = applied_versions(callers_connection)
            problem = schema_problem(applied, self.dialect.migrator.migrations, self.where,
                                     schema_compatibility(callers_connection) if applied else None)
            if problem:
                raise SchemaNotReady(problem)
            return
        # Opening a missing file would create it, empty: a typo in the path would then look like
        # a database whose schema nobody applied.
        if not Path(self.path).exists():
            raise SchemaNotReady(f"SQLite database {self.path!r} does not exist (a typo in the path?): "
                                 f"{MIGRATE_HINT} to create it there")
        self.parts.schema.check_schema()
