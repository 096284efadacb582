"""leased's tables, columns and indexes as a database reports them, comparable across databases and
schemas of one kind, and empty databases to build it in: for the tests that two ways of building
the schema (leased's migrations, the printed SQL, Django's migrations, Alembic) build the same one."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def leased_schema(url: str) -> list[tuple]:
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url[len("sqlite:///"):]) as connection:
            return connection.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                      "WHERE tbl_name LIKE 'leased%' ORDER BY name").fetchall()
    if url.startswith(("mariadb", "mysql")):
        return _mariadb_schema(url)
    import psycopg

    with psycopg.connect(url) as connection:
        columns = connection.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name LIKE 'leased%' ORDER BY 1, 2").fetchall()
        indexes = connection.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename LIKE 'leased%' ORDER BY 1").fetchall()
    return columns + [(name, re.sub(r"ON (ONLY )?\w+\.", "ON ", definition)) for name, definition in indexes]


def _mariadb_schema(url: str) -> list[tuple]:
    import connections

    connection = connections.connect(url, autocommit=True)
    try:
        columns = connections.execute(
            connection,
            "SELECT table_name, column_name, column_type, is_nullable, column_default, generation_expression"
            " FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name LIKE 'leased%'"
            " ORDER BY 1, 2")
        indexes = connections.execute(
            connection,
            "SELECT table_name, index_name, seq_in_index, column_name, non_unique FROM information_schema.statistics"
            " WHERE table_schema = DATABASE() AND table_name LIKE 'leased%' ORDER BY 1, 2, 3")
        return columns + indexes
    finally:
        connection.close()


@contextmanager
def empty_database(backend_name: str, tmp_path: Path, name: str) -> Iterator[str]:
    """The URL of an empty database of the kind, of its own."""
    from conftest import mariadb_database, postgres_schema

    if backend_name == "sqlite":
        yield f"sqlite:///{tmp_path / name}"
    else:
        with (postgres_schema() if backend_name == "postgres" else mariadb_database()) as url:
            yield url


def apply_script(url: str, script: str) -> None:
    """The printed SQL, applied as a user applies it: sqlite3's executescript, psql's one string,
    the mysql client reading it on its standard input."""
    if url.startswith("sqlite"):
        sqlite3.connect(url[len("sqlite:///"):]).executescript(script)
    elif url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url) as connection:
            connection.execute(script)
    else:
        from leased.backends.mariadb.backend import connect_arguments

        arguments, _ = connect_arguments(url)
        subprocess.run(["mysql", f"--host={arguments['host']}", f"--port={arguments['port']}",
                        f"--user={arguments['user']}", arguments["database"]],
                       input=script, text=True, check=True, timeout=60,
                       env={**os.environ, "MYSQL_PWD": arguments["password"]})
