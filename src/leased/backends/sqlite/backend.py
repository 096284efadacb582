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
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, AsyncContextManager, Callable, Iterator, Sequence, TypeVar

from leased.admin import WORKER_SILENT_AFTER
from leased.backends import capabilities
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.backends.sql.async_drivers import enqueue_aiosqlite
from leased.backends.sql.callers import not_ours, type_name, wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.backends.sql.migrate import Migrator
from leased.backends.sql.scripts import MIGRATE_HINT, load_migrations, load_queries, schema_problem
from leased.backends.sqlite.async_handlers import AsyncHandlerConnections
from leased.backends.sqlite.locking import is_lock_error, lock_message, translated_lock_errors, write_lock
from leased.backends.sql.wakeups import DatagramListener, Waker
from leased.backends.sql.store import SQLStore
from leased.clock import Clock
from leased.errors import (
    ConfigurationError,
    DatabaseFull,
    DatabaseLocked,
    DatabaseUnavailable,
    SchemaNotReady,
)
from leased.jobs import ClaimedJob, Job, Lease, NewJob
from leased.payloads import decode

T = TypeVar("T")
_HERE = Path(__file__).parent
QUERIES = load_queries(_HERE / "queries.sql")
MIGRATIONS = load_migrations(_HERE / "migrations")
BUSY_TIMEOUT_MS = 30_000


def _run_statement(connection: sqlite3.Connection, statement: str) -> list[tuple]:
    """One statement in the connection's transaction (executescript would commit it), its rows as tuples."""
    cursor = connection.cursor()
    cursor.row_factory = None  # on the cursor: a caller's connection (Django's) may use any row factory
    cursor.execute(statement)
    return cursor.fetchall()


# The migration runner's hooks. No lock of its own: a migration runs in a write transaction (ours
# is BEGIN IMMEDIATE), and SQLite has one writer. Recorded by SQL's clock, not leased_now(): the
# function exists only on connections leased prepared, and a caller's (Django's) need not be one.
MIGRATOR = Migrator(MIGRATIONS, QUERIES["create_version_table"], QUERIES["applied_versions"],
                    now_sql="(julianday('now') - 2440587.5) * 86400.0", run=_run_statement)


def _time(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def prepare_connection(connection: sqlite3.Connection, now: Callable[[], float] = time.time) -> None:
    """Give a connection (ours or a caller's) the clock function our queries use (the seam: leased.clock).
    Deterministic, which SQLite takes to mean "the same within one statement": it reads the clock
    once per statement, as PostgreSQL's now() is one time per transaction, and not once per row
    (a claim of 500 jobs called back into Python a thousand times)."""
    connection.create_function("leased_now", 0, now, deterministic=True)


class SQLiteBackend(SQLStore):
    capabilities = capabilities.SQLITE

    def __init__(self, path: str):
        self.path = path
        # The absolute path: a relative one names another file from another directory, and the
        # worker or CLI started there would serve a new, empty database without anyone noticing.
        shown = path if path == ":memory:" or path.startswith("file:") else os.path.abspath(path)
        self._where = f"SQLite database {shown!r}"
        self._files_reached: set[str] = set()  # callers' main database files found to be ours
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._async_handlers = AsyncHandlerConnections(
            self._open, lambda connection: write_lock(self._write_lock, connection, self.path, None, BUSY_TIMEOUT_MS))
        self._waker = Waker(self._wake_ports)
        self.clock = Clock()  # what leased_now() reads on our connections and callers' (see leased.clock)

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"

    # Connections: one per thread, since a sqlite3 connection must not be shared by threads at once.
    def _connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._open()
            connection.row_factory = sqlite3.Row
        return connection

    def _open(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                         timeout=BUSY_TIMEOUT_MS / 1000)
            _switch_to_wal(connection)
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.OperationalError as error:
            if is_lock_error(error):  # e.g. switching a new file to WAL while a caller writes to it
                raise DatabaseLocked(lock_message(self.path, "open")) from None
            raise DatabaseUnavailable(f"cannot open SQLite database {self.path!r}: {error}") from None
        prepare_connection(connection, self.clock.now)
        with self._lock:
            self._connections.append(connection)
        return connection

    @contextmanager
    def attempt_transaction(self) -> Iterator[sqlite3.Connection]:
        """A transactional handler's connection (one per handler thread, rows as tuples, as
        sqlite3's default), in a BEGIN IMMEDIATE transaction for the handler's whole run: taken
        up front, so that a read followed by a write never meets a commit made in between (which
        SQLite refuses at once, whatever the busy timeout). Other writers wait meanwhile."""
        connection = getattr(self._local, "handler_connection", None)
        if connection is None:
            connection = self._local.handler_connection = self._open()
        with write_lock(self._write_lock, connection, self.path, None, BUSY_TIMEOUT_MS):
            try:
                yield connection
                if connection.in_transaction:
                    connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

    # An async transactional handler's: an aiosqlite connection in the same kind of transaction
    # (async_handlers.py); its end and its steps are written by the same fenced code, on a thread.
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

    @contextmanager
    def _transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                     ) -> Iterator[sqlite3.Connection]:
        """A write transaction; waits for the write lock at most `wait_seconds` (default: the busy
        timeout), then raises DatabaseLocked rather than SQLite's bare "database is locked".
        `one_statement`: no BEGIN IMMEDIATE or COMMIT; the statement takes the lock and commits."""
        connection = self._connection()
        # Threads of one process queue here rather than in SQLite's busy handler, which polls
        # with sleeps of up to 100 ms; other processes still wait in the busy handler.
        with write_lock(self._write_lock, connection, self.path, wait_seconds, BUSY_TIMEOUT_MS,
                        begin=not one_statement):
            try:
                yield connection
                if connection.in_transaction:
                    connection.execute("COMMIT")
            except BaseException as error:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                if isinstance(error, sqlite3.OperationalError) and "full" in str(error):
                    raise DatabaseFull(f"SQLite database {self.path!r} is full ({error}); nothing was written. "
                                       "Free disk space, or prune finished jobs") from None
                if isinstance(error, sqlite3.OperationalError) and not is_lock_error(error):
                    raise self._unavailable(error) from error
                raise  # a lock waited for past the timeout: write_lock says for how long

    def _rows(self, name: str, **params: Any) -> list[sqlite3.Row]:
        try:
            return self._connection().execute(QUERIES[name], params).fetchall()
        except sqlite3.OperationalError as error:
            raise self._unavailable(error) from error

    def _unavailable(self, error: sqlite3.OperationalError) -> DatabaseUnavailable | SchemaNotReady:
        """sqlite3's errors stop here: a lock held past the wait and disk I/O errors, which the
        engine retries as it retries a lost server, and a missing table, which it does not."""
        if _is_missing_table(error):
            return SchemaNotReady(schema_problem(set(), self._migrator.migrations, self._where))
        if is_lock_error(error):
            return DatabaseLocked(lock_message(self.path, "read"))
        return DatabaseUnavailable(f"SQLite database {self.path!r}: {error}")

    def _wake_ports(self) -> list[int]:
        return [row["wake_port"] for row in self._rows("wake_ports", silent_after=WORKER_SILENT_AFTER)]

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()

    def listener(self) -> DatagramListener:
        return DatagramListener()

    # Runtime.
    def _in_callers(self, connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        self._check_reach(_callers(connection))
        prepare_connection(connection, self.clock.now)
        with translated_lock_errors(self.path):
            return work(connection)

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[tuple[Job, bool]]:
        """On a thread, so that waiting for the write lock does not stop the event loop; on the loop
        itself only when the caller's connection refuses other threads (check_same_thread)."""
        if type_name(connection) == "aiosqlite.Connection":  # e.g. under SQLAlchemy's AsyncSession
            async with connection.execute(QUERIES["main_database_file"]) as cursor:
                self._check_file(tuple(await cursor.fetchone())[0])
            return await enqueue_aiosqlite(connection, QUERIES, jobs, _time, self.clock.now)
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
        return cursor.execute(*insert_statement(QUERIES, jobs, _epoch)).fetchall()

    def _pending_with_key(self, connection: sqlite3.Connection, key: str) -> sqlite3.Row | None:
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
            if rows and limited:
                connection.execute(QUERIES["record_starts"], {"job_ids": json.dumps([row["id"] for row in rows])})
                connection.execute(QUERIES["forget_old_starts"])
        return self._claimed(rows)

    # How rows hold times and JSON (seconds since the epoch, JSON text), for the shared reads.
    _to_time = staticmethod(_time)
    _from_json = staticmethod(decode)

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[..., list[sqlite3.Row]]]:
        # In WAL mode a read transaction sees one state of the file from its first read on, and
        # blocks no writer.
        connection = self._connection()
        connection.execute("BEGIN")
        try:
            yield lambda name, **params: connection.execute(QUERIES[name], params).fetchall()
        finally:
            if connection.in_transaction:
                connection.execute("COMMIT")  # nothing was written: this only ends the read

    # Periodic jobs: the shared ScheduleStore, on a write transaction of ours (_transaction).

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
            self._check_reach(_callers(callers_connection))  # before the schema: theirs may have none
        if callers_connection is not None and callers_connection.in_transaction:
            known = {migration.version for migration in self._migrator.migrations}
            if known - _applied_versions(callers_connection):
                raise SchemaNotReady(
                    f"the leased schema is missing or behind in SQLite database {self.path!r}, and this first "
                    "use is inside your open transaction on connection=, whose write lock creating it would "
                    "wait for: create it first with `leased migrate APP`, or app.migrate() at start-up")
            return []
        return super().migrate()

    def _applied_versions(self) -> set[int]:
        return _applied_versions(self._connection())

    def check_schema(self, callers_connection: sqlite3.Connection | None = None) -> None:
        if callers_connection is not None:  # inside the caller's transaction: a connection of ours would wait on it
            self._check_reach(_callers(callers_connection))
            applied = _applied_versions(callers_connection)
            problem = schema_problem(applied, self._migrator.migrations, self._where,
                                     _schema_compatibility(callers_connection) if applied else None)
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
        return _is_missing_table(error)

    def _is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.IntegrityError)


def _switch_to_wal(connection: sqlite3.Connection) -> None:
    """WAL mode, waiting within the busy timeout for the lock it takes. SQLite itself gives up at
    once, without its busy handler, when connections opening a new file switch it together (one
    holds the lock the other's switch would wait for, and waiting could deadlock): seen when four
    processes migrated one new file at the same time. Once the file is in WAL mode this is a read."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.001
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if not is_lock_error(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # the other switch is a few milliseconds of work
        pause = min(pause * 2, 0.05)


def _is_missing_table(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "no such table: leased_" in str(error)


def _callers(connection: Any) -> sqlite3.Connection:
    if not isinstance(connection, sqlite3.Connection):
        raise ConfigurationError(wrong_connection(connection, "sqlite3.Connection", "SQLite"))
    return connection


def _schema_compatibility(connection: sqlite3.Connection) -> dict[int, int]:
    """{version: oldest code version that runs on it} (migration 0022), on any connection."""
    cursor = connection.cursor()
    cursor.row_factory = None
    try:
        return dict(cursor.execute(QUERIES["schema_compatibility"]).fetchall())
    except sqlite3.OperationalError as error:
        if _is_missing_table(error):
            return {}
        raise


def _applied_versions(connection: sqlite3.Connection) -> set[int]:
    """The versions recorded as applied, read without a write lock (none before the first migration)."""
    cursor = connection.cursor()
    cursor.row_factory = None  # on the cursor: a caller's connection may use any row factory
    try:
        return {row[0] for row in cursor.execute(QUERIES["applied_versions"])}
    except sqlite3.OperationalError as error:
        if _is_missing_table(error):
            return set()
        raise
