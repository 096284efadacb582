"""SQLite's named queries and migrations, loaded once; the migration runner over them; how its
columns hold times; and the schema's versions as read on any connection, ours or a caller's."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Callable

from leased.backends.sql.migrate import Migrator
from leased.backends.sql.scripts import load_migrations, load_queries

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


def time_value(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def prepare_connection(connection: sqlite3.Connection, now: Callable[[], float] = time.time) -> None:
    """Give a connection (ours or a caller's) the clock function our queries use (the seam: leased.clock).
    Deterministic, which SQLite takes to mean "the same within one statement": it reads the clock
    once per statement, as PostgreSQL's now() is one time per transaction, and not once per row
    (a claim of 500 jobs called back into Python a thousand times)."""
    connection.create_function("leased_now", 0, now, deterministic=True)



def is_missing_table(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "no such table: leased_" in str(error)


def schema_compatibility(connection: sqlite3.Connection) -> dict[int, int]:
    """{version: oldest code version that runs on it} (migration 0022), on any connection."""
    cursor = connection.cursor()
    cursor.row_factory = None
    try:
        return dict(cursor.execute(QUERIES["schema_compatibility"]).fetchall())
    except sqlite3.OperationalError as error:
        if is_missing_table(error):
            return {}
        raise


def applied_versions(connection: sqlite3.Connection) -> set[int]:
    """The versions recorded as applied, read without a write lock (none before the first migration)."""
    cursor = connection.cursor()
    cursor.row_factory = None  # on the cursor: a caller's connection may use any row factory
    try:
        return {row[0] for row in cursor.execute(QUERIES["applied_versions"])}
    except sqlite3.OperationalError as error:
        if is_missing_table(error):
            return set()
        raise

