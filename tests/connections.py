"""Connections of a program's own to a leased database, of the driver its URL names (sqlite3, psycopg,
or the MariaDB driver leased.backends.mariadb.driver picks): what a user hands to
`task.using(connection=...)`, what an operator's SQL shell is, and
what the test programs (chaos.py, limits_app.py) record their own rows with. Imports no pytest."""

from __future__ import annotations

from typing import Any, Sequence


def is_mariadb(url: str) -> bool:
    return url.startswith(("mariadb", "mysql"))


def sqlite_path(url: str) -> str:
    path = url[len("sqlite://"):]
    return path.removeprefix("/")  # sqlite:///jobs.db is relative, sqlite:////tmp/jobs.db absolute


def connect(url: str, autocommit: bool = False, **options: Any) -> Any:
    """A DB-API connection to the database at a leased URL; in a transaction until commit() unless
    autocommit. Options go to the driver's connect()."""
    if url.startswith("sqlite"):
        import sqlite3

        return sqlite3.connect(sqlite_path(url), isolation_level=None if autocommit else "DEFERRED", **options)
    if is_mariadb(url):
        from leased.backends.mariadb.backend import connect_arguments
        from leased.backends.mariadb.driver import DRIVER

        arguments, _ = connect_arguments(url)
        connection = DRIVER.connect(**{**arguments, "autocommit": autocommit, **options})
        connection.cursor().execute("SET SESSION time_zone = '+00:00'")
        return connection
    import psycopg

    return psycopg.connect(url, autocommit=autocommit, **options)


def execute(connection: Any, statement: str, params: Sequence[Any] = ()) -> list[tuple]:
    """One statement with `?` placeholders on any of the three; its rows, if it returns any."""
    cursor = connection.cursor()
    if type(connection).__module__.startswith("sqlite3"):
        cursor.execute(statement, tuple(params))
    else:
        cursor.execute(statement.replace("?", "%s"), tuple(params) or None)
    return list(cursor.fetchall()) if cursor.description else []
