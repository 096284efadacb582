"""SQLite: the embedded default. One file, WAL, every write in a BEGIN IMMEDIATE transaction.

SQLite has one writer at a time. BEGIN IMMEDIATE takes the write lock up front, so a transaction
never has to upgrade a read lock (the case that returns "database is locked" at once, whatever
the busy timeout), and the busy timeout makes other processes queue behind it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, AsyncContextManager, Callable, Iterator, Sequence, TypeVar

from leased.admin import WORKER_SILENT_AFTER
from leased.backends import capabilities
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.backends.sql.async_drivers import enqueue_aiosqlite
from leased.backends.sql.callers import not_ours, type_name, wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.backends.sql.scripts import MIGRATE_HINT, schema_problem
from leased.backends.sql.store import SQLStore
from leased.backends.sql.wakeups import DatagramListener, Waker
from leased.backends.sqlite.async_handlers import AsyncHandlerConnections
from leased.backends.sqlite.connections import SQLiteConnections
from leased.backends.sqlite.locking import translated_lock_errors, write_lock
from leased.backends.sqlite import queries
from leased.backends.sqlite.queries import (MIGRATIONS, MIGRATOR, QUERIES, applied_versions, epoch,
                                            is_missing_table, prepare_connection, schema_compatibility, time_value)
from leased.clock import Clock
from leased.errors import ConfigurationError, SchemaNotReady
from leased.jobs import ClaimedJob, Job, Lease, NewJob
from leased.payloads import decode

# What tests, Django's tests and backends/__init__.py import from here.
__all__ = ["MIGRATIONS", "MIGRATOR", "QUERIES", "SQLiteBackend"]

T = TypeVar("T")


class SQLiteBackend(SQLStore):
    capabilities = capabilities.SQLITE

    def __init__(self, path: str):
        self.connections = SQLiteConnections(path)
        self.path = path
        self._where = self.connections.where
        self._files_reached: set[str] = set()  # callers' main database files found to be ours
        self._async_handlers = AsyncHandlerConnections(
            self.connections.open, lambda connection: write_lock(self.connections.write_lock, connection, path, None,
                                                                 queries.BUSY_TIMEOUT_MS))
        self._waker = Waker(self._wake_ports)

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"

    @property
    def clock(self) -> Clock:
        """What leased_now() reads on our connections and callers' (see leased.clock)."""
        return self.connections.clock

    # The dialect's connections (connections.py).
    def _connection(self) -> sqlite3.Connection:
        return self.connections.connection()

    def _transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                     ) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.transaction(wait_seconds, one_statement)

    def _rows(self, name: str, **params: Any) -> list[sqlite3.Row]:
        return self.connections.rows(name, **params)

    def _snapshot(self) -> AbstractContextManager[Callable[..., list[sqlite3.Row]]]:
        return self.connections.snapshot()

    def attempt_transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.attempt_transaction()

    def close(self) -> None:
        self.connections.close()

    def attempt_transaction_async(self) -> AsyncContextManager[Any]:
        return self._async_handlers.transaction()

    async def finish_in_async(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        return await asyncio.to_thread(self.finish_in, self._async_handlers.raw(connection), end)

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: Any) -> bool:
        return await asyncio.to_thread(self.record_step, lease, name, result_json, seconds,
                                       self._async_handlers.raw(connection))

    async def close_async(self) -> None:
        await self._async_handlers.close()

    def _wake_ports(self) -> list[int]:
        return [row["wake_port"] for row in self._rows("wake_ports", silent_after=WORKER_SILENT_AFTER)]

    def listener(self) -> DatagramListener:
        return DatagramListener()

    # Runtime.
    def _in_callers(self, connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        self._check_reach(callers(connection))
        prepare_connection(connection, self.clock.now)
        with translated_lock_errors(self.path):
            return work(connection)

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[tuple[Job, bool]]:
        """On a thread, so that waiting for the write lock does not stop the event loop; on the loop
        itself only when the caller's connection refuses other threads (check_same_thread)."""
        if type_name(connection) == "aiosqlite.Connection":  # e.g. under SQLAlchemy's AsyncSession
            async with connection.execute(QUERIES["main_database_file"]) as cursor:
                self._check_file(tuple(await cursor.fetchone())[0])
            return await enqueue_aiosqlite(connection, QUERIES, jobs, time_value, self.clock.now)
        try:
            return await asyncio.to_thread(self.enqueue, jobs, connection)
        except sqlite3.ProgrammingError as error:
            if "same thread" not in str(error):
                raise
            return self.enqueue(jobs, connection)  # refused at its first call: nothing was written

    def _check_reach(self, connection: sqlite3.Connection) -> None:
        cursor = connection.cursor()
        cursor.row_factory = None  # on the cursor: the caller's connection may use any row factory
        self._check_file(cursor.execute(QUERIES["main_database_file"]).fetchone()[0])

    def _check_file(self, file: str) -> None:
        """A caller's connection must have our file as its main database: the same file by device
        and inode, however its path was spelled (relative, through a symlink). A sqlite3 connection
        takes no weak reference to remember it by, so each call reads its file's name (a pragma,
        no I/O) and each name is compared with ours once."""
        if file in self._files_reached:
            return
        if not file:
            raise ConfigurationError(not_ours(
                "an in-memory or temporary SQLite database", self._where,
                f"leased's jobs live in a file that every worker opens: pass sqlite3.connect({self.path!r}), "
                "in tests too (a temporary file, not ':memory:')"))
        try:
            same = os.path.samefile(file, self.path)
        except OSError:  # ours does not exist (yet): theirs, which does, is another file
            same = False
        if not same:
            raise ConfigurationError(not_ours(f"SQLite file {file!r}", self._where))
        self._files_reached.add(file)

    def _insert_rows(self, connection: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[Any]:
        cursor = connection.cursor()
        cursor.row_factory = None  # on the cursor: the caller's connection may use any row factory
        return cursor.execute(*insert_statement(QUERIES, jobs, epoch)).fetchall()

    def _pending_with_key(self, connection: sqlite3.Connection, key: str) -> Any:  # a sqlite3.Row, or None
        # Our transaction holds the write lock, so no worker can claim the holder before we read
        # it, unless the caller's connection commits each statement on its own.
        cursor = connection.cursor()
        cursor.row_factory = sqlite3.Row
        return cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key}).fetchone()

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        params = {
            "worker_id": request.worker_id,
            "task_names": json.dumps(list(request.task_names)),
            "queue_names": None if request.queue_names is None else json.dumps(list(request.queue_names)),
            "limit": request.limit,
        }
        with self._transaction() as connection:
            if request.reclaim_expired:
                self._reclaim(connection)
            # One writer at a time: no other claim can run between counting a limit's room and taking it.
            limited = connection.execute(QUERIES["limits_in_use"]).fetchone()[0]
            rows = connection.execute(QUERIES["claim_limited" if limited else "claim"], params).fetchall()
            if len(rows) < request.limit and connection.execute(QUERIES["fairness_in_use"]).fetchone()[0]:
                rows += self._claim_fair(connection, {**params, "limit": request.limit - len(rows)})
            if rows and limited:
                connection.execute(QUERIES["record_starts"], {"job_ids": json.dumps([row["id"] for row in rows])})
                connection.execute(QUERIES["forget_old_starts"])
        return self._claimed(rows)

    def _claim_fair(self, connection: sqlite3.Connection, params: dict[str, Any]) -> list[sqlite3.Row]:
        """Fair jobs for the room the plain claim left, and their keys' passes moved on."""
        rows = connection.execute(QUERIES["claim_fair"], params).fetchall()
        if rows:
            connection.execute(QUERIES["advance_fair_keys"], {"job_ids": json.dumps([row["id"] for row in rows])})
        return rows

    # How rows hold times and JSON (seconds since the epoch, JSON text), for the shared reads.
    _to_time = staticmethod(time_value)
    _from_json = staticmethod(decode)


    def _time_in(self, value: datetime) -> float:
        return value.timestamp()

    def _ticks_enqueued(self, jobs: Sequence[Job]) -> None:
        self.wake(job.queue_name for job in jobs)

    def _list_param(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    @contextmanager
    def pruning(self) -> Iterator[bool]:
        yield True  # the write lock already serializes pruners batch by batch

    # Schema: the shared runner (MIGRATOR), serialized by BEGIN IMMEDIATE.
    _migrator = MIGRATOR

    def migrate(self, callers_connection: sqlite3.Connection | None = None) -> list[int]:
        """Finding the schema current takes no lock: a first use inside a caller's transaction,
        which holds the write lock, must not wait on it. Inside one, a missing schema is an error
        that says to migrate first: creating it in the caller's transaction would tie our schema to
        their commit or rollback."""
        if callers_connection is not None:
            self._check_reach(callers(callers_connection))  # before the schema: theirs may have none
        if callers_connection is not None and callers_connection.in_transaction:
            known = {migration.version for migration in self._migrator.migrations}
            if known - applied_versions(callers_connection):
                raise SchemaNotReady(
                    f"the leased schema is missing or behind in SQLite database {self.path!r}, and this first "
                    "use is inside your open transaction on connection=, whose write lock creating it would "
                    "wait for: create it first with `leased migrate APP`, or app.migrate() at start-up")
            return []
        return super().migrate()

    def _applied_versions(self) -> set[int]:
        return applied_versions(self._connection())

    def check_schema(self, callers_connection: sqlite3.Connection | None = None) -> None:
        if callers_connection is not None:  # inside the caller's transaction: a connection of ours would wait on it
            self._check_reach(callers(callers_connection))
            applied = applied_versions(callers_connection)
            problem = schema_problem(applied, self._migrator.migrations, self._where,
                                     schema_compatibility(callers_connection) if applied else None)
            if problem:
                raise SchemaNotReady(problem)
            return
        # Opening a missing file would create it, empty: a typo in the path would then look like
        # a database whose schema nobody applied.
        if not Path(self.path).exists():
            raise SchemaNotReady(f"SQLite database {self.path!r} does not exist (a typo in the path?): "
                                 f"{MIGRATE_HINT} to create it there")
        super().check_schema()

    def _execute(self, connection: sqlite3.Connection, name: str, /, **params: Any) -> sqlite3.Cursor:
        if connection.row_factory is sqlite3.Row:  # ours
            return connection.execute(QUERIES[name], params)
        cursor = connection.cursor()  # a caller's: rows as mappings whatever its row factory
        cursor.row_factory = sqlite3.Row
        return cursor.execute(QUERIES[name], params)

    def _is_missing_table(self, error: BaseException) -> bool:
        return is_missing_table(error)

    def _is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.IntegrityError)


def callers(connection: Any) -> sqlite3.Connection:
    if not isinstance(connection, sqlite3.Connection):
        raise ConfigurationError(wrong_connection(connection, "sqlite3.Connection", "SQLite"))
    return connection
