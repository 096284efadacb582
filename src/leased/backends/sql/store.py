"""The body every SQL backend shares; a dialect supplies hooks, its queries.sql and its migrations.

What is the same on every database lives here once: the enqueue algorithm (through
leased.backends.sql.enqueue, on the sync and the async path), migrate() (over the one runner,
leased.backends.sql.migrate), the reads that only turn rows into values, and how a refused transition
is explained. What a dialect answers is declared in dialect.py; `_transact(work)` here runs
work(connection) in one of its transactions, again when the database broke it off to settle a
conflict.

The write verbs are written here once, each as the named statements of one transaction; each
dialect's queries.sql defines those names. A dialect that does a verb in one statement
(PostgreSQL's CTEs) overrides the verb and names that statement instead. Claim is each dialect's
own (see dialect.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from leased.admin import WORKER_GONE_AFTER, WorkerInfo
from leased.backends.sql.enqueue import (InsertJobs, Step, created_jobs, drive, drive_async, due_queue_names,
                                       enqueue_steps, needs_no_transaction)
from leased.backends.sql.inspection import InspectionReads
from leased.backends.sql.params import (CANCELLED_BY_A_USER, ends_json, expired_failures, expired_leases, filter_params,
                                        finished_counts, leases_json, progress_json, queue_limit_params, released_records,
                                        running_records, worker_params)
from leased.backends.ports import AttemptEnd, JobFilter, PruneRule, WorkerRecord
from leased.backends.sql.rows import claimed_from_rows, history_from_rows, job_from_row, queue_limit_from_row, worker_from_row
from leased.backends.sql.scripts import schema_problem
from leased.backends.sql.schedules import ScheduleStore
from leased.backends.sql.workflows import WorkflowStore
from leased.errors import (ASYNC_TRANSACTIONS_NOT_ON_MARIADB, ConfigurationError, DatabaseConflict, InvalidTransition,
                           JobNotFound, SchemaNotReady)
from leased.jobs import Attempt, ClaimedJob, DurableStep, Job, JobStatus, Lease, NewJob, Outcome
from leased.fairness import FairKey, QueueFairness
from leased.limits import QueueLimit

T = TypeVar("T")
# How often a transaction the database broke off to settle a conflict (a deadlock, a lock wait
# given up) is run again, at once after 1, 2, 4, ... ms: nothing of it was written, and the one
# that won is about to commit. Past it, DatabaseConflict goes on to the engine's retry policy.
CONFLICT_RETRIES = 5
# How long `leased migrate` (and a first use) keeps trying a version whose locks another session holds.
MIGRATION_PATIENCE_SECONDS = 120.0


class SQLStore(InspectionReads, ScheduleStore, WorkflowStore):

    # Wake-ups for jobs that a caller's transaction wrote (enqueue(jobs, connection) cannot send
    # them: the jobs exist only once the caller commits). Call it after that commit, as
    # leased.contrib.django does from transaction.on_commit(); the backend's own writes call it
    # after theirs. PostgreSQL's NOTIFY is delivered by the commit itself: nothing to send.
    def wake(self, queue_names: Iterable[str]) -> None:
        """Tell the live workers this producer reaches that `queue_names` have jobs due now."""
        if self._waker is not None:
            for queue_name in set(queue_names):
                self._waker.wake(queue_name)

    def nudge(self, queue_names: Iterable[str]) -> None:
        """Where datagrams carry wake-ups, a nudge is one."""
        self.wake(queue_names)

    def _transact(self, work: Callable[[Any], T], wait_seconds: float | None = None, one_statement: bool = False) -> T:
        """work(connection) in one write transaction of ours; run again when the database broke it
        off to settle a conflict (the one such policy of every dialect: see CONFLICT_RETRIES)."""
        for attempt in range(CONFLICT_RETRIES):
            try:
                with self._transaction(wait_seconds, one_statement) as connection:
                    return work(connection)
            except DatabaseConflict:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                time.sleep(0.001 * 2 ** attempt)  # let the transaction that won finish first
        raise AssertionError("unreachable")

    def _all(self, connection: Any, name: str, /, **params: Any) -> list[Any]:
        return list(self._execute(connection, name, **params).fetchall())

    def _ids(self, rows: Iterable[Mapping[str, Any]]) -> Any:
        return self._list_param([row["id"] for row in rows])

    # Rows to values.
    def _job(self, row: Mapping[str, Any], history: tuple[Attempt, ...] = ()) -> Job:
        return job_from_row(row, self._to_time, self._from_json, history)

    def _claimed(self, rows: Sequence[Mapping[str, Any]]) -> list[ClaimedJob]:
        return claimed_from_rows(rows, self._to_time, self._from_json)

    # Enqueue: the one algorithm, answered by this dialect's two steps.
    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[tuple[Job, bool]]:
        if connection is not None:
            return self._in_callers(connection, lambda callers: self._insert(callers, jobs))
        # Enqueue runs on the caller's request path: where its insert is one statement, that
        # statement is its own transaction, one round trip (see needs_no_transaction).
        results = self._transact(lambda own: self._insert(own, jobs), one_statement=needs_no_transaction(jobs))
        if self._waker is not None:  # after the commit: the jobs are claimable now
            self.wake(due_queue_names(jobs, results, datetime.now(UTC)))
        return results

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

    # Writes after a claim: each fenced on (job, attempt, worker). The hot path's two (renew and
    # finish) are here as the named statements of one transaction; PostgreSQL does each in one
    # statement of its own and overrides them.
    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]:
        if not leases:
            return set()
        held = {"worker_id": leases[0].worker_id, "leases": leases_json(leases)}
        reported = progress_json(progress) if progress else None

        def work(connection: Any) -> list[Any]:
            self._execute(connection, "renew", **held)
            if reported is not None:
                self._execute(connection, "record_progress", worker_id=held["worker_id"], progress=reported)
            return self._all(connection, "held_leases", **held)

        return {Lease(row["id"], row["attempt"], held["worker_id"]) for row in self._transact(work, wait_seconds)}

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        if not ends:
            return []
        prepared = _FinishParams(ends)  # before the transaction: on SQLite, other writers wait for its lock
        released: set[str] = set()

        def work(connection: Any) -> list[bool]:
            released.clear()  # a conflict's rerun starts again
            kept, due = self._finish_on(connection, ends, prepared)
            released.update(due)
            return kept

        kept = self._transact(work)
        if released:  # steps their parents' ends made due
            self.wake(released)
        return kept

    def _finish_on(self, connection: Any, ends: Sequence[AttemptEnd], prepared: _FinishParams | None = None,
                   held: dict[Lease, Any] | None = None, counted_as: str | None = None
                   ) -> tuple[list[bool], set[str]]:
        """finish()'s statements in the transaction open on `connection`: whether each end was
        written, and the queues of the steps their ends made due (to wake after the commit).
        `held`: the rows of the leases still held, read (and locked) already; `counted_as`: the
        throughput row's worker key, when not the ending worker's own."""
        prepared = prepared or _FinishParams(ends)
        if held is None:
            held = {}
            for worker_id, leases in prepared.leases_of.items():
                rows = self._all(connection, "leases_to_finish", worker_id=worker_id, leases=leases)
                held |= {Lease(row["id"], row["attempt"], worker_id): row for row in rows}
        # By the whole lease, worker too: an end for a job another worker holds is not written.
        kept = [end.lease in held for end in ends]
        written = [end for end, flag in zip(ends, kept) if flag]
        released: set[str] = set()
        if written:  # the records first: finish clears the leases they are read from
            records, finishes = prepared.all_ends if len(written) == len(ends) else ends_json(written)
            self._execute(connection, "record_attempts", ends=records)
            self._execute(connection, "finish", ends=finishes)
            rows = [held[end.lease] for end in written]
            self._count_finished(connection, finished_counts(
                (row["queue_name"], row["task_name"], counted_as or end.lease.worker_id, end.job_status)
                for end, row in zip(written, rows)))
            if any(row["workflow_id"] is not None for row in rows):  # a step ended: its children settle
                released = self._settle_rows(connection, (
                    {"id": end.lease.job_id, "status": end.job_status.value, "workflow_id": row["workflow_id"]}
                    for end, row in zip(written, rows)))
        return kept, released

    # A transactional handler's end (leased.engine.transactional): written in the transaction its
    # writes are in, so that they commit together or not at all.
    def finish_in(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        """Write `end` in the transaction open on `connection` (one of attempt_transaction(), or a
        framework's on our database), fenced on its lease and on the lease's expiry by the
        database's clock now; never committed here. Whether it was written (False: the lease is
        gone, so roll back), and the queues of the steps it made due, to wake after the commit."""
        return self._in_callers(connection, lambda connection: self._finish_fenced(connection, end))

    def _finish_fenced(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        lease = end.lease
        fence = self._fence(connection, lease)
        if fence is None:
            return False, set()
        # Counted in a row of the handler thread's own: concurrent handlers of one worker would
        # otherwise queue on their worker's row of the minute, each until its transaction commits.
        kept, released = self._finish_on(connection, [end], held={lease: fence},
                                         counted_as=f"{lease.worker_id}/{threading.get_native_id()}")
        return kept[0], released

    # Async transactional handlers: PostgreSQL's and SQLite's backends write them (through an async driver).
    def attempt_transaction_async(self) -> Any:
        raise ConfigurationError(ASYNC_TRANSACTIONS_NOT_ON_MARIADB)

    async def finish_in_async(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        raise ConfigurationError(ASYNC_TRANSACTIONS_NOT_ON_MARIADB)

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: Any) -> bool:
        raise ConfigurationError(ASYNC_TRANSACTIONS_NOT_ON_MARIADB)

    async def close_async(self) -> None:
        return None

    def serving_worker(self) -> AbstractContextManager[None]:
        return nullcontext()  # one set of connections serves every caller (SQLite, MariaDB)

    def _fence(self, connection: Any, lease: Lease) -> Any:
        """The job's row, locked in the transaction on `connection`, if `lease` still holds it
        unexpired by the database's clock now; else None."""
        return self._execute(connection, "lease_fence", job_id=lease.job_id, attempt=lease.attempt,
                             worker_id=lease.worker_id).fetchone()

    # Durable steps (TaskContext.step): each recorded once, fenced as a transactional end is.
    def record_step(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                    connection: Any = None) -> bool:
        """Record step `name` of the job `lease` holds, which ran `seconds` and returned
        `result_json`: in a transaction of its own, or in the one open on `connection` (a
        transactional handler's, or step's). False, and nothing written: the lease is gone."""
        def work(connection: Any) -> bool:
            if self._fence(connection, lease) is None:
                return False
            self._execute(connection, "record_durable_step", job_id=lease.job_id, name=name, attempt=lease.attempt,
                          result=result_json, seconds=seconds)
            return True

        return self._in_callers(connection, work) if connection is not None else self._transact(work)

    def durable_steps(self, job_id: int) -> list[DurableStep]:
        return [DurableStep(row["name"], row["attempt"], self._from_json(row["result"]), self._to_time(row["started_at"]),
                            self._to_time(row["finished_at"])) for row in self._rows("durable_steps", job_id=job_id)]

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False) -> None:
        if not leases:
            return
        held = {"worker_id": leases[0].worker_id, "leases": leases_json(leases)}

        def work(connection: Any) -> None:
            # The records first: release clears the leases they are matched on.
            self._execute(connection, "record_attempts", ends=released_records(leases, outcome, message))
            self._execute(connection, "release", **held)
            if explains_expiry:
                self._execute(connection, "explain_expired_jobs", **held, message=message)
                self._execute(connection, "explain_expired_attempts", **held, message=message)

        self._transact(work)

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        # Never skipped: these workers reclaim in their claims, and only PostgreSQL's take turns.
        return self._transact(self._reclaim)

    def bury_workers(self, id_prefix: str, how: str) -> int:
        """Workers whose ids start with `id_prefix` died (`how`), as their supervisor saw: mark their
        rows gone and end their attempts at once as crashed, not a lease later."""
        def work(connection: Any) -> int:
            self._execute(connection, "bury_workers", prefix=id_prefix, silent_after=WORKER_GONE_AFTER)
            self._execute(connection, "expire_leases_of", prefix=id_prefix)
            return self._reclaim(connection, buried=(id_prefix, how))

        return self._transact(work)

    def _reclaim(self, connection: Any, buried: tuple[str, str] | None = None) -> int:
        """In the caller's transaction: expired leases read once, so that their attempts' records
        (written before the reclaim clears the leases they are read from) and the jobs reclaimed
        are the same set."""
        expired = expired_leases(self._all(connection, "expired_ids", silent_after=WORKER_GONE_AFTER),
                                 WORKER_GONE_AFTER, buried)
        if expired:
            self._execute(connection, "record_attempts", ends=running_records(expired, None))
            self._execute(connection, "reclaim_expired", job_ids=self._ids(expired))
            self._count_finished(connection, expired_failures(expired))
            # A step out of attempts has failed: its children settle in this transaction. (Those
            # it releases are claimed by the next poll: no wake-up is sent from inside a claim.)
            self._settle_rows(connection, ({"id": row["id"], "status": JobStatus.FAILED.value,
                                            "workflow_id": row["workflow_id"]} for row in expired if row["last_attempt"]))
        return len(expired)

    def _count_finished(self, connection: Any, counts: str | None) -> None:
        if counts is not None:  # None: no job finished (every end a retry, every expired lease had attempts left)
            self._execute(connection, "count_finished", counts=counts)

    # Workers.
    def register_worker(self, worker: WorkerRecord) -> None:
        def work(connection: Any) -> None:
            self._execute(connection, "register_worker", **worker_params(worker))
            self._execute(connection, "prune_workers")

        self._transact(work)

    def unregister_worker(self, worker_id: str) -> None:
        self._transact(lambda connection: self._execute(connection, "unregister_worker", id=worker_id))

    # What people do to jobs and queues. What becomes due wakes the workers after the commit, as
    # an enqueue does (a no-op where the commit itself notifies).
    def retry(self, job_id: int) -> Job:
        def work(connection: Any) -> Any:
            row = self._execute(connection, "lock_for_retry", job_id=job_id).fetchone()
            if row is not None:
                self._execute(connection, "retry", job_id=job_id)
                if row["workflow_id"] is not None:
                    self._retried_steps(connection, [job_id])
            return row

        try:
            row = self._transact(work)
        except Exception as error:
            if not self._is_duplicate_key(error):
                raise
            raise InvalidTransition(
                f"job {job_id} cannot be retried: another pending job holds its idempotency key") from None
        if row is not None:
            self.wake([row["queue_name"]])
        return self._changed_or_explain(row, job_id, "retry", "failed or cancelled")

    def cancel(self, job_id: int) -> Job:
        released: set[str] = set()

        def work(connection: Any) -> Any:
            released.clear()
            row = self._execute(connection, "lock_for_cancel", job_id=job_id).fetchone()
            if row is not None:
                if row["status"] == "running":  # its record first: cancel clears the lease it is read from
                    self._execute(connection, "record_attempts",
                                  ends=running_records([row], Outcome.CANCELLED, CANCELLED_BY_A_USER))
                self._execute(connection, "cancel", job_id=job_id)
                released.update(self._settle_rows(connection, [_cancelled(row)]))
            return row

        row = self._transact(work)
        self.wake(released)
        return self._changed_or_explain(row, job_id, "cancel", "waiting, pending or running")

    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int:
        def work(connection: Any) -> list[Any]:
            rows = self._all(connection, "failed_to_retry", task_name=task_name, queue_name=queue_name)
            if rows:
                self._execute(connection, "retry_jobs", job_ids=self._ids(rows))
                self._retried_steps(connection, [row["id"] for row in rows if row["workflow_id"] is not None])
            return rows

        retried = self._transact(work)
        self.wake(row["queue_name"] for row in retried)
        return len(retried)

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int:
        released: set[str] = set()

        def work(connection: Any) -> int:
            released.clear()
            rows = self._all(connection, "pending_to_cancel", task_name=task_name, queue_name=queue_name)
            if rows:  # a pending job runs no attempt: no record to write
                self._execute(connection, "cancel_jobs", job_ids=self._ids(rows))
                released.update(self._settle_rows(connection, (_cancelled(row) for row in rows)))
            return len(rows)

        cancelled = self._transact(work)
        self.wake(released)
        return cancelled

    def pause_queue(self, queue_name: str) -> bool:
        def work(connection: Any) -> bool:
            self._execute(connection, "ensure_queue", queue_name=queue_name)
            return self._execute(connection, "pause_queue", queue_name=queue_name).rowcount > 0

        return self._transact(work)

    def resume_queue(self, queue_name: str) -> bool:
        resumed = self._transact(
            lambda connection: self._execute(connection, "resume_queue", queue_name=queue_name).rowcount > 0)
        if resumed:
            self.wake([queue_name])
        return resumed

    def set_queue_limit(self, limit: QueueLimit) -> None:
        if limit.is_empty:
            self._transact(lambda connection: self._execute(connection, "clear_queue_limit",
                                                            queue_name=limit.queue_name))
        else:
            self._transact(lambda connection: self._execute(connection, "set_queue_limit",
                                                            **queue_limit_params(limit)))

    def set_fairness(self, fairness: QueueFairness) -> None:
        def work(connection: Any) -> None:
            self._execute(connection, "set_fairness_default", queue_name=fairness.queue_name,
                          weight=fairness.default_weight)
            for key, weight in fairness.weights.items():
                self._execute(connection, "set_fairness_weight", queue_name=fairness.queue_name, fairness_key=key,
                              weight=weight)

        self._transact(work)

    # Pruning: short transactions, so that a claim waits for one batch, not the pass.
    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        def work(connection: Any) -> int:
            ids = self._all(connection, "prunable_ids", **self._rule_params(rule), limit=limit)
            if not ids:
                return 0
            deleted = self._execute(connection, "delete_jobs", ids=self._ids(ids)).rowcount
            workflows = {row["workflow_id"] for row in ids if row["workflow_id"] is not None}
            if workflows:  # a run goes once the last of its steps has
                self._execute(connection, "delete_empty_workflows", workflow_ids=self._list_param(sorted(workflows)))
            return deleted

        return self._transact(work)

    def prune_throughput(self, older_than_seconds: float) -> int:
        return self._transact(
            lambda connection: self._execute(connection, "prune_throughput", older_than=older_than_seconds).rowcount)

    def fold_throughput(self, older_than_seconds: float) -> int:
        def work(connection: Any) -> int:
            (cutoff,) = self._all(connection, "throughput_cutoff", older_than=older_than_seconds)
            self._execute(connection, "fold_throughput", cutoff=cutoff["cutoff"])
            return self._execute(connection, "delete_folded", cutoff=cutoff["cutoff"]).rowcount

        return self._transact(work)

    # Inspection.
    def recent_quarantined(self, recent: int) -> dict[str, int]:
        return {row["queue_name"]: row["n"] for row in self._rows("recent_quarantined", recent=recent)}

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

    def queue_fairness(self, queue_name: str, keys: int) -> QueueFairness:
        weights = {row["fairness_key"]: row["weight"] for row in self._rows("fairness_weights", queue_name=queue_name)}
        waiting = tuple(FairKey(row["fairness_key"], row["waiting"], row["weight"], row["pass"])
                        for row in self._rows("fair_keys", queue_name=queue_name, limit=keys))
        default = weights.pop(None, 1.0)
        return QueueFairness(queue_name, default, weights, waiting)

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

    def _schema_compatibility(self, applied: set[int]) -> dict[int, int]:
        """{version: oldest code version that runs on it} (migration 0022), read only for a schema
        with versions this code does not know: a current one costs no round trip."""
        if not applied - {migration.version for migration in self._migrator.migrations}:
            return {}
        try:
            return {row["version"]: row["oldest_code_version"] for row in self._rows("schema_compatibility")}
        except Exception as error:
            if isinstance(error, SchemaNotReady) or self._is_missing_table(error):  # a branch's before 0022
                return {}
            raise

    def _schema_problem(self, applied: set[int]) -> str | None:
        return schema_problem(applied, self._migrator.migrations, self._where, self._schema_compatibility(applied))

    def check_schema(self, callers_connection: Any = None) -> None:
        """Raises SchemaNotReady unless this code runs on the schema: exactly its own, or a newer one
        whose versions say older code runs on them (no lock taken)."""
        problem = self._schema_problem(self._applied_versions())
        if problem:
            raise SchemaNotReady(problem)

    def migrate(self, callers_connection: Any = None) -> list[int]:
        """Apply what is missing. Finding the schema current takes no lock; a newer one is refused
        unless this code runs on it (see check_schema), and then nothing is applied."""
        migrations = self._migrator.migrations
        applied = self._applied_versions()
        if applied - {migration.version for migration in migrations}:
            problem = self._schema_problem(applied)
            if problem:
                raise SchemaNotReady(problem)
        done: list[int] = []
        for migration in migrations:
            if migration.version not in applied:
                done += self._apply_up_to(migration.version)
        return done

    def _apply_up_to(self, version: int) -> list[int]:
        """One version in a transaction of its own: a version's locks are held only while it runs,
        and one version never upgrades a lock another took (0018's CREATE TRIGGER, then 0019's DROP
        INDEX, in one transaction deadlocked with running workers). A dialect that bounds its lock
        waits (PostgreSQL's lock_timeout) gives way to the workers queued behind it and tries again,
        for MIGRATION_PATIENCE_SECONDS at most."""
        deadline = time.monotonic() + MIGRATION_PATIENCE_SECONDS
        tries = 0
        while True:
            try:
                with self._migration_connection() as connection:
                    return self._migrator.apply(connection, up_to=version)
            except DatabaseConflict as error:
                tries += 1
                if time.monotonic() >= deadline:
                    raise DatabaseConflict(
                        f"migration {version} could not take the locks it needs in {MIGRATION_PATIENCE_SECONDS:.0f} s "
                        f"({tries} tries; the last: {error}): a long transaction holds leased's tables? `leased why` "
                        "on a pending job, or pg_stat_activity, names it") from error
                time.sleep(min(0.1 * tries, 1.0))  # room for the claims and enqueues that queued behind it

    def migration_sql(self) -> str:
        return self._migrator.script()


class _FinishParams:
    """finish()'s parameters, built before its transaction: the ends as its statements take them,
    and each worker's leases."""

    __slots__ = ("all_ends", "leases_of")

    def __init__(self, ends: Sequence[AttemptEnd]):
        self.all_ends = ends_json(ends)
        by_worker: dict[str, list[Lease]] = {}
        for end in ends:
            by_worker.setdefault(end.lease.worker_id, []).append(end.lease)
        self.leases_of = {worker_id: leases_json(leases) for worker_id, leases in by_worker.items()}


def _cancelled(row: Any) -> dict[str, Any]:
    """A job row just cancelled, as _settle_rows reads it."""
    return {"id": row["id"], "status": JobStatus.CANCELLED.value, "workflow_id": row["workflow_id"]}
