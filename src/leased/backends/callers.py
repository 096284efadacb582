"""Connections that callers hand to `task.using(connection=...)`: checked before we write with them."""

from __future__ import annotations


def type_name(value: object) -> str:
    """A type as people import it: sqlite3.Connection, psycopg.Connection (not psycopg.connection.Connection)."""
    kind = type(value)
    return f"{kind.__module__.split('.')[0]}.{kind.__qualname__}"


def wrong_connection(value: object, wanted: str, database: str, hint: str = "") -> str:
    """The one-line message for a connection of the wrong kind."""
    return (f"connection= needs a {wanted} (this app's database is {database}), got {type_name(value)}"
            + (f"; {hint}" if hint else ""))
