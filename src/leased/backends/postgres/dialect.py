"""PostgreSQL as a dialect (backends/sql/dialect.py): its connections (connections.py over
pools.py), its named queries (queries.sql), timestamptz and json columns, arrays as list
parameters, and a caller's connection checked to reach our database before an enqueue writes on
it. A caller's open transaction holds no lock of ours, so a missing schema is created meanwhile on
a connection of our own; the migrations are serialized by an advisory lock."""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Callable, Iterator, Sequence, TypeVar

import psycopg
from psycopg import errors
from psycopg.rows import dict_row, tuple_row

from leased.backends import capabilities
from leased.backends.postgres import callers
from leased.backends.postgres.blocking import BlockingConnection
from leased.backends.postgres.connections import PostgresConnections, is_missing_table
from leased.backends.postgres.queries import MIGRATOR, QUERIES, decoded, run_at, utc
from leased.backends.sql.callers import wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.errors import ConfigurationError
from leased.jobs import NewJob

T = TypeVar("T")


class PostgresDialect:
    capabilities = capabilities.POSTGRES
    migrator = MIGRATOR
    to_time = staticmethod(utc)
    from_json = staticmethod(decoded)

    def __init__(self, connections: PostgresConnections, where: str):
        self.connections = connections
        self.where = where

    # Connections (connections.py).
    def transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                    ) -> AbstractContextManager[psycopg.Connection[dict[str, Any]]]:
        # wait_seconds bounds SQLite's wait for its one write lock; PostgreSQL has none to wait for.
        return self.connections.transaction(one_statement)

    @contextmanager
    def migration_connection(self, outside_transaction: bool = False) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A transaction to apply a version in, whose lock waits are short (migration_lock_timeout):
        a DDL statement waiting for its lock holds up every claim, enqueue and renewal queued behind
        it, so it gives way and the runner tries again (sql/schema.py). A version outside one (CREATE
        INDEX CONCURRENTLY) holds up nobody while it waits, so it waits as long as it must."""
        with self.connections.transaction(one_statement=outside_transaction) as connection:
            if not outside_transaction:
                connection.execute(QUERIES["migration_lock_timeout"])
            yield connection

    def execute(self, connection: psycopg.Connection[Any], name: str, /, **params: Any
                ) -> psycopg.Cursor[dict[str, Any]]:
        # Rows as mappings on the caller's connection too, whatever its row factory.
        return connection.cursor(row_factory=dict_row).execute(QUERIES[name], params)

    def rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return self.connections.rows(name, **params)

    def snapshot(self) -> AbstractContextManager[Callable[..., list[dict[str, Any]]]]:
        return self.connections.snapshot()

    # Enqueue's two steps, on our connection or the caller's; the row factory goes on the cursor,
    # since the caller's connection may use any.
    def in_callers(self, connection: psycopg.Connection[Any], work: Callable[[psycopg.Connection[Any]], T]) -> T:
        if isinstance(connection, BlockingConnection):  # an async handler's, of our own pool: set up already
            return work(connection)
        if not isinstance(connection, psycopg.Connection):
            raise ConfigurationError(wrong_connection(connection, "psycopg.Connection", "PostgreSQL",
                                                      "for a psycopg.AsyncConnection use aenqueue()"))
        self.connections.check_reach(callers.identity(connection, QUERIES["connection_identity"]))
        self.connections.set_clock(connection)
        return work(connection)

    def insert_rows(self, connection: psycopg.Connection[Any], jobs: Sequence[NewJob]) -> list[tuple[Any, ...]]:
        with connection.cursor(row_factory=tuple_row) as cursor:
            return cursor.execute(*insert_statement(QUERIES, jobs, run_at)).fetchall()

    def pending_with_key(self, connection: psycopg.Connection[Any], key: str) -> dict[str, Any] | None:
        with connection.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key}).fetchone()

    async def insert_rows_async(self, connection: psycopg.AsyncConnection, jobs: Sequence[NewJob]
                                ) -> list[tuple[Any, ...]]:
        async with connection.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(*insert_statement(QUERIES, jobs, run_at))
            return await cursor.fetchall()

    async def pending_with_key_async(self, connection: psycopg.AsyncConnection, key: str) -> dict[str, Any] | None:
        async with connection.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key})
            return await cursor.fetchone()

    # Values in, and what psycopg's errors mean.
    def list_param(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def time_in(self, value: datetime) -> datetime:
        return value

    def is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, errors.UniqueViolation)

    def is_missing_table(self, error: BaseException) -> bool:
        return is_missing_table(error)

    def where_schema_is_missing(self) -> str:
        """No version table where the search path looks: name the search path, for it is often the
        cause (a URL's options, or a role's setting, pointing at a schema leased never migrated)."""
        searched = self.connections.fetch_one("search_path")
        return f"{self.where} with search_path {searched['search_path'] if searched else '?'!r}"
