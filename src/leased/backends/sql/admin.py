"""What people do to jobs and queues, one part over a database (database.py): retry and cancel one
job or many, pause and resume a queue, set a queue's limits. What becomes due wakes the workers
after the commit, as an enqueue does (a no-op where the commit itself notifies). A one-job action
that changed nothing says why (`changed_or_explain`), whichever way the verb was written.
"""

from __future__ import annotations

from typing import Any

from leased.backends.sql.database import Database
from leased.backends.sql.inspection import Inspection
from leased.backends.sql.params import CANCELLED_BY_A_USER, queue_limit_params, running_records
from leased.backends.sql.step_ends import StepEnds
from leased.errors import InvalidTransition, JobNotFound
from leased.jobs import Job, JobStatus, Outcome
from leased.limits import QueueLimit


class Admin:
    def __init__(self, database: Database, step_ends: StepEnds, inspection: Inspection):
        self._database = database
        self._step_ends = step_ends
        self._inspection = inspection
        self._execute = database.execute
        self._all = database.all

    def retry(self, job_id: int) -> Job:
        def work(connection: Any) -> Any:
            row = self._execute(connection, "lock_for_retry", job_id=job_id).fetchone()
            if row is not None:
                self._execute(connection, "retry", job_id=job_id)
                if row["workflow_id"] is not None:
                    self._step_ends.retried_steps(connection, [job_id])
            return row

        try:
            row = self._database.transact(work)
        except Exception as error:
            if not self._database.is_duplicate_key(error):
                raise
            raise InvalidTransition(
                f"job {job_id} cannot be retried: another pending job holds its idempotency key") from None
        if row is not None:
            self._database.wake([row["queue_name"]])
        return self.changed_or_explain(row, job_id, "retry", "failed or cancelled")

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
                released.update(self._step_ends.settle_rows(connection, [_cancelled(row)]))
            return row

        row = self._database.transact(work)
        self._database.wake(released)
        return self.changed_or_explain(row, job_id, "cancel", "waiting, pending, running or sleeping")

    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int:
        def work(connection: Any) -> list[Any]:
            rows = self._all(connection, "failed_to_retry", task_name=task_name, queue_name=queue_name)
            if rows:
                self._execute(connection, "retry_jobs", job_ids=self._database.ids(rows))
                self._step_ends.retried_steps(connection, [row["id"] for row in rows if row["workflow_id"] is not None])
            return rows

        retried = self._database.transact(work)
        self._database.wake(row["queue_name"] for row in retried)
        return len(retried)

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int:
        released: set[str] = set()

        def work(connection: Any) -> int:
            released.clear()
            rows = self._all(connection, "pending_to_cancel", task_name=task_name, queue_name=queue_name)
            if rows:  # a pending job runs no attempt: no record to write
                self._execute(connection, "cancel_jobs", job_ids=self._database.ids(rows))
                released.update(self._step_ends.settle_rows(connection, (_cancelled(row) for row in rows)))
            return len(rows)

        cancelled = self._database.transact(work)
        self._database.wake(released)
        return cancelled

    def pause_queue(self, queue_name: str) -> bool:
        def work(connection: Any) -> bool:
            self._execute(connection, "ensure_queue", queue_name=queue_name)
            return self._execute(connection, "pause_queue", queue_name=queue_name).rowcount > 0

        return self._database.transact(work)

    def resume_queue(self, queue_name: str) -> bool:
        resumed = self._database.transact(
            lambda connection: self._execute(connection, "resume_queue", queue_name=queue_name).rowcount > 0)
        if resumed:
            self._database.wake([queue_name])
        return resumed

    def set_queue_limit(self, limit: QueueLimit) -> None:
        if limit.is_empty:
            self._database.transact(
                lambda connection: self._execute(connection, "clear_queue_limit", queue_name=limit.queue_name))
        else:
            self._database.transact(
                lambda connection: self._execute(connection, "set_queue_limit", **queue_limit_params(limit)))

    def changed_or_explain(self, row: Any, job_id: int, action: str, allowed: str) -> Job:
        """The job after a one-job action; when the action changed nothing (`row` None), why."""
        job = self._inspection.get_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        if row is None:
            raise InvalidTransition(f"cannot {action} job {job_id}: it is {job.status}, and only {allowed} jobs can be")
        return job


def _cancelled(row: Any) -> dict[str, Any]:
    """A job row just cancelled, as StepEnds.settle_rows reads it."""
    return {"id": row["id"], "status": JobStatus.CANCELLED.value, "workflow_id": row["workflow_id"]}
