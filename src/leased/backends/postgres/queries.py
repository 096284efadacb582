"""PostgreSQL's named queries and migrations, loaded once, and the migration runner over them."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Iterator

import psycopg
from psycopg.rows import tuple_row

from leased.backends.sql.migrate import Migrator
from leased.backends.sql.scripts import load_migrations, load_queries

_HERE = Path(__file__).parent
QUERIES = load_queries(_HERE / "queries.sql")
MIGRATIONS = load_migrations(_HERE / "migrations")


def utc(value: datetime | None) -> datetime | None:
    # The session's TimeZone decides the offset psycopg returns; give the same UTC values as SQLite.
    # A naive time is one that the insert queries return as UTC (see insert_jobs).
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def decoded(value: Any) -> Any:
    return value  # psycopg has decoded json columns already


def run_at(value: datetime) -> str:
    # astimezone(): a naive time means local time, as datetime.timestamp() reads it for SQLite.
    return value.astimezone(UTC).isoformat()


def _run_statement(connection: psycopg.Connection, statement: str) -> list[tuple]:
    """A statement, or a script (no parameters: sent as one multi-statement query), its rows as
    tuples on any connection (ours return dicts, Django's tuples)."""
    with connection.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(statement)
        return cursor.fetchall() if cursor.description else []


@contextmanager
def _migration_lock(connection: psycopg.Connection) -> Iterator[None]:
    """A transaction-scoped advisory lock: held until the connection's transaction (ours, or
    Django's migration's) ends. It comes before CREATE TABLE IF NOT EXISTS, which is not safe
    against a concurrent twin; the second migrator then reads the versions the first committed."""
    _run_statement(connection, QUERIES["migration_lock"])
    yield


@contextmanager
def _migration_session_lock(connection: psycopg.Connection) -> Iterator[None]:
    """The advisory lock, held by the session across a migration that commits statement by statement."""
    _run_statement(connection, QUERIES["migration_session_lock"])
    try:
        yield
    finally:
        _run_statement(connection, QUERIES["migration_session_unlock"])


MIGRATOR = Migrator(MIGRATIONS, QUERIES["create_version_table"], QUERIES["applied_versions"], now_sql="now()",
                    run=_run_statement, lock=_migration_lock, whole_scripts=True, session_lock=_migration_session_lock)
