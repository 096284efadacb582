"""MariaDB as a dialect (backends/sql/dialect.py): its connections (connections.py), its named
queries (queries.sql, through server.py), how its columns hold times and JSON (epoch seconds,
JSON text), and a caller's connection checked to reach our server and database before an enqueue
writes on it. UPDATE has no RETURNING here (capabilities.MARIADB.update_returning)."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, Callable, Iterator, Sequence, TypeVar

from leased.backends import capabilities
from leased.backends.mariadb import driver
from leased.backends.mariadb.connections import MariaDBConnections, is_missing_table
from leased.backends.mariadb.server import (ER_DUP_ENTRY, KEY_INDEX, MIGRATOR, QUERIES, epoch, errno, packet_problem,
                                            refused_by, statement_bytes, time_value)
from leased.backends.sql.callers import wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.errors import ConfigurationError, PayloadError
from leased.jobs import NewJob
from leased.payloads import decode

T = TypeVar("T")


class MariaDBDialect:
    capabilities = capabilities.MARIADB
    # The shared runner (MIGRATOR), under its named lock, on a connection of ours that autocommits:
    # a transaction would not hold DDL.
    migrator = MIGRATOR
    to_time = staticmethod(time_value)
    from_json = staticmethod(decode)

    def __init__(self, connections: MariaDBConnections):
        self.connections = connections
        self.where = connections.where

    # Connections (connections.py).
    def transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                    ) -> AbstractContextManager[Any]:
        return self.connections.transaction(wait_seconds, one_statement)

    @contextmanager
    def migration_connection(self, outside_transaction: bool = False) -> Iterator[Any]:
        with self.connections.translated():  # DDL commits on its own here: every version is "outside"
            yield self.connections.connection()

    def rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return self.connections.rows(name, **params)

    def execute(self, connection: Any, name: str, /, **params: Any) -> Any:
        return self.connections.execute(connection, name, **params)

    @contextmanager
    def snapshot(self) -> Iterator[Callable[..., list[dict[str, Any]]]]:
        with self.connections.translated():
            connection = self.connections.connection()
            self.execute(connection, "why_snapshot")  # one consistent read, until the commit
            try:
                yield lambda name, **params: list(self.execute(connection, name, **params).fetchall())
            finally:
                connection.commit()

    # Enqueue's two steps, on our connection or the caller's.
    def in_callers(self, connection: Any, work: Callable[[Any], T]) -> T:
        if driver.connection_driver(connection) is None:
            raise ConfigurationError(
                wrong_connection(connection, "pymysql.Connection or MySQLdb.Connection", "MariaDB"))
        self.connections.check_server(connection)
        self.connections.check_reach(connection)
        with self.connections.translated():  # the caller's transaction: we never commit it
            self.connections.set_clock(connection)
            return work(connection)

    def insert_rows(self, connection: Any, jobs: Sequence[NewJob]) -> list[tuple[Any, ...]]:
        """The rows inserted; none for a job whose key a pending job holds. The duplicate-key error
        rolls back its statement only (InnoDB), so a batch that met one goes again job by job, in
        the transaction a batch with keys always has (needs_no_transaction)."""
        statement, params = insert_statement(QUERIES, jobs, epoch)
        size = statement_bytes(statement, params)
        if self.connections.max_packet is not None and size > self.connections.max_packet:
            raise PayloadError(f"{self.where}: {packet_problem(size, self.connections.max_packet)}; "
                               "nothing was written")
        try:
            with driver.tuple_cursor(connection) as cursor:
                cursor.execute(statement, params)
                return list(cursor.fetchall())
        except driver.IntegrityError as error:
            if not refused_by(error, KEY_INDEX):
                raise
        if len(jobs) == 1:
            return []
        return [row for job in jobs for row in self.insert_rows(connection, [job])]

    def pending_with_key(self, connection: Any, key: str) -> dict[str, Any] | None:
        with driver.dict_cursor(connection) as cursor:
            cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key})
            return cursor.fetchone()

    # Values in, and what the driver's errors mean.
    def list_param(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    def time_in(self, value: datetime) -> float:
        return value.timestamp()

    def is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, driver.IntegrityError) and errno(error) == ER_DUP_ENTRY

    def is_missing_table(self, error: BaseException) -> bool:
        return is_missing_table(error)

    def where_schema_is_missing(self) -> str:
        return self.where
