"""A caller's connection= must reach our jobs table: the same server, database and search_path.

Otherwise the job is written, silently, where no worker of this app looks. The check costs one
round trip per caller connection, remembered for as long as the connection lives.
"""

from __future__ import annotations

import weakref
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from leased.backends.sql.callers import not_ours

Identity = tuple  # (server start time, port, database, oid of the leased_jobs the search_path finds)

_IDENTITIES: weakref.WeakKeyDictionary[Any, Identity] = weakref.WeakKeyDictionary()


def identity(connection: psycopg.Connection, query: str) -> Identity:
    known = _IDENTITIES.get(connection)
    if known is None:
        with connection.cursor(row_factory=tuple_row) as cursor:
            (row,) = cursor.execute(query).fetchall()
            known = _IDENTITIES[connection] = tuple(row)
    return known


async def identity_async(connection: psycopg.AsyncConnection, query: str) -> Identity:
    known = _IDENTITIES.get(connection)
    if known is None:
        async with connection.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(query)
            (row,) = await cursor.fetchall()
            known = _IDENTITIES[connection] = tuple(row)
    return known


def mismatch(theirs: Identity, ours: Identity, where: str) -> str | None:
    """None when both reach the same jobs table, else the one-line error."""
    if theirs == ours:
        return None
    started, port, database, jobs_table = theirs
    if (started, port) != ours[:2]:
        reach = f"another PostgreSQL server (port {port}, database {database!r})"
    elif database != ours[2]:
        reach = f"database {database!r}"
    else:
        reach = f"database {database!r} with a search_path that finds " + (
            "no leased_jobs table" if jobs_table is None else "another leased_jobs table")
    return not_ours(reach, where)
