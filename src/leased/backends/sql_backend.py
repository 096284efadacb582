"""The body every SQL backend shares; a dialect supplies hooks, its queries.sql and its migrations.

What is the same on every database lives here once: the enqueue algorithm (through
leased.backends.enqueueing, on the sync and the async path), the migration runner, the reads that
only turn rows into values, and how a refused transition is explained. A dialect provides:

- `_queries`, `_migrations`: its named queries and numbered migrations;
- `_to_time`, `_from_json`: how its driver returns times and JSON; `_time_in`: how it takes a time;
- `_rows(name, **params)`: one named query on a connection of its own, its rows as mappings;
- `_transaction()`: a connection of its own in a write transaction;
- `_insert_rows(connection, jobs)`, `_pending_with_key(connection, key)`: the two steps of enqueue;
  optionally their `_async` twins for a driver with async connections of the caller's;
- `_list_param(values)`: a list as its queries take one (a JSON array, or an array);
- for migrations: `_migration_transaction()`, `_run_script(connection, sql)`, `_execute(connection,
  name, **params)`, `_is_missing_table(error)` and `_now_sql`.

Driver exceptions stop at the dialect: what reaches the engine is a leased error
(DatabaseUnavailable, DatabaseConflict, InvalidTransition, ...), never a driver's class.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from leased.admin import WorkerInfo
from leased.backends.ports import JobFilter, NewJob, PruneRule
from leased.backends.enqueueing import InsertJobs, Step, created_jobs, drive, drive_async, enqueue_steps
from leased.backends.inspection import InspectionReads
from leased.backends.rows import (
    claimed_from_rows,
    filter_params,
    history_from_rows,
    job_from_row,
    queue_limit_from_row,
    worker_from_row,
)
from leased.backends.sql import Migration, schema_problem
from leased.backends.ticks import ScheduleStore
from leased.errors import InvalidTransition, JobNotFound, SchemaNotReady
from leased.jobs import Attempt, ClaimedJob, Job
from leased.limits import QueueLimit

if TYPE_CHECKING:
    from leased.backends.wakeups import Waker


class SQLBackend(InspectionReads, ScheduleStore):
    _queries: dict[str, str]
    _migrations: list[Migration]
    _now_sql: str  # the database's now in a literal script, for migration_sql()
    _where: str  # the database, named for messages (never with a password)
    # Datagrams to the live workers on this host, where the database has no NOTIFY (SQLite, MariaDB).
    _waker: Waker | None = None

    # Wake-ups for jobs that a caller's transaction wrote (enqueue(jobs, connection) cannot send
    # them: the jobs exist only once the caller commits). Call it after that commit, as
    # leased.contrib.django does from transaction.on_commit(); the backend's own writes call it
    # after theirs. PostgreSQL's NOTIFY is delivered by the commit itself: nothing to send.
    def wake(self, queue_names: Iterable[str]) -> None:
        """Tell the live workers this producer reaches that `queue_names` have jobs due now."""
        if self._waker is not None:
            for queue_name in set(queue_names):
                self._waker.wake(queue_name)

    # Hooks (see the module's docstring).
    def _insert_rows(self, connection: Any, jobs: Sequence[NewJob]) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    def _pending_with_key(self, connection: Any, key: str) -> Mapping[str, Any] | None:
        raise NotImplementedError

    def _list_param(self, values: Sequence[Any]) -> Any:
        raise NotImplementedError

    def _migration_transaction(self) -> AbstractContextManager[Any]:
        """A connection in a transaction that no other migrator runs at the same time."""
        raise NotImplementedError

    def _run_script(self, connection: Any, script: str) -> None:
        raise NotImplementedError

    def _is_missing_table(self, error: BaseException) -> bool:
        raise NotImplementedError

    def _time_out(self, value: Any) -> datetime | None:
        return self._to_time(value)

    # Rows to values.
    def _job(self, row: Mapping[str, Any], history: tuple[Attempt, ...] = ()) -> Job:
        return job_from_row(row, self._to_time, self._from_json, history)

    def _claimed(self, rows: list[Mapping[str, Any]]) -> list[ClaimedJob]:
        return claimed_from_rows(rows, self._to_time, self._from_json)

    # Enqueue: the one algorithm, answered by this dialect's two steps.
    def _insert(self, connection: Any, jobs: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        return drive(enqueue_steps(jobs), lambda step: self._answer(connection, step))

    def _answer(self, connection: Any, step: Step) -> Any:
        if isinstance(step, InsertJobs):
            return created_jobs(step.jobs, self._insert_rows(connection, step.jobs), self._to_time)
        holder = self._pending_with_key(connection, step.idempotency_key)
        return None if holder is None else self._job(holder)

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[tuple[Job, bool]]:
        """On a driver without async connections: enqueue() on a thread, so the event loop runs on
        while the insert waits for the database."""
        return await asyncio.to_thread(self.enqueue, jobs, connection)

    async def _insert_async(self, connection: Any, jobs: Sequence[NewJob]) -> list[tuple[Job, bool]]:
        """For a dialect with async connections: the same algorithm, its steps awaited."""
        async def answer(step: Step) -> Any:
            if isinstance(step, InsertJobs):
                rows = await self._insert_rows_async(connection, step.jobs)
                return created_jobs(step.jobs, rows, self._to_time)
            holder = await self._pending_with_key_async(connection, step.idempotency_key)
            return None if holder is None else self._job(holder)

        return await drive_async(enqueue_steps(jobs), answer)

    async def _insert_rows_async(self, connection: Any, jobs: Sequence[NewJob]) -> Sequence[Sequence[Any]]:
        raise NotImplementedError

    async def _pending_with_key_async(self, connection: Any, key: str) -> Mapping[str, Any] | None:
        raise NotImplementedError

    # Inspection.
    def get_job(self, job_id: int) -> Job | None:
        rows = self._rows("get_job", job_id=job_id)
        if not rows:
            return None
        return self._job(rows[0], history_from_rows(rows[0], self._rows("get_history", job_id=job_id), self._to_time))

    def list_jobs(self, where: JobFilter) -> list[Job]:
        query = "list_jobs_newest" if where.newest_first else "list_jobs_oldest"
        return [self._job(row) for row in self._rows(query, **filter_params(where))]

    def list_workers(self, silent_after: float) -> list[WorkerInfo]:
        return [worker_from_row(row, self._to_time, self._from_json, silent_after)
                for row in self._rows("list_workers")]

    def queue_limits(self) -> list[QueueLimit]:
        return [queue_limit_from_row(row) for row in self._rows("queue_limits")]

    def _rule_params(self, rule: PruneRule) -> dict[str, Any]:
        return {"status": rule.status.value, "older_than": rule.older_than_seconds,
                "task_names": None if rule.task_names is None else self._list_param(rule.task_names),
                "except_task_names": self._list_param(rule.except_task_names)}

    def _changed_or_explain(self, row: Any, job_id: int, action: str, allowed: str) -> Job:
        """The job after a one-job action; when the action changed nothing (`row` None), why."""
        job = self.get_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        if row is None:
            raise InvalidTransition(f"cannot {action} job {job_id}: it is {job.status}, and only {allowed} jobs can be")
        return job

    # Schema.
    def _applied_versions(self) -> set[int]:
        """The versions recorded as applied, read without a lock (none before the first migration)."""
        try:
            return {row["version"] for row in self._rows("applied_versions")}
        except Exception as error:
            if isinstance(error, SchemaNotReady) or self._is_missing_table(error):
                return set()
            raise

    def check_schema(self, callers_connection: Any = None) -> None:
        """Raises SchemaNotReady unless the schema is exactly what this code runs on (no lock taken)."""
        problem = schema_problem(self._applied_versions(), self._migrations, self._where)
        if problem:
            raise SchemaNotReady(problem)

    def migrate(self, callers_connection: Any = None) -> list[int]:
        """Apply what is missing. Finding the schema current takes no lock; a newer one is refused."""
        applied = self._applied_versions()
        if applied - {migration.version for migration in self._migrations}:
            raise SchemaNotReady(schema_problem(applied, self._migrations, self._where))
        if all(migration.version in applied for migration in self._migrations):
            return []
        applied = []
        with self._migration_transaction() as connection:
            # Migrators take turns (see _migration_transaction): the second reads what the first recorded.
            self._execute(connection, "create_version_table")
            done = {row["version"] for row in self._execute(connection, "applied_versions").fetchall()}
            for migration in self._migrations:  # every one not applied yet: a branch merged late fills a gap
                if migration.version not in done:
                    self._run_script(connection, migration.sql)
                    self._execute(connection, "record_version", version=migration.version)
                    applied.append(migration.version)
        return applied

    def migration_sql(self) -> str:
        parts = [self._queries["create_version_table"] + ";"]
        for migration in self._migrations:
            parts.append(f"-- {migration.version:04d}_{migration.name}\n{migration.sql.strip()}")
            parts.append(f"INSERT INTO leased_schema_version (version, applied_at) "
                         f"VALUES ({migration.version}, {self._now_sql});")
        return "\n\n".join(parts) + "\n"
