"""Jobs that wait: the WaitPort's verbs over any SQL dialect (migration 0026).

A handler's wait (TaskContext.sleep, wait_for) is one transaction fenced on its lease: it takes a
signal already in the job's mailbox, or finds its end has come, or ends the attempt and puts the job
to sleep ('sleeping', with a row in leased_waits). What the wait came to is recorded as a durable
step in that same transaction, so a rerun of the handler replays it: the same payload, the same end.
A signal is a row in leased_signals, written in the sender's transaction when given one; it wakes
the job at once if the job sleeps waiting for its name. A sleep's end (or a signal's timeout) is
found by wake_sleepers through the waits' index on their end: the sleepers themselves are not read.

The part is built from the Database (database.py) and calls only its public names: transact,
execute, rows, in_callers, to_time, from_json.
"""

from __future__ import annotations

import json
from typing import Any

from leased.backends.ports import SignalRequest, WaitAnswer, WaitOutcome, WaitRequest
from leased.backends.sql.rows import signal_from_row, sleeping_on_from_row
from leased.errors import InvalidTransition, JobNotFound
from leased.jobs import JobStatus, Outcome, Signal, SleepingOn

ENDED = (JobStatus.DONE.value, JobStatus.FAILED.value, JobStatus.CANCELLED.value)
# Sleeping jobs woken by one reclaim at most (the rest by the next, a second later).
WAKE_BATCH = 1000


class Waits:
    def __init__(self, store: Any):
        self.store = store

    # The handler's side.
    def begin_wait(self, request: WaitRequest) -> WaitAnswer:
        return self.store.transact(lambda connection: self._begin_wait(connection, request))

    def _begin_wait(self, connection: Any, request: WaitRequest) -> WaitAnswer:
        store, lease = self.store, request.lease
        fence = store.execute(connection, "lease_fence", job_id=lease.job_id, attempt=lease.attempt,
                              worker_id=lease.worker_id).fetchone()
        if fence is None:
            return WaitAnswer(WaitOutcome.LOST)
        if request.signal_name is not None:
            signal = store.execute(connection, "oldest_signal", job_id=lease.job_id,
                                   name=request.signal_name).fetchone()
            if signal is not None:
                store.execute(connection, "take_signal", id=signal["id"], attempt=lease.attempt)
                payload = store.from_json(signal["payload"])
                self._record(connection, request, request.step_name, {"payload": payload})
                return WaitAnswer(WaitOutcome.TOOK, payload=payload)
        (end,) = store.execute(connection, "wait_ends_at", until=request.until_epoch,
                               seconds=request.seconds).fetchall()
        ends_at = None if end["ends_at"] is None else store.to_time(end["ends_at"])
        if ends_at is not None and not request.end_recorded:  # its first wait: the end its reruns keep
            end_step = request.step_name if request.signal_name is None else f"{request.step_name}.end"
            self._record(connection, request, end_step, ends_at.timestamp())
        if end["due"]:
            if request.signal_name is not None:
                self._record(connection, request, request.step_name, {"timed_out": True})
            return WaitAnswer(WaitOutcome.DUE, ends_at=ends_at)
        # Its record first: begin_wait clears the lease it is read from.
        store.execute(connection, "record_attempts", ends=json.dumps(
            [[lease.job_id, lease.attempt, lease.worker_id, Outcome.WAITED.value, None, None, None, None, None]]))
        store.execute(connection, "begin_wait", job_id=lease.job_id, attempt=lease.attempt, worker_id=lease.worker_id)
        store.execute(connection, "set_wait", job_id=lease.job_id, signal_name=request.signal_name,
                      wake_at=end["ends_at"])
        return WaitAnswer(WaitOutcome.WAITING, ends_at=ends_at)

    def _record(self, connection: Any, request: WaitRequest, name: str, result: Any) -> None:
        lease = request.lease
        self.store.execute(connection, "record_durable_step", job_id=lease.job_id, name=name, attempt=lease.attempt,
                           result=json.dumps(result), seconds=0.0)

    # The sender's side.
    def send_signal(self, request: SignalRequest, connection: Any = None) -> Signal:
        """In the caller's open transaction on `connection` (a rolled-back one sends nothing), or in one of ours."""
        if connection is not None:  # PostgreSQL's NOTIFY rides the caller's commit; elsewhere, the next poll
            return self.store.in_callers(connection, lambda callers: self.signal_in(callers, request)[0])
        signal, woken_queue = self.store.transact(lambda own: self.signal_in(own, request))
        if woken_queue is not None:  # after the commit: the job is claimable now (datagrams; NOTIFY is sent)
            self.store.wake([woken_queue])
        return signal

    def signal_in(self, connection: Any, request: SignalRequest) -> tuple[Signal, str | None]:
        """In the transaction open on `connection` (the caller's, or one of ours): the signal, and
        the queue of the job it woke, if it woke one."""
        store = self.store
        job_id = request.job_id
        if job_id is None:
            holder = store.execute(connection, "job_with_key", key=request.idempotency_key).fetchone()
            if holder is None:
                raise JobNotFound(None, idempotency_key=request.idempotency_key)
            job_id = holder["id"]
        job = store.execute(connection, "lock_for_signal", job_id=job_id).fetchone()
        if job is None:
            raise JobNotFound(job_id)
        if job["status"] in ENDED:
            raise InvalidTransition(f"cannot signal job {job_id} ({request.name!r}): it is {job['status']}, and only "
                                    "a job that has not ended takes signals")
        (row,) = store.execute(connection, "insert_signal", job_id=job_id, name=request.name,
                               payload=request.payload_json).fetchall()
        signal = self._signal(row)
        if job["status"] == JobStatus.SLEEPING.value:
            wait = store.execute(connection, "job_wait", job_id=job_id).fetchone()
            if wait is not None and wait["signal_name"] == request.name:
                ids = json.dumps([job_id])
                store.execute(connection, "wake_jobs", job_ids=ids)
                store.execute(connection, "end_waits", job_ids=ids, due_only=0)
                return signal, job["queue_name"]
        return signal, None

    # The waker's side: the periodic reclaim's (store._reclaim, PostgreSQL's reclaim_expired).
    def wake_sleepers(self, limit: int = WAKE_BATCH) -> int:
        return int(self.store.transact(lambda connection: self.wake_due(connection, limit)))

    def wake_due(self, connection: Any, limit: int) -> int:
        """In the transaction open on `connection`: sleeping jobs whose wait has ended made pending
        (at most `limit`), found through the waits' index on their end. How many."""
        due = self.store.execute(connection, "due_waits", limit=limit).fetchall()
        if not due:
            return 0
        ids = json.dumps([row["job_id"] for row in due])
        woken = self.store.execute(connection, "wake_jobs", job_ids=ids).rowcount
        self.store.execute(connection, "end_waits", job_ids=ids, due_only=1)
        return int(woken)

    # Reads.
    def job_wait(self, job_id: int) -> SleepingOn | None:
        rows = self.store.rows("job_wait", job_id=job_id)
        return sleeping_on_from_row(rows[0], self.store.to_time) if rows else None

    def signals(self, job_id: int) -> list[Signal]:
        return [self._signal(row) for row in self.store.rows("job_signals", job_id=job_id)]

    def _signal(self, row: Any) -> Signal:
        return signal_from_row(row, self.store.to_time, self.store.from_json)
