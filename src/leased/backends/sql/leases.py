"""Leases and ends, one part over a database (database.py): the worker's writes after a claim,
each fenced on (job, attempt, worker) and each the named statements of one transaction: renew,
finish, release, the reclaim of expired leases, and the workers' rows (a transactional handler's
end is fenced.py's, over `finish_on` here). PostgreSQL may do the hot ones in one
statement each instead (postgres/fused.py); writes.py says which verbs those are.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from leased.admin import WORKER_GONE_AFTER
from leased.backends.ports import AttemptEnd, WorkerRecord
from leased.backends.sql.database import Database
from leased.backends.sql.params import (ends_json, expired_failures, expired_leases, finished_counts, leases_json,
                                        progress_json, released_records, running_records, worker_params)
from leased.backends.sql.step_ends import StepEnds
from leased.backends.sql.waits import WAKE_BATCH, Waits
from leased.jobs import JobStatus, Lease, Outcome


class Leases:
    def __init__(self, database: Database, step_ends: StepEnds, waits: Waits):
        self._database = database
        self._step_ends = step_ends
        self._waits = waits
        self._execute = database.execute
        self._all = database.all

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

        renewed = self._database.transact(work, wait_seconds)
        return {Lease(row["id"], row["attempt"], held["worker_id"]) for row in renewed}

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        if not ends:
            return []
        prepared = _FinishParams(ends)  # before the transaction: on SQLite, other writers wait for its lock
        released: set[str] = set()

        def work(connection: Any) -> list[bool]:
            released.clear()  # a conflict's rerun starts again
            kept, due = self.finish_on(connection, ends, prepared)
            released.update(due)
            return kept

        kept = self._database.transact(work)
        if released:  # steps their parents' ends made due
            self._database.wake(released)
        return kept

    def finish_on(self, connection: Any, ends: Sequence[AttemptEnd], prepared: _FinishParams | None = None, *,
                  held: Mapping[Lease, Any] | None = None, counted_as: str | None = None
                  ) -> tuple[list[bool], set[str]]:
        """finish()'s statements in the transaction open on `connection`: whether each end was
        written, and the queues of the steps their ends made due (to wake after the commit).
        `held`: the rows of the leases still held, read (and locked) already; `counted_as`: the
        throughput row's worker key, when not the ending worker's own."""
        prepared = prepared or _FinishParams(ends)
        if held is None:
            found: dict[Lease, Any] = {}
            for worker_id, leases in prepared.leases_of.items():
                rows = self._all(connection, "leases_to_finish", worker_id=worker_id, leases=leases)
                found |= {Lease(row["id"], row["attempt"], worker_id): row for row in rows}
            held = found
        # By the whole lease, worker too: an end for a job another worker holds is not written.
        kept = [end.lease in held for end in ends]
        written = [end for end, flag in zip(ends, kept, strict=True) if flag]
        released: set[str] = set()
        if written:  # the records first: finish clears the leases they are read from
            records, finishes = prepared.all_ends if len(written) == len(ends) else ends_json(written)
            self._execute(connection, "record_attempts", ends=records)
            self._execute(connection, "finish", ends=finishes)
            rows = [held[end.lease] for end in written]
            self._count_finished(connection, finished_counts(
                (row["queue_name"], row["task_name"], counted_as or end.lease.worker_id, end.job_status)
                for end, row in zip(written, rows, strict=True)))
            if any(row["workflow_id"] is not None for row in rows):  # a step ended: its children settle
                released = self._step_ends.settle_rows(connection, (
                    {"id": end.lease.job_id, "status": end.job_status.value, "workflow_id": row["workflow_id"]}
                    for end, row in zip(written, rows, strict=True)))
        return kept, released

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

        self._database.transact(work)

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        # Never skipped: these workers reclaim in their claims, and only PostgreSQL's take turns.
        return self._database.transact(self.reclaim)

    def bury_workers(self, id_prefix: str, how: str) -> int:
        """Workers whose ids start with `id_prefix` died (`how`), as their supervisor saw: mark their
        rows gone and end their attempts at once as crashed, not a lease later."""
        def work(connection: Any) -> int:
            self._execute(connection, "bury_workers", prefix=id_prefix, silent_after=WORKER_GONE_AFTER)
            self._execute(connection, "expire_leases_of", prefix=id_prefix)
            return self.reclaim(connection, buried=(id_prefix, how))

        return self._database.transact(work)

    def reclaim(self, connection: Any, buried: tuple[str, str] | None = None) -> int:
        """In the caller's transaction: expired leases read once, so that their attempts' records
        (written before the reclaim clears the leases they are read from) and the jobs reclaimed
        are the same set. Sleeping jobs whose wait has ended go back to the pool with them (a read of
        the waits' index when none has): an idle worker's poll stays one transaction."""
        woken = self._waits.wake_due(connection, WAKE_BATCH)
        expired = expired_leases(self._all(connection, "expired_ids", silent_after=WORKER_GONE_AFTER),
                                 WORKER_GONE_AFTER, buried)
        if expired:
            self._execute(connection, "record_attempts", ends=running_records(expired, None))
            self._execute(connection, "reclaim_expired", job_ids=self._database.ids(expired))
            self._count_finished(connection, expired_failures(expired))
            # A step out of attempts has failed: its children settle in this transaction. (Those
            # it releases are claimed by the next poll: no wake-up is sent from inside a claim.)
            self._step_ends.settle_rows(connection, ({"id": row["id"], "status": JobStatus.FAILED.value,
                                                      "workflow_id": row["workflow_id"]}
                                                     for row in expired if row["last_attempt"]))
        return len(expired) + woken

    def _count_finished(self, connection: Any, counts: str | None) -> None:
        if counts is not None:  # None: no job finished (every end a retry, every expired lease had attempts left)
            self._execute(connection, "count_finished", counts=counts)

    # Workers.
    def register_worker(self, worker: WorkerRecord) -> None:
        def work(connection: Any) -> None:
            self._execute(connection, "register_worker", **worker_params(worker))
            self._execute(connection, "prune_workers")

        self._database.transact(work)

    def unregister_worker(self, worker_id: str) -> None:
        self._database.transact(lambda connection: self._execute(connection, "unregister_worker", id=worker_id))


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
