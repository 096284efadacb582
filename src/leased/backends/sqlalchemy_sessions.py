"""SQLAlchemy sessions and connections as `task.using(connection=...)`: the job joins the
transaction the Session or Connection has open, and commits or rolls back with it.

Sync: a Session or Connection on SQLite (pysqlite) or PostgreSQL (psycopg). Async, with aenqueue():
an AsyncSession or AsyncConnection on PostgreSQL (psycopg or asyncpg) or SQLite (aiosqlite).
What we write with is the driver connection under the transaction, so the insert is part of it.
Imported by leased.app only when connection= is a SQLAlchemy object: sqlalchemy stays optional.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from leased.backends.sql.callers import type_name
from leased.errors import ConfigurationError

_BEGIN = {Session: "`with session.begin():`", Connection: "`with engine.begin() as connection:`",
          AsyncSession: "`async with session.begin():`", AsyncConnection: "`async with engine.begin() as connection:`"}


def _in_transaction(value: Any, kind: type) -> None:
    if not value.in_transaction():
        raise ConfigurationError(
            f"connection= got a SQLAlchemy {kind.__name__} that is not in a transaction, so the job would not "
            f"commit with your changes: enqueue inside {_BEGIN[kind]} (or after the statements it commits with)")


def _not_an_engine(value: Any) -> None:
    if isinstance(value, (Engine, AsyncEngine)):
        raise ConfigurationError(f"connection= needs a SQLAlchemy Session or Connection in a transaction, not an "
                                 f"{type_name(value)}: with no transaction of yours, enqueue without connection=")


def driver_connection(value: Any) -> Any:
    """The driver connection (sqlite3, psycopg) under a Session's or Connection's open transaction."""
    _not_an_engine(value)
    if isinstance(value, (AsyncSession, AsyncConnection)):
        raise ConfigurationError(f"connection= got a SQLAlchemy {type(value).__name__}: enqueue with "
                                 "`await task.using(connection=...).aenqueue(...)`")
    if isinstance(value, Session):
        _in_transaction(value, Session)
        value = value.connection()  # the connection the session's transaction runs on
    if isinstance(value, Connection):
        _in_transaction(value, Connection)
        return value.connection.driver_connection
    raise ConfigurationError(f"connection= does not take a {type_name(value)}: pass a SQLAlchemy Session or "
                             "Connection, or a driver connection (sqlite3, psycopg)")


async def driver_connection_async(value: Any) -> Any:
    """The driver connection (psycopg async, asyncpg, aiosqlite) under an async Session's or Connection's
    open transaction."""
    _not_an_engine(value)
    if isinstance(value, (Session, Connection)):
        raise ConfigurationError(f"aenqueue() got a sync SQLAlchemy {type(value).__name__}: use "
                                 "`task.using(connection=...).enqueue(...)`, or an AsyncSession here")
    if isinstance(value, AsyncSession):
        _in_transaction(value, AsyncSession)
        value = await value.connection()
    if isinstance(value, AsyncConnection):
        _in_transaction(value, AsyncConnection)
        return (await value.get_raw_connection()).driver_connection
    raise ConfigurationError(f"connection= does not take a {type_name(value)}: pass a SQLAlchemy AsyncSession or "
                             "AsyncConnection, or a driver connection (psycopg.AsyncConnection)")
