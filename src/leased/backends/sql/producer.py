"""Enqueue, one part over a database (database.py): the one algorithm (enqueue.py) on a
transaction of ours or on the caller's connection, and the wake-ups after our commit.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Awaitable, Callable, Mapping, Sequence

from leased.backends.sql.database import Database
from leased.backends.sql.enqueue import InsertJobs, Step, created_jobs, drive_async, due_queue_names, enqueue_steps, \
    needs_no_transaction
from leased.jobs import Job, NewJob

InsertRowsAsync = Callable[[Any, Sequence[NewJob]], Awaitable[Sequence[Sequence[Any]]]]
PendingWithKeyAsync = Callable[[Any, str], Awaitable[Mapping[str, Any] | None]]


class Producer:
    def __init__(self, database: Database):
        self._database = database

    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[tuple[Job, bool]]:
        database = self._database
        if connection is not None:
            return database.in_callers(connection, lambda callers: database.insert(callers, jobs))
        # Enqueue runs on the caller's request path: where its insert is one statement, that
        # statement is its own transaction, one round trip (see needs_no_transaction).
        results = database.transact(lambda own: database.insert(own, jobs), one_statement=needs_no_transaction(jobs))
        if database.waker is not None:  # after the commit: the jobs are claimable now
            database.wake(due_queue_names(jobs, results, datetime.now(UTC)))
        return results

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[tuple[Job, bool]]:
        """On a driver without async connections: enqueue() on a thread, so the event loop runs on
        while the insert waits for the database."""
        return await asyncio.to_thread(self.enqueue, jobs, connection)

    async def insert_async(self, connection: Any, jobs: Sequence[NewJob], insert_rows: InsertRowsAsync,
                           pending_with_key: PendingWithKeyAsync) -> list[tuple[Job, bool]]:
        """For a dialect with async connections: the same algorithm, its two steps awaited."""
        async def answer(step: Step) -> Any:
            if isinstance(step, InsertJobs):
                return created_jobs(step.jobs, await insert_rows(connection, step.jobs), self._database.to_time)
            holder = await pending_with_key(connection, step.idempotency_key)
            return None if holder is None else self._database.job(holder)

        return await drive_async(enqueue_steps(jobs), answer)
