"""The claimed attempts: each one's way from its claim to its written end, and their cancellation.

An attempt waits for a slot, runs (engine/executor.py), frees its slot when its handler returns,
then hands its end to the completer; it stays here until that fenced write tells whether the
lease held. Cancellation carries its cause, and the first cause wins: a timeout, a lost lease, a
user's cancel or the shutdown. An attempt whose end is being written is finished: nothing
cancels it any more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from leased.backends.base import AttemptEnd, Backend
from leased.engine.claimer import Claimer
from leased.engine.completer import Completer
from leased.engine.context import CancelReason, TaskContext
from leased.engine.executor import Attempt, Executor, Handler
from leased.engine.heartbeat import Heartbeat
from leased.engine.retrying import is_transient, one_line
from leased.engine.timelimits import timeout_end
from leased.events import AttemptEnded, Event
from leased.jobs import Job, Lease, Outcome

log = logging.getLogger("leased.worker")

_OUTCOME_OF_CANCEL = {
    CancelReason.LEASE_LOST: Outcome.LEASE_LOST,
    CancelReason.CANCELLED: Outcome.CANCELLED,
    CancelReason.SHUTDOWN: Outcome.SHUTDOWN,
    CancelReason.TIMEOUT: Outcome.TIMEOUT,
}


@dataclass
class WorkerStats:
    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    abandoned: int = 0  # lease lost, cancelled by a user, or released at shutdown


class ClaimedAttempts:
    def __init__(self, backend: Backend, handlers: Mapping[str, Handler], *, claimer: Claimer, executor: Executor,
                 completer: Completer, heartbeat: Heartbeat, stats: WorkerStats, emit: Callable[[Event], None],
                 worker_id: str):
        self._backend = backend
        self._claimer = claimer  # its slots, and the wake-ups it waits for
        self._handlers = handlers
        self._executor = executor
        self._completer = completer
        self._heartbeat = heartbeat
        self._stats = stats
        self._emit = emit
        self._worker_id = worker_id
        self._by_lease: dict[Lease, Attempt] = {}  # claimed, until the attempt's end is written

    def __len__(self) -> int:
        return len(self._by_lease)

    def __iter__(self) -> Iterator[Attempt]:
        return iter(self._by_lease.values())

    def start(self, jobs: list[Job], claimed_at: float) -> None:
        self._heartbeat.track([(job.lease, job.lease_seconds) for job in jobs], claimed_at)
        for job in jobs:
            attempt = Attempt(job, TaskContext(job, self._worker_id))
            self._by_lease[job.lease] = attempt
            self._stats.claimed += 1
            attempt.execution = asyncio.create_task(self._execute(attempt), name=f"leased-job-{job.id}")

    async def _execute(self, attempt: Attempt) -> None:
        job, context, lease = attempt.job, attempt.context, attempt.job.lease
        started = 0.0  # when it gets its slot
        outcome, will_retry, written = None, False, False
        time_limits = self._executor.time_limits
        try:
            await self._claimer.slots.acquire()
            try:
                started = time.monotonic()
                end = None if context.is_cancelled else await self._executor.run(attempt)
            finally:
                timed_out = context.cancel_reason is CancelReason.TIMEOUT
                time_limits.after_attempt(job, attempt.time_limit, timed_out, attempt.thread,
                                          self._claimer.slot_freed)
            if timed_out:  # whatever the handler did after its limit, the attempt ended there
                end = timeout_end(job, self._handlers[job.task_name].backoff, attempt.thread)
            if end is not None and context.cancel_reason in (None, CancelReason.TIMEOUT):
                attempt.finishing = True
                written = await self._completer.finish(end)
                if written:
                    self._count(end)
                    outcome, will_retry = end.outcome, end.retry_in_seconds is not None
                else:
                    log.warning("job %d (%s) attempt %d: lease lost before the result was written; "
                                "result discarded", job.id, job.task_name, job.attempt)
                    context.cancel(CancelReason.LEASE_LOST)
            if not written and context.is_cancelled:
                outcome = _OUTCOME_OF_CANCEL[context.cancel_reason]
                await self._abandon(attempt)
        except Exception:
            # Storage failed while recording the end: the lease will expire and the job run again.
            log.exception("job %d (%s) attempt %d: could not record its end", job.id, job.task_name, job.attempt)
        finally:
            self._heartbeat.untrack(lease)
            self._by_lease.pop(lease, None)
            self._claimer.attempt_closed()
        if outcome is not None:
            self._emit(AttemptEnded(job.id, job.task_name, job.queue_name, job.attempt, outcome,
                                    time.monotonic() - started, self._worker_id, will_retry))

    async def _abandon(self, attempt: Attempt) -> None:
        self._stats.abandoned += 1
        if attempt.context.cancel_reason is CancelReason.LEASE_LOST:
            # If the lease was taken over, this writes nothing. If this worker gave up on its own
            # (it could not renew), the job goes back to the pool now rather than at expiry.
            cause = attempt.lapse_cause
            message = (f"the worker {cause}" if cause else "the worker lost its lease") + \
                "; handler cancelled, result discarded"
            try:  # its own account of the lapse replaces the reclaimer's guess ("stopped renewing")
                await asyncio.to_thread(self._backend.release, [attempt.job.lease], Outcome.LEASE_LOST, message,
                                        explains_expiry=cause is not None)
            except Exception as error:
                if not is_transient(error):
                    raise
                log.warning("job %d: could not give it back (%s); it returns when its lease expires",
                            attempt.job.id, one_line(error))
        # A user's cancel and a shutdown release have already closed the attempt's record.

    def _count(self, end: AttemptEnd) -> None:
        if end.outcome is Outcome.DONE:
            self._stats.done += 1
        elif end.retry_in_seconds is not None:
            self._stats.retried += 1
        else:
            self._stats.failed += 1

    def cancel(self, lease: Lease, reason: CancelReason, cause: str | None = None) -> None:
        """On the loop: cancel the attempt's handler, unless it ended or another cause came first."""
        attempt = self._by_lease.get(lease)
        if attempt is None or attempt.finishing or not attempt.context.cancel(reason):
            return
        attempt.lapse_cause = cause
        log.warning("job %d (%s) attempt %d: %s%s; cancelling its handler", lease.job_id, attempt.job.task_name,
                    lease.attempt, reason, f" (the worker {cause})" if cause else "")
        if attempt.handler is not None:
            attempt.handler.cancel()

    async def wind_down(self, grace: float, forced: asyncio.Event) -> None:
        """The shutdown: let the attempts finish within `grace` (or until `forced`), then cancel the
        rest and give their leases back at once."""
        if self._by_lease:
            finished = asyncio.create_task(asyncio.wait([attempt.execution for attempt in self]))
            force = asyncio.create_task(forced.wait())
            await asyncio.wait([finished, force], timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            finished.cancel()
            force.cancel()
        leftovers = [attempt for attempt in self  # an attempt being recorded is finished
                     if not attempt.finishing and attempt.context.cancel(CancelReason.SHUTDOWN)]
        if leftovers:
            log.warning("worker %s: releasing %d unfinished job(s)", self._worker_id, len(leftovers))
            try:
                await asyncio.to_thread(self._backend.release, [attempt.job.lease for attempt in leftovers],
                                        Outcome.SHUTDOWN, "released by the worker at shutdown")
            except Exception as error:
                log.error("worker %s: could not release leases (%s); they return when they expire", self._worker_id,
                          one_line(error))
            for attempt in leftovers:
                if attempt.handler is not None:
                    attempt.handler.cancel()
        # Every execution, including those cancelled earlier for another reason, records its end
        # before the loop closes.
        if self._by_lease:
            await asyncio.wait([attempt.execution for attempt in self])
