"""SQLite as a dialect (backends/sql/dialect.py): its connections (connections.py), its named
queries (queries.sql), how its columns hold times and JSON (epoch seconds, JSON text), and a
caller's connection checked to open our file before an enqueue writes on it."""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Callable, Sequence, TypeVar

from leased.backends import capabilities
from leased.backends.sql.callers import not_ours, wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.backends.sqlite.connections import SQLiteConnections
from leased.backends.sqlite.locking import translated_lock_errors
from leased.backends.sqlite.queries import MIGRATOR, QUERIES, epoch, is_missing_table, prepare_connection, time_value
from leased.errors import ConfigurationError
from leased.jobs import NewJob
from leased.payloads import decode

T = TypeVar("T")


class SQLiteDialect:
    capabilities = capabilities.SQLITE
    # The shared runner (MIGRATOR), serialized by BEGIN IMMEDIATE.
    migrator = MIGRATOR
    to_time = staticmethod(time_value)
    from_json = staticmethod(decode)

    def __init__(self, connections: SQLiteConnections):
        self.connections = connections
        self.path = connections.path
        self.where = connections.where
        self._files_reached: set[str] = set()  # callers' main database files found to be ours

    # Connections (connections.py).
    def transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                    ) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.transaction(wait_seconds, one_statement)

    def migration_connection(self, outside_transaction: bool = False) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.transaction(one_statement=outside_transaction)

    def rows(self, name: str, **params: Any) -> list[sqlite3.Row]:
        return self.connections.rows(name, **params)

    def snapshot(self) -> AbstractContextManager[Callable[..., list[sqlite3.Row]]]:
        return self.connections.snapshot()

    def execute(self, connection: sqlite3.Connection, name: str, /, **params: Any) -> sqlite3.Cursor:
        if connection.row_factory is sqlite3.Row:  # ours
            return connection.execute(QUERIES[name], params)
        cursor = connection.cursor()  # a caller's: rows as mappings whatever its row factory
        cursor.row_factory = sqlite3.Row
        return cursor.execute(QUERIES[name], params)

    # Enqueue's two steps, on our connection or the caller's.
    def in_callers(self, connection: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        self.check_reach(callers(connection))
        prepare_connection(connection, self.connections.clock.now)
        with translated_lock_errors(self.path):
            return work(connection)

    def insert_rows(self, connection: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[Any]:
        cursor = connection.cursor()
        cursor.row_factory = None  # on the cursor: the caller's connection may use any row factory
        return cursor.execute(*insert_statement(QUERIES, jobs, epoch)).fetchall()

    def pending_with_key(self, connection: sqlite3.Connection, key: str) -> Any:  # a sqlite3.Row, or None
        # Our transaction holds the write lock, so no worker can claim the holder before we read
        # it, unless the caller's connection commits each statement on its own.
        cursor = connection.cursor()
        cursor.row_factory = sqlite3.Row
        return cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key}).fetchone()

    def check_reach(self, connection: sqlite3.Connection) -> None:
        cursor = connection.cursor()
        cursor.row_factory = None  # on the cursor: the caller's connection may use any row factory
        self.check_file(cursor.execute(QUERIES["main_database_file"]).fetchone()[0])

    def check_file(self, file: str) -> None:
        """A caller's connection must have our file as its main database: the same file by device
        and inode, however its path was spelled (relative, through a symlink). A sqlite3 connection
        takes no weak reference to remember it by, so each call reads its file's name (a pragma,
        no I/O) and each name is compared with ours once."""
        if file in self._files_reached:
            return
        if not file:
            raise ConfigurationError(not_ours(
                "an in-memory or temporary SQLite database", self.where,
                f"leased's jobs live in a file that every worker opens: pass sqlite3.connect({self.path!r}), "
                "in tests too (a temporary file, not ':memory:')"))
        try:
            same = os.path.samefile(file, self.path)
        except OSError:  # ours does not exist (yet): theirs, which does, is another file
            same = False
        if not same:
            raise ConfigurationError(not_ours(f"SQLite file {file!r}", self.where))
        self._files_reached.add(file)

    # Values in, and what sqlite3's errors mean.
    def list_param(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    def time_in(self, value: datetime) -> float:
        return value.timestamp()

    def is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.IntegrityError)

    def is_missing_table(self, error: BaseException) -> bool:
        return is_missing_table(error)

    def where_schema_is_missing(self) -> str:
        return self.where


def callers(connection: Any) -> sqlite3.Connection:
    if not isinstance(connection, sqlite3.Connection):
        raise ConfigurationError(wrong_connection(connection, "sqlite3.Connection", "SQLite"))
    return connection
