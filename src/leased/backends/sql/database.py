"""One database as every part sees it: its dialect's members (dialect.py), and what all dialects
share on top of them, written once: the conflict retry (`transact`), rows turned into values
(`job`, `claimed`), enqueue's algorithm on a connection (`insert`), and the wake-ups after a commit.

Each part (inspection.py, leases.py, admin.py, retention.py, schedules.py, workflows.py,
step_ends.py, schema.py, producer.py) takes a Database in its constructor and calls only its public
names; a part never reaches into another. A dialect's members are bound here as they are, so a
statement costs no extra call on the hot path.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from leased.backends.sql.dialect import Dialect
from leased.backends.sql.enqueue import InsertJobs, Step, created_jobs, drive, enqueue_steps
from leased.backends.sql.rows import claimed_from_rows, job_from_row
from leased.backends.sql.wakeups import Waker
from leased.errors import DatabaseConflict
from leased.jobs import Attempt, ClaimedJob, Job, NewJob

T = TypeVar("T")
# How often a transaction the database broke off to settle a conflict (a deadlock, a lock wait
# given up) is run again, at once after 1, 2, 4, ... ms: nothing of it was written, and the one
# that won is about to commit. Past it, DatabaseConflict goes on to the engine's retry policy.
CONFLICT_RETRIES = 5


class Database:
    def __init__(self, dialect: Dialect, waker: Waker | None = None):
        self.dialect = dialect
        # Datagrams to the live workers on this host, where the database has no NOTIFY (SQLite, MariaDB).
        self.waker = waker
        self.where = dialect.where
        self.capabilities = dialect.capabilities
        self.transaction = dialect.transaction
        self.execute = dialect.execute
        self.rows = dialect.rows
        self.snapshot = dialect.snapshot
        self.in_callers = dialect.in_callers
        self.to_time = dialect.to_time
        self.from_json = dialect.from_json
        self.list_param = dialect.list_param
        self.time_in = dialect.time_in
        self.is_duplicate_key = dialect.is_duplicate_key
        self.is_missing_table = dialect.is_missing_table

    def transact(self, work: Callable[[Any], T], wait_seconds: float | None = None, one_statement: bool = False) -> T:
        """work(connection) in one write transaction of ours; run again when the database broke it
        off to settle a conflict (the one such policy of every dialect: see CONFLICT_RETRIES)."""
        for attempt in range(CONFLICT_RETRIES):
            try:
                with self.transaction(wait_seconds, one_statement) as connection:
                    return work(connection)
            except DatabaseConflict:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                time.sleep(0.001 * 2 ** attempt)  # let the transaction that won finish first
        raise AssertionError("unreachable")

    def all(self, connection: Any, name: str, /, **params: Any) -> list[Any]:
        """A named query's rows, in the transaction open on `connection`."""
        return list(self.execute(connection, name, **params).fetchall())

    def ids(self, rows: Iterable[Mapping[str, Any]]) -> Any:
        """The rows' ids as one list parameter."""
        return self.list_param([row["id"] for row in rows])

    # Rows to values.
    def job(self, row: Mapping[str, Any], history: tuple[Attempt, ...] = ()) -> Job:
        return job_from_row(row, self.to_time, self.from_json, history)

    def claimed(self, rows: list[Any]) -> list[ClaimedJob]:
        return claimed_from_rows(rows, self.to_time, self.from_json)

    def time_out(self, value: Any) -> datetime | None:
        return self.to_time(value)

    # Enqueue: the one algorithm (enqueue.py), answered by the dialect's two steps.
    def insert(self, connection: Any, jobs: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        """Enqueue `jobs` in the transaction open on `connection`: what a schedule's tick, a
        workflow's steps and an enqueue write."""
        return drive(enqueue_steps(jobs), lambda step: self.answer(connection, step))

    def answer(self, connection: Any, step: Step) -> Any:
        if isinstance(step, InsertJobs):
            return created_jobs(step.jobs, self.dialect.insert_rows(connection, step.jobs), self.to_time)
        holder = self.dialect.pending_with_key(connection, step.idempotency_key)
        return None if holder is None else self.job(holder)

    # Wake-ups for jobs that a transaction of ours or a caller's wrote, sent after its commit.
    # PostgreSQL's NOTIFY is delivered by the commit itself: it has no waker, nothing to send.
    def wake(self, queue_names: Iterable[str]) -> None:
        """Tell the live workers this producer reaches that `queue_names` have jobs due now."""
        if self.waker is not None:
            for queue_name in set(queue_names):
                self.waker.wake(queue_name)
