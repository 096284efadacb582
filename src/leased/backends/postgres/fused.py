"""PostgreSQL's fused verbs: write verbs done in one statement each (data-modifying CTEs), where
the shared parts (backends/sql/) do them as the named statements of one transaction.

A job and its attempt record change together in one statement on an autocommit connection, so
each verb is one round trip and a transaction of its own: the hot path (renew, finish) and the
reclaim cost a worker one statement each. They keep the promises of the shared sequence, which the
conformance suite checks by running both on PostgreSQL (tests/conformance/test_postgres_fused.py): build a
backend with `PostgresBackend(url, fused=False)` to run the shared sequence instead.

The statements are queries.sql's `fused_*` ones; what a step's end settles in its workflow, the
retried steps' undoing (sql/step_ends.py), and the one-job actions' explanations (sql/admin.py) are
the shared parts', which this part composes; each transaction of several statements is the
database's `transact`, with its conflict retry.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import psycopg
from psycopg import errors
from psycopg.rows import dict_row

from leased.admin import WORKER_GONE_AFTER
from leased.backends.ports import AttemptEnd, PruneRule
from leased.backends.postgres.claims import reclaim_params
from leased.backends.postgres.connections import DictConnection, DictCursor, PostgresConnections, one
from leased.backends.postgres.queries import QUERIES
from leased.backends.sql.admin import Admin
from leased.backends.sql.database import Database
from leased.backends.sql.params import rule_params
from leased.backends.sql.step_ends import StepEnds
from leased.errors import InvalidTransition
from leased.jobs import Job, Lease, Outcome

# The finish in a transactional handler's own transaction, where now() is when the handler began.
FINISH_AT_STATEMENT_TIME = QUERIES["fused_finish"].replace(
    "leased_now()", "(leased_now() + (statement_timestamp() - now()))")


def _lease_arrays(leases: Sequence[Lease]) -> dict[str, Any]:
    return {"worker_id": leases[0].worker_id, "job_ids": [lease.job_id for lease in leases],
            "attempts": [lease.attempt for lease in leases]}


def _finish_params(ends: Sequence[AttemptEnd], counted_as: str | None = None) -> dict[str, Any]:
    return dict(
        counted_as=counted_as,
        job_ids=[end.lease.job_id for end in ends], attempts=[end.lease.attempt for end in ends],
        worker_ids=[end.lease.worker_id for end in ends], statuses=[end.job_status.value for end in ends],
        results=[end.result_json for end in ends], last_errors=[end.last_error for end in ends],
        retry_in_seconds=[end.retry_in_seconds or 0.0 for end in ends],
        outcomes=[end.outcome.value for end in ends], error_types=[end.error_type for end in ends],
        error_messages=[end.error_message for end in ends], tracebacks=[end.traceback for end in ends],
        progress=[end.progress_json for end in ends],
        handler_outlived_limits=[end.handler_outlived_limit for end in ends],
        trace_contexts=[end.trace_context for end in ends])


def _written(ends: Sequence[AttemptEnd], rows: Sequence[Mapping[str, Any]]) -> list[bool]:
    """Whether each end was written, by its whole lease: an end for a job another worker holds was not."""
    written = {Lease(row["id"], row["attempt"], row["worker_id"]) for row in rows}
    return [end.lease in written for end in ends]


class FusedWrites:
    """The write verbs PostgreSQL does in one statement each, over its connections and the shared parts."""

    def __init__(self, connections: PostgresConnections, database: Database, step_ends: StepEnds, admin: Admin):
        self._connections = connections
        self._database = database
        self._step_ends = step_ends
        self._admin = admin

    def _execute(self, connection: psycopg.Connection[Any], name: str, /, **params: Any) -> DictCursor:
        return connection.cursor(row_factory=dict_row).execute(QUERIES[name], params)

    def _fetch_one(self, name: str, **params: Any) -> Any:
        return self._connections.fetch_one(name, **params)

    # The hot path.
    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]:
        # wait_seconds bounds SQLite's wait for its one write lock; PostgreSQL has none to wait for.
        if not leases:
            return set()
        worker_id = leases[0].worker_id
        reported = progress or {}
        rows = self._connections.rows("fused_renew", **_lease_arrays(leases),
                                      progress=[reported.get(lease) for lease in leases])
        return {Lease(row["id"], row["attempt"], worker_id) for row in rows}

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        if not ends:
            return []
        params = _finish_params(ends)
        if any(end.workflow_id is not None for end in ends):
            # A step's end settles its children in the same transaction (sql/workflows.py); other
            # ends stay one statement in autocommit, one round trip.
            def work(connection: DictConnection) -> list[dict[str, Any]]:
                ended = self._execute(connection, "fused_finish", **params).fetchall()
                self._step_ends.settle_rows(connection, ended)
                return ended

            rows = self._database.transact(work)
        else:
            rows = self._connections.rows("fused_finish", **params)
            if any(row["workflow_id"] is not None for row in rows):  # a caller that did not say (not the engine)
                self._database.transact(lambda connection: self._step_ends.settle_rows(connection, rows))
        return _written(ends, rows)

    def finish_on(self, connection: psycopg.Connection[Any], ends: Sequence[AttemptEnd], *,
                  held: Mapping[Lease, Any] | None = None, counted_as: str | None = None
                  ) -> tuple[list[bool], set[str]]:
        """finish() in a transactional handler's transaction (sql/fenced.py), timed by the
        statement's clock: leased_now() there is when the handler's transaction began. Its one
        statement fences each end itself: the rows of `held` are not needed."""
        with connection.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(FINISH_AT_STATEMENT_TIME, _finish_params(ends, counted_as)).fetchall()
        in_workflows = any(row["workflow_id"] is not None for row in rows)
        released = self._step_ends.settle_rows(connection, rows) if in_workflows else set()
        return _written(ends, rows), released

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False) -> None:
        if leases:
            self._connections.run("fused_release", **_lease_arrays(leases), outcome=outcome.value, message=message)
        if leases and explains_expiry:
            self._connections.run("fused_explain_expired", **_lease_arrays(leases), message=message)

    # Reclaims: the workers take turns (`skip_if_done_within`, migration 0020).
    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        with self._connections.connection() as connection:
            reclaimed = one(connection.execute(QUERIES["fused_reclaim_expired"],
                                           reclaim_params(steps=False, spacing=skip_if_done_within)))
        return reclaimed["n"] + (self.reclaim_expired_steps() if reclaimed["steps_left"] else 0)

    def bury_workers(self, id_prefix: str, how: str) -> int:
        def work(connection: DictConnection) -> Any:
            self._execute(connection, "bury_workers", prefix=id_prefix, silent_after=WORKER_GONE_AFTER)
            reclaimed = one(connection.execute(QUERIES["fused_reclaim_expired"],
                                           reclaim_params(steps=False, buried=(id_prefix, how))))
            # A step this crash quarantined (lapsed could not know its worker was buried) settles here.
            self._step_ends.settle_rows(connection, reclaimed["failed_steps"])
            return reclaimed

        reclaimed = self._database.transact(work)
        # A workflow's step that this crash fails settles its children in a transaction of its own.
        return reclaimed["n"] + (self.reclaim_expired_steps() if reclaimed["steps_left"] else 0)

    def reclaim_expired_steps(self) -> int:
        """Fail the workflow steps whose last lease expired, and settle their children, in one
        transaction (the claim's reclaim leaves them: it runs in one round trip)."""
        def work(connection: DictConnection) -> int:
            reclaimed = one(connection.execute(QUERIES["fused_reclaim_expired"], reclaim_params(steps=True)))
            self._step_ends.settle_rows(connection, reclaimed["failed_steps"])
            return reclaimed["n"]

        return self._database.transact(work)

    # What people do to jobs and queues. A job due again wakes the workers by NOTIFY at commit.
    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int:
        def work(connection: DictConnection) -> int:
            retried = one(self._execute(connection, "fused_retry_failed", task_name=task_name,
                                    queue_name=queue_name))
            self._step_ends.retried_steps(connection, retried["steps"])
            return retried["n"]

        return self._database.transact(work)

    def retry(self, job_id: int) -> Job:
        def work(connection: DictConnection) -> dict[str, Any] | None:
            row = self._execute(connection, "fused_retry", job_id=job_id).fetchone()
            if row is not None and row["workflow_id"] is not None:
                self._step_ends.retried_steps(connection, [job_id])
            return row

        try:
            row = self._database.transact(work)
        except errors.UniqueViolation:
            raise InvalidTransition(
                f"job {job_id} cannot be retried: another pending job holds its idempotency key") from None
        return self._admin.changed_or_explain(row, job_id, "retry", "failed or cancelled")

    def cancel(self, job_id: int) -> Job:
        def work(connection: DictConnection) -> dict[str, Any] | None:
            row = self._execute(connection, "fused_cancel", job_id=job_id).fetchone()
            if row is not None:
                self._step_ends.settle_rows(connection, [row])
            return row

        return self._admin.changed_or_explain(self._database.transact(work), job_id, "cancel",
                                                "waiting, pending, running or sleeping")

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int:
        def work(connection: DictConnection) -> int:
            cancelled = one(self._execute(connection, "fused_cancel_pending", task_name=task_name,
                                      queue_name=queue_name))
            self._step_ends.settle_rows(connection, cancelled["steps"])
            return cancelled["n"]

        return self._database.transact(work)

    def pause_queue(self, queue_name: str) -> bool:
        return self._fetch_one("fused_pause_queue", queue_name=queue_name) is not None

    def resume_queue(self, queue_name: str) -> bool:
        return self._fetch_one("fused_resume_queue", queue_name=queue_name) is not None  # NOTIFYs at commit

    # Pruning.
    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        def work(connection: DictConnection) -> int:
            pruned = one(self._execute(connection, "fused_prune_batch", **rule_params(rule, self._database.list_param),
                                   limit=limit))
            if pruned["workflow_ids"]:  # a run goes once the last of its steps has
                self._execute(connection, "delete_empty_workflows", workflow_ids=pruned["workflow_ids"])
            return pruned["n"]

        return self._database.transact(work)

    def fold_throughput(self, older_than_seconds: float) -> int:
        return self._connections.one("fused_fold_throughput", older_than=older_than_seconds)["n"]
