"""A migration that runs outside a transaction (`-- leased: outside a transaction` as its first line):
how PostgreSQL builds an index on a busy table without blocking its writes, CREATE INDEX
CONCURRENTLY, which it refuses inside a transaction. The runner applies such a migration statement by
statement under a session's advisory lock, records it only once every statement ran, and refuses it
on a connection in a transaction, naming it. Each test works in a database of its own: a concurrent
index build waits for every older transaction in its database, other tests' included."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from conftest import _POSTGRES_PROBLEM, POSTGRES_URL, REQUIRE_POSTGRES, wait_for
from leased.backends.postgres.queries import MIGRATOR
from leased.backends.sql.migrate import Migrator
from leased.backends.sql.scripts import OUTSIDE_A_TRANSACTION, load_migrations
from leased.errors import ConfigurationError

psycopg = pytest.importorskip("psycopg")

BUSY_TABLE = """CREATE TABLE busy (id serial PRIMARY KEY, v int);
INSERT INTO busy (v) SELECT g FROM generate_series(1, 1000) g;
"""
UNIQUE_INDEX = f"""{OUTSIDE_A_TRANSACTION}: CREATE INDEX CONCURRENTLY refuses a transaction.
-- A build that failed (or gave way to a lock) leaves an invalid index behind: drop it, then build.
DROP INDEX CONCURRENTLY IF EXISTS busy_v;
CREATE UNIQUE INDEX CONCURRENTLY busy_v ON busy (v);
"""
BUILDER = "leased-index-builder"


@pytest.fixture
def database() -> Iterator[str]:
    if _POSTGRES_PROBLEM:
        pytest.fail(_POSTGRES_PROBLEM) if REQUIRE_POSTGRES else pytest.skip(_POSTGRES_PROBLEM)
    name = f"leased_outside_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def migrator(folder: Path, **scripts: str) -> Migrator:
    for filename, sql in scripts.items():
        (folder / f"{filename}.sql").write_text(sql)
    return dataclasses.replace(MIGRATOR, migrations=load_migrations(folder))


def index_is_valid(url: str) -> bool | None:
    """Whether busy_v is valid; None: there is no such index."""
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT indisvalid FROM pg_index JOIN pg_class ON pg_class.oid = indexrelid "
                                 "WHERE relname = 'busy_v'").fetchone()
    return None if row is None else row[0]


def recorded(url: str) -> list[int]:
    with psycopg.connect(url) as connection:
        return [version for (version,) in connection.execute("SELECT version FROM leased_schema_version ORDER BY 1")]


def test_the_index_builds_while_writes_go_on_and_the_version_is_recorded_once_built(database, tmp_path):
    schema = migrator(tmp_path, **{"0001_busy": BUSY_TABLE, "0002_busy_v": UNIQUE_INDEX})
    with psycopg.connect(database) as connection:  # in a transaction, committed at the end
        assert schema.apply(connection) == [1]  # stops before the version of the other kind

    holder = psycopg.connect(database)  # a transaction that wrote to the table and is still open
    holder.execute("INSERT INTO busy (v) VALUES (-1)")
    applied: list[int] = []
    with psycopg.connect(database, autocommit=True, application_name=BUILDER) as builder:
        build = threading.Thread(target=lambda: applied.extend(schema.apply(builder, outside_transaction=True)))
        build.start()
        with psycopg.connect(database, autocommit=True) as watcher:
            wait_for(lambda: watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock' "
                "AND query LIKE 'CREATE UNIQUE INDEX CONCURRENTLY%%'", (BUILDER,)).fetchone(),
                message="the build to wait for the open transaction")
        # While the build waits, others write: its lock (SHARE UPDATE EXCLUSIVE) does not hold them.
        # (The timeout only ends a failing test: a blocked insert would wait for the holder, who waits for it.)
        with psycopg.connect(database, autocommit=True, options="-c statement_timeout=60s") as writer:
            writer.execute("INSERT INTO busy (v) VALUES (5000)")
        assert recorded(database) == [1]  # not before every statement ran
        holder.commit()
        holder.close()
        build.join()
    assert applied == [2] and recorded(database) == [1, 2] and index_is_valid(database) is True


def test_a_failed_build_is_not_recorded_and_the_next_run_builds_it_afresh(database, tmp_path):
    schema = migrator(tmp_path, **{"0001_busy": BUSY_TABLE + "INSERT INTO busy (v) VALUES (7);\n",
                                   "0002_busy_v": UNIQUE_INDEX})
    with psycopg.connect(database) as connection:
        schema.apply(connection)
    with psycopg.connect(database, autocommit=True) as connection, pytest.raises(psycopg.errors.UniqueViolation):
        schema.apply(connection, outside_transaction=True)
    assert recorded(database) == [1] and index_is_valid(database) is False  # an invalid index left behind

    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("DELETE FROM busy WHERE v = 7 AND id > 7")
        assert schema.apply(connection, outside_transaction=True) == [2]
    assert recorded(database) == [1, 2] and index_is_valid(database) is True


def test_on_a_connection_in_a_transaction_it_is_refused_naming_the_version(database, tmp_path):
    schema = migrator(tmp_path, **{"0001_busy": BUSY_TABLE, "0002_busy_v": UNIQUE_INDEX})
    with psycopg.connect(database) as connection:
        schema.apply(connection)
    with psycopg.connect(database) as connection, pytest.raises(ConfigurationError) as refused:
        schema.apply(connection)
    assert str(refused.value).startswith("migration 0002 (busy_v) runs outside a transaction")
    assert "`leased migrate APP`" in str(refused.value)
    schema = migrator(tmp_path, **{"0003_after": "ALTER TABLE busy ADD COLUMN w int;\n"})
    with psycopg.connect(database, autocommit=True) as connection:
        assert schema.apply(connection, outside_transaction=True) == [2]  # stops before 0003
        with pytest.raises(ConfigurationError) as refused:
            schema.apply(connection, outside_transaction=True)
    assert str(refused.value).startswith("migration 0003 (after) runs in a transaction, and this connection is in none")
