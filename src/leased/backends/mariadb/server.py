"""The MariaDB server as leased meets it: its URL, its named queries (with the clock seam in
leased_now()), its migrations and their runner, the servers it refuses, and what its error
numbers mean."""

from __future__ import annotations

import re
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote, urlsplit

from leased.backends.mariadb import driver
from leased.backends.sql.migrate import Migrator
from leased.backends.sql.scripts import load_migrations, load_queries
from leased.backends.urls import redacted
from leased.errors import ConfigurationError, DatabaseConflict

_HERE = Path(__file__).parent
# leased_now() in queries.sql: the server's clock plus this session's clock seam offset (leased.clock).
# Written out rather than a stored function: MariaDB inlines none, and a function call would be
# evaluated row by row and bound no index range. A session that never set the variable has no offset.
NOW_SQL = "(UNIX_TIMESTAMP(NOW(6)) + COALESCE(@leased_clock_offset, 0))"
QUERIES = {name: text.replace("leased_now()", NOW_SQL) for name, text in load_queries(_HERE / "queries.sql").items()}
MIGRATIONS = load_migrations(_HERE / "migrations")
CONNECT_TIMEOUT_SECONDS = 10
LOCK_WAIT_SECONDS = 30  # innodb_lock_wait_timeout for our sessions

# The oldest MariaDB with everything the queries use (JSON_TABLE, FOR UPDATE SKIP LOCKED).
OLDEST_MARIADB = (10, 6)

# Server error numbers: a transaction the server broke off (worth running again), a table that is
# not there, and a key already taken.
ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT = 1213, 1205
ER_LOST_DURING_QUERY = 2013  # CR_SERVER_LOST: the request was sent, its answer never came
ER_STATEMENT_TIMEOUT = 1969  # max_statement_time, which a DBA may set per user: another try is the cure
ER_NO_SUCH_TABLE, ER_DUP_ENTRY = 1146, 1062
ER_PACKET_TOO_LARGE = 1153  # a statement past the server's max_allowed_packet
# A grant missing: on the database, a table, a column (ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ...).
ER_ACCESS_DENIED = {1044, 1142, 1143}
# Inserts whose refusal by this unique index means "taken already: no row back" (a run's key, a
# schedule's tick). Caught by the index's name: INSERT IGNORE would turn strict-mode data errors
# into warnings too.
NO_ROW_WHEN_TAKEN = {"insert_workflow": "idempotency_key", "claim_tick": "PRIMARY"}
# What a user that runs leased needs (docs/reliability.md, Least privilege); migrating needs more.
RUNNING_GRANTS = "GRANT SELECT, INSERT, UPDATE, DELETE ON `<leased's database>`.* TO <user>"
# The unique index on a pending job's idempotency key (migration 0001): its refusal means "key held".
KEY_INDEX = "leased_jobs_idempotency_key"
# Client errors: the server is gone, or never answered.
CONNECTION_LOST = {2002, 2003, 2005, 2006, 2013, 2055, 1927, 4031}

def time_value(value: Any) -> Any:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


def epoch(value: Any) -> float:
    return value.timestamp()


def errno(error: BaseException) -> int | None:
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class NoRows:
    """The cursor of an insert that a taken key refused: no row, none changed."""

    rowcount = 0

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []


NO_ROWS = NoRows()


def refused_by(error: BaseException, index: str) -> bool:
    """Whether `error` is the duplicate-key error of this unique index ("... for key 'name'")."""
    return errno(error) == ER_DUP_ENTRY and str(error.args[-1]).endswith(f"for key '{index}'")


def _run_statement(connection: Any, statement: str) -> list[tuple]:
    """One statement (the driver runs no more per call), its rows as tuples, on a connection of
    either driver: ours, or Django's."""
    with driver.tuple_cursor(connection) as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall()) if cursor.description else []


@contextmanager
def _migration_lock(connection: Any) -> Iterator[None]:
    """DDL commits on its own in MariaDB, so migrators take turns under a named lock rather than in
    one transaction (and each version is recorded once applied)."""
    ((locked,),) = _run_statement(connection, QUERIES["migration_lock"])
    if not locked:
        raise DatabaseConflict("another migrator held leased's migration lock for 60 s")
    try:
        yield
    finally:
        _run_statement(connection, QUERIES["migration_unlock"])


MIGRATOR = Migrator(MIGRATIONS, QUERIES["create_version_table"], QUERIES["applied_versions"],
                    now_sql="UNIX_TIMESTAMP(NOW(6))",  # the schema's own clock, not leased_now()'s seam
                    run=_run_statement, lock=_migration_lock, delimits_bodies=True)


def connect_arguments(url: str) -> tuple[dict[str, Any], str]:
    """driver.DRIVER.connect()'s arguments for a mariadb:// or mysql:// URL, and the database's name for messages."""
    parts = urlsplit(url)
    database = parts.path.lstrip("/")
    if not database:
        raise ConfigurationError(f"invalid MariaDB URL {redacted(url)!r}: name the database, e.g. mariadb://user@host/dbname")
    try:
        port = parts.port
    except ValueError as error:  # not a number, or past 65535: urlsplit reads the port only when asked
        raise ConfigurationError(f"invalid MariaDB URL {redacted(url)!r}: {error}; give the port as a number "
                                 "from 1 to 65535, e.g. mariadb://user@host:3306/dbname") from None
    arguments: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1", "port": port or 3306, "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""), "database": database, "charset": "utf8mb4",
        "connect_timeout": CONNECT_TIMEOUT_SECONDS, "autocommit": True,
    }
    return arguments, f"MariaDB database {database!r} on {arguments['host']}:{arguments['port']}"


def statement_bytes(statement: str, params: dict[str, Any]) -> int:
    """About how many bytes `statement` with `params` is on the wire, never fewer: each text as
    UTF-8, with a byte more for each character the driver escapes (quotes, backslashes, controls)."""
    size = len(statement.encode())
    for value in params.values():
        encoded = str(value).encode()
        size += len(encoded) + 2 + sum(encoded.count(character) for character in _ESCAPED)
    return size


_ESCAPED = (b"'", b'"', b"\\", b"\n", b"\r", b"\0", b"\x1a")


def packet_problem(size: int | None, limit: int | None) -> str:
    """Why the server refuses a statement this large: naming its size (where known), the setting, and the fixes."""
    what = "a statement was" if size is None else f"the statement is {size:,} bytes,"
    setting = "max_allowed_packet" if limit is None else f"max_allowed_packet ({limit:,} bytes)"
    return (f"{what} larger than the server's {setting}: enqueue fewer or smaller jobs per call, or have "
            "the DBA raise max_allowed_packet (SET GLOBAL max_allowed_packet = ..., and in the server's config)")


def server_problem(version: str) -> str | None:
    """Why the server whose SELECT VERSION() reads `version` cannot hold leased's jobs, or None.

    MySQL is refused by name rather than left to fail at its first enqueue: the queries use
    MariaDB's INSERT ... RETURNING (enqueue, schedule ticks) and VALUE() in ON DUPLICATE KEY UPDATE
    (worker registry, limits, pruning), which MySQL 8 has no form of."""
    if "mariadb" not in version.lower():
        return (f"the server is MySQL {version}, which leased does not support: its MariaDB backend needs "
                f"MariaDB {OLDEST_MARIADB[0]}.{OLDEST_MARIADB[1]} or newer (MySQL has no INSERT ... RETURNING "
                "and no VALUE() in ON DUPLICATE KEY UPDATE); use a MariaDB server, or PostgreSQL or SQLite")
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if numbers < OLDEST_MARIADB:
        return (f"the server is MariaDB {version}: leased needs MariaDB {OLDEST_MARIADB[0]}.{OLDEST_MARIADB[1]} "
                "or newer (JSON_TABLE, FOR UPDATE SKIP LOCKED)")
    return None

