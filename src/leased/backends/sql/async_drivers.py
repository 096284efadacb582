"""Enqueue through async drivers that are not psycopg: asyncpg (PostgreSQL) and aiosqlite (SQLite),
which is what SQLAlchemy's AsyncSession runs on. One algorithm, the backends' own named queries:
each driver supplies how a named query is run and how its rows read."""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any, Awaitable, Callable, Mapping, Sequence

from leased.backends.sql.enqueue import InsertJobs, Step, created_jobs, drive_async, enqueue_steps, jobs_json
from leased.backends.sql.rows import job_from_row
from leased.jobs import Job, NewJob
from leased.payloads import decode

Fetch = Callable[[str, Mapping[str, Any]], Awaitable[list[Any]]]  # (query name, params) -> rows


async def enqueue_with(fetch: Fetch, jobs: Sequence[NewJob], run_at: Callable[[Any], Any],
                       to_time: Callable[[Any], Any], from_json: Callable[[Any], Any] = decode
                       ) -> list[tuple[Job, bool]]:
    """Backend.enqueue's algorithm (backends/sql/enqueue.py) on the caller's async connection,
    never committed here."""

    async def answer(step: Step) -> Any:
        if isinstance(step, InsertJobs):
            return created_jobs(step.jobs, await fetch("insert_jobs", {"jobs": jobs_json(step.jobs, run_at)}), to_time)
        holder = await fetch("pending_with_key", {"idempotency_key": step.idempotency_key})
        return job_from_row(holder[0], to_time, from_json) if holder else None

    return await drive_async(enqueue_steps(jobs), answer)


_NAMED = re.compile(r"%\((\w+)\)s")


def numbered(query: str) -> tuple[str, list[str]]:
    """A psycopg query (%(name)s) in asyncpg's style ($1, $2...), with the names in order."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _NAMED.sub(number, query), names


def asyncpg_fetch(connection: Any, queries: Mapping[str, str]) -> Fetch:
    async def fetch(name: str, params: Mapping[str, Any]) -> list[Any]:
        query, names = numbered(queries[name])
        rows = await connection.fetch(query, *(params[key] for key in names))
        return [_IndexedRow(row) for row in rows]

    return fetch


class _IndexedRow(dict):
    """An asyncpg Record readable by name and by position (json columns stay text: decode() reads them)."""

    def __init__(self, record: Any):
        super().__init__(record.items())
        self._values = list(record.values())

    def __getitem__(self, key: Any) -> Any:
        return self._values[key] if isinstance(key, int) else super().__getitem__(key)


async def enqueue_asyncpg(connection: Any, queries: Mapping[str, str], jobs: Sequence[NewJob], clock_offset: str,
                          to_time: Callable[[Any], Any]) -> list[tuple[Job, bool]]:
    if clock_offset:  # the clock seam moved (leased.clock): this session's leased_now() follows it
        await asyncpg_fetch(connection, queries)("set_clock_offset", {"offset": clock_offset})
    from_json = decode
    # A job whose key is held returns the holder, read back: its json columns arrive as text, or
    # decoded where the connection has a json codec (SQLAlchemy's asyncpg dialect sets one).
    if any(job.idempotency_key for job in jobs) and not isinstance(await connection.fetchval("SELECT '1'::json"), str):
        from_json = _as_is
    return await enqueue_with(asyncpg_fetch(connection, queries), jobs, lambda value: value.astimezone(UTC).isoformat(),
                              to_time, from_json)


def _as_is(value: Any) -> Any:
    return value


async def asyncpg_identity(connection: Any, query: str) -> tuple:
    return tuple((await connection.fetchrow(query)).values())


def aiosqlite_fetch(connection: Any, queries: Mapping[str, str]) -> Fetch:
    async def fetch(name: str, params: Mapping[str, Any]) -> list[Any]:
        async with connection.execute(queries[name], params) as cursor:
            names = [column[0] for column in cursor.description or ()]
            return [_NamedTuple(names, tuple(row)) for row in await cursor.fetchall()]

    return fetch


class _NamedTuple(tuple):
    """A row readable by position and by column name, whatever row factory the caller set."""

    def __new__(cls, names: list[str], values: tuple):
        row = super().__new__(cls, values)
        row.names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self.names.index(key) if isinstance(key, str) else key)


async def enqueue_aiosqlite(connection: Any, queries: Mapping[str, str], jobs: Sequence[NewJob],
                            to_time: Callable[[Any], Any], now: Callable[[], float]) -> list[tuple[Job, bool]]:
    # Our queries read the clock through leased_now(); aiosqlite runs the function on its thread.
    await connection.create_function("leased_now", 0, now, deterministic=True)  # as prepare_connection
    return await enqueue_with(aiosqlite_fetch(connection, queries), jobs, lambda value: value.timestamp(), to_time)
