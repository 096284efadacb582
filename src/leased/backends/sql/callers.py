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


DEFAULT_HINT = "Pass a connection to the app's own database"


def not_ours(reach: str, where: str, hint: str = "") -> str:
    """The one-line refusal of a connection that reaches another database than the app's: the job
    would be written, and committed, where no worker of this app looks."""
    return (f"connection= reaches {reach}, not this app's {where}: the job would be written where no worker of "
            f"this app looks. {hint or DEFAULT_HINT}, or enqueue "
            "without connection=")
