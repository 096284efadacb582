"""SQLite's connections: one per thread (a sqlite3 connection must not be shared by threads at
once), in WAL mode with the clock function our queries use; write transactions that take the one
write lock up front (BEGIN IMMEDIATE, threads of a process queuing in locking.py); and sqlite3's
errors stopped here as leased's."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from leased.backends.sql.scripts import schema_problem
from leased.backends.sqlite.locking import is_lock_error, lock_message, write_lock
from leased.backends.sqlite import queries
from leased.backends.sqlite.queries import MIGRATIONS, QUERIES, is_missing_table, prepare_connection
from leased.clock import Clock
from leased.errors import DatabaseFull, DatabaseLocked, DatabaseUnavailable, SchemaNotReady


class SQLiteConnections:
    def __init__(self, path: str):
        self.path = path
        # The absolute path: a relative one names another file from another directory, and the
        # worker or CLI started there would serve a new, empty database without anyone noticing.
        shown = path if path == ":memory:" or path.startswith("file:") else os.path.abspath(path)
        self.where = f"SQLite database {shown!r}"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.clock = Clock()  # what leased_now() reads on our connections and callers' (see leased.clock)

    def connection(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self.open()
            connection.row_factory = sqlite3.Row
        return connection

    def open(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                         timeout=queries.BUSY_TIMEOUT_MS / 1000)
            switch_to_wal(connection)
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute(f"PRAGMA busy_timeout = {queries.BUSY_TIMEOUT_MS}")
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
            connection = self._local.handler_connection = self.open()
        with write_lock(self.write_lock, connection, self.path, None, queries.BUSY_TIMEOUT_MS):
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

    @contextmanager
    def transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                     ) -> Iterator[sqlite3.Connection]:
        """A write transaction; waits for the write lock at most `wait_seconds` (default: the busy
        timeout), then raises DatabaseLocked rather than SQLite's bare "database is locked".
        `one_statement`: no BEGIN IMMEDIATE or COMMIT; the statement takes the lock and commits."""
        connection = self.connection()
        # Threads of one process queue here rather than in SQLite's busy handler, which polls
        # with sleeps of up to 100 ms; other processes still wait in the busy handler.
        with write_lock(self.write_lock, connection, self.path, wait_seconds, queries.BUSY_TIMEOUT_MS,
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
                    raise self.unavailable(error) from error
                raise  # a lock waited for past the timeout: write_lock says for how long

    def rows(self, name: str, **params: Any) -> list[sqlite3.Row]:
        try:
            return self.connection().execute(QUERIES[name], params).fetchall()
        except sqlite3.OperationalError as error:
            raise self.unavailable(error) from error

    def unavailable(self, error: sqlite3.OperationalError) -> DatabaseUnavailable | SchemaNotReady:
        """sqlite3's errors stop here: a lock held past the wait and disk I/O errors, which the
        engine retries as it retries a lost server, and a missing table, which it does not."""
        if is_missing_table(error):
            return SchemaNotReady(schema_problem(set(), MIGRATIONS, self.where))
        if is_lock_error(error):
            return DatabaseLocked(lock_message(self.path, "read"))
        return DatabaseUnavailable(f"SQLite database {self.path!r}: {error}")


    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()


    @contextmanager
    def snapshot(self) -> Iterator[Callable[..., list[sqlite3.Row]]]:
        # In WAL mode a read transaction sees one state of the file from its first read on, and
        # blocks no writer.
        connection = self.connection()
        connection.execute("BEGIN")
        try:
            yield lambda name, **params: connection.execute(QUERIES[name], params).fetchall()
        finally:
            if connection.in_transaction:
                connection.execute("COMMIT")  # nothing was written: this only ends the read


def switch_to_wal(connection: sqlite3.Connection) -> None:
    """WAL mode, waiting within the busy timeout for the lock it takes. SQLite itself gives up at
    once, without its busy handler, when connections opening a new file switch it together (one
    holds the lock the other's switch would wait for, and waiting could deadlock): seen when four
    processes migrated one new file at the same time. Once the file is in WAL mode this is a read."""
    deadline = time.monotonic() + queries.BUSY_TIMEOUT_MS / 1000
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

