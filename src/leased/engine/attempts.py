"""The claimed attempts: each one's way from its claim to its written end, and their cancellation.

An attempt waits for a slot (engine/slots.py) and runs (engine/executor.py): a sync one on a
handler thread, which then takes the next waiting job itself, an async one as a task on the loop.
Its slot frees when its handler returns; its end goes to the completer, and it stays here until
that fenced write tells whether the lease held. The loop hears of ends a batch at a time.
Cancellation carries its cause, and the first cause wins: a timeout, a lost lease, a user's cancel
or the shutdown. An attempt whose end is being written is finished: nothing cancels it any more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from leased import logs, tracing
from leased.backends.ports import AttemptEnd, RuntimePort
from leased.engine.completer import Completer, Recorded
from leased.engine.transactional import Written
from leased.engine.context import CancelReason, TaskContext
from leased.engine.claimed import ClaimedAttempt, Handler
from leased.engine.executor import Executor
from leased.engine.heartbeat import Heartbeat, LateRenewal
from leased.engine.retrying import is_transient, one_line
from leased.engine.slots import Slots
from leased.engine.threads import HandlerThreads, LoopInbox
from leased.engine.timelimits import TimeLimits, timeout_end
from leased.events import AttemptEnded, Event
from leased.jobs import ClaimedJob, Lease, Outcome

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
    waited: int = 0  # ended by their handler's wait (context.sleep, wait_for): the job sleeps

    def __str__(self) -> str:
        """What the worker's last log line says: '5 done, 1 failed, 2 retried (of 8 claimed)'."""
        text = f"{self.done} done, {self.failed} failed, {self.retried} retried (of {self.claimed} claimed)"
        if self.waited:
            text += f", {self.waited} waiting"
        if self.abandoned:
            text += f", {self.abandoned} given up (lease lost, cancelled by a user or released at shutdown)"
        return text


class ClaimedAttempts:
    def __init__(self, backend: RuntimePort, handlers: Mapping[str, Handler], concurrency: int, *, executor: Executor,
                 completer: Completer, heartbeat: Heartbeat, stats: WorkerStats,
                 emit: Callable[[Event], None], worker_id: str, slot_freed: Callable[[], None],
                 closed: Callable[[], None], thread_failed: Callable[[BaseException], None]):
        self._backend = backend
        self._handlers = handlers
        self._executor = executor
        self._time_limits: TimeLimits = executor.time_limits
        self._completer = completer  # it reports back to recorded()
        self._heartbeat = heartbeat
        self._stats = stats
        self._emit = emit
        self._worker_id = worker_id
        self._closed = closed  # attempts closed: with nothing left, stop_when_idle looks again
        self._threads: HandlerThreads[ClaimedAttempt] = HandlerThreads(self._run_on_thread, thread_failed)
        self._to_loop: LoopInbox[ClaimedAttempt] = LoopInbox(self._start_on_loop)
        self.slots = Slots(concurrency, run_on_thread=self._threads.run, run_on_loop=self._to_loop.put,
                           freed=slot_freed, threads_behind=lambda: self._threads.behind)
        self._by_lease: dict[Lease, ClaimedAttempt] = {}  # claimed, until the attempt's end is written
        self._all_closed = asyncio.Event()
        self._all_closed.set()
        self._giving_back: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._by_lease)

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        self._to_loop.start(loop)

    def start_threads(self) -> None:
        """Sync handlers are registered: start a thread per slot, idle (blocks while they start)."""
        self._threads.start_idle(self.slots.concurrency)

    def close(self) -> None:
        """The worker stopped: idle handler threads exit, busy ones when their handler returns."""
        self._threads.shutdown()

    def start(self, jobs: list[ClaimedJob], claimed_at: float) -> None:
        """On the loop: jobs just claimed wait for a slot, in claim order."""
        attempts = []
        for job in jobs:
            context = TaskContext(job, self._worker_id, self._backend, report_progress=self._heartbeat.report)
            attempt = ClaimedAttempt(job, context, self._handlers[job.task_name])
            self._by_lease[attempt.lease] = attempt
            attempts.append(attempt)
        self._heartbeat.track([(attempt.lease, attempt.job.lease_seconds) for attempt in attempts], claimed_at)
        self._stats.claimed += len(attempts)
        if attempts:
            self._all_closed.clear()
        self.slots.add(attempts)

    def _run_on_thread(self, attempt: ClaimedAttempt) -> ClaimedAttempt | None:
        """On a handler thread: run it, hand its end on, and return the next attempt for this thread."""
        self._completer.finish(attempt, self._executor.run_sync(attempt))  # raising here is the engine's bug
        return self.slots.ended(attempt, on_thread=True)

    def _start_on_loop(self, attempts: list[ClaimedAttempt]) -> None:
        for attempt in attempts:
            self._executor.start_async(attempt, self._async_ended)

    def _async_ended(self, attempt: ClaimedAttempt, end: AttemptEnd | Written | None) -> None:
        self._completer.finish(attempt, end)
        self.slots.ended(attempt, on_thread=False)

    def recorded(self, batch: list[tuple[ClaimedAttempt, AttemptEnd | None]], results: list[Recorded]) -> None:
        """On the loop, from the completer: how a batch of attempts ended, and whether their ends
        were written."""
        closing: list[tuple[ClaimedAttempt, Outcome | None, bool]] = []
        for (attempt, end), result in zip(batch, results, strict=True):
            if end is None:  # cancelled, or a sync handler returning after its attempt ended
                reason = attempt.context.cancel_reason
                if reason is CancelReason.TIMEOUT:
                    self._time_limits.returned(attempt)  # writes its end, unless written once it was stuck
                elif not attempt.closed:
                    self._abandon(attempt, reason, closing)
            elif result is True:
                self._count(end)
                closing.append((attempt, end.outcome, end.retry_in_seconds is not None))
            elif result is False:
                job = attempt.job
                tracing.event(attempt.span, "fenced", reason="lease lost before the result was written")
                log.warning("job %d (%s) attempt %d: lease lost before the result was written; "
                            "result discarded", job.id, job.task_name, job.attempt, extra=logs.extra(job))
                self._abandon(attempt, CancelReason.LEASE_LOST, closing)
            else:  # the lease will expire and the job run again
                job = attempt.job
                if is_transient(result):  # an outage outlasted the lease: one line, as for every outage
                    log.warning("job %d (%s) attempt %d: could not record its end (%s); it runs again once its "
                                "lease expires", job.id, job.task_name, job.attempt, one_line(result),
                                extra=logs.extra(job))
                else:
                    log.error("job %d (%s) attempt %d: could not record its end", job.id, job.task_name,
                              job.attempt, exc_info=result, extra=logs.extra(job))
                closing.append((attempt, None, False))
        self._close(closing)

    def _close(self, closing: list[tuple[ClaimedAttempt, Outcome | None, bool]]) -> None:
        if not closing:
            return
        now = time.monotonic()
        for attempt, outcome, will_retry in closing:
            attempt.closed = True
            self._time_limits.disarm(attempt)
            self._by_lease.pop(attempt.lease, None)
            tracing.end_attempt(attempt.span, outcome, will_retry)
            if outcome is not None:
                job = attempt.job
                self._emit(AttemptEnded(job.id, job.task_name, job.queue_name, job.attempt, outcome,
                                        now - (attempt.started or now), self._worker_id, will_retry))
        self._heartbeat.untrack([attempt.lease for attempt, _, _ in closing])
        if not self._by_lease:
            self._all_closed.set()
        self._closed()

    def _abandon(self, attempt: ClaimedAttempt, reason: CancelReason | None,
                 closing: list[tuple[ClaimedAttempt, Outcome | None, bool]]) -> None:
        """Close an attempt that ended without a written end. A lease lost is given back first."""
        if reason is None:  # the handler raised JobCancelled uncancelled: its lease expires
            closing.append((attempt, None, False))
            return
        if reason is CancelReason.WAITED:  # its end, the wait's, is written
            self._stats.waited += 1
            closing.append((attempt, Outcome.WAITED, False))
            return
        self._stats.abandoned += 1
        if reason is not CancelReason.LEASE_LOST:  # a user's cancel and a shutdown release closed its record
            closing.append((attempt, _OUTCOME_OF_CANCEL[reason], False))
            return
        attempt.closed = True  # a handler thread returning meanwhile changes nothing
        giving_back = asyncio.create_task(self._give_back(attempt))
        self._giving_back.add(giving_back)
        giving_back.add_done_callback(self._giving_back.discard)

    async def _give_back(self, attempt: ClaimedAttempt) -> None:
        # If the lease was taken over, this writes nothing. If this worker gave up on its own
        # (it could not renew), the job goes back to the pool now rather than at expiry.
        cause = attempt.lapse_cause
        message = (f"the worker {cause}" if cause else "the worker lost its lease") + \
            "; handler cancelled, result discarded"
        try:  # its own account of the lapse replaces the reclaimer's guess ("stopped renewing")
            await asyncio.to_thread(self._backend.release, [attempt.lease], Outcome.LEASE_LOST, message,
                                    explains_expiry=cause is not None)
        except Exception as error:
            if is_transient(error):
                log.warning("job %d: could not give it back (%s); it returns when its lease expires",
                            attempt.job.id, one_line(error), extra=logs.extra(attempt.job))
            else:
                log.exception("job %d: could not give it back; it returns when its lease expires", attempt.job.id,
                              extra=logs.extra(attempt.job))
        self._close([(attempt, Outcome.LEASE_LOST, False)])

    def _count(self, end: AttemptEnd) -> None:
        if end.outcome is Outcome.DONE:
            self._stats.done += 1
        elif end.retry_in_seconds is not None:
            self._stats.retried += 1
        else:
            self._stats.failed += 1

    def renewed_late(self, lease: Lease, late: LateRenewal) -> None:
        """On the loop: the attempt's lease was kept by a renewal that landed late, on its trace."""
        attempt = self._by_lease.get(lease)
        if attempt is not None and not attempt.closed:
            tracing.event(attempt.span, "lease_renewed_late", waited_seconds=round(late.waited_seconds, 3),
                          lease_left_seconds=round(late.lease_left_seconds, 3), cause=late.cause)

    def cancel(self, lease: Lease, reason: CancelReason, cause: str | None = None) -> None:
        """On the loop: cancel the attempt's handler, unless it ended or another cause came first."""
        attempt = self._by_lease.get(lease)
        if attempt is None or attempt.closed or not attempt.context.cancel(reason):
            return
        attempt.lapse_cause = cause
        tracing.event(attempt.span, "cancelled", reason=str(reason), cause=cause)
        log.warning("job %d (%s) attempt %d: %s%s; cancelling its handler", lease.job_id, attempt.job.task_name,
                    lease.attempt, reason, f" (the worker {cause})" if cause else "",
                    extra=logs.extra(attempt.job, cancelled_because=str(reason)))
        if attempt.task is not None:
            attempt.task.cancel()  # the task's end reports it
        elif reason is CancelReason.TIMEOUT:  # a sync handler (limits are armed as handlers start) runs on
            if attempt.thread_id is None:  # it returned as it was told, just now
                self._completer.finish(attempt, timeout_end(attempt.job, attempt.handler.backoff))
            else:  # its end says what it did: written when it returns, or once it is stuck
                self._time_limits.overran(attempt, lambda end: self._completer.finish(attempt, end))
        else:
            # Waiting, it never starts now. Running, a sync handler learns it from its context and
            # keeps its slot until it returns, but its attempt is over: given back now, not when a
            # handler that ignores its context returns (shutdown must not wait for that either).
            self.slots.withdraw(attempt)
            closing: list[tuple[ClaimedAttempt, Outcome | None, bool]] = []
            self._abandon(attempt, reason, closing)
            self._close(closing)

    async def wind_down(self, grace: float, forced: asyncio.Event) -> None:
        """The shutdown: let the attempts finish within `grace` (or until `forced`), then cancel the
        rest and give their leases back at once."""
        if self._by_lease:
            finished = asyncio.create_task(self._all_closed.wait())
            force = asyncio.create_task(forced.wait())
            await asyncio.wait([finished, force], timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            finished.cancel()
            force.cancel()
        leftovers = [attempt for attempt in list(self._by_lease.values())  # an attempt being recorded is finished
                     if not attempt.closed and attempt.context.cancel(CancelReason.SHUTDOWN)]
        if leftovers:
            log.warning("worker %s: releasing %d unfinished job(s)", self._worker_id, len(leftovers))
            try:
                await asyncio.to_thread(self._backend.release, [attempt.lease for attempt in leftovers],
                                        Outcome.SHUTDOWN, "released by the worker at shutdown")
            except Exception as error:
                log.error("worker %s: could not release leases (%s); they return when they expire", self._worker_id,
                          one_line(error))
            closing: list[tuple[ClaimedAttempt, Outcome | None, bool]] = []
            for attempt in leftovers:
                if attempt.task is not None:
                    attempt.task.cancel()  # recorded when its task ends
                else:  # waiting, or a sync handler that cannot be interrupted: what it returns is discarded
                    self.slots.withdraw(attempt)
                    self._abandon(attempt, CancelReason.SHUTDOWN, closing)
            self._close(closing)
        # Every attempt, including those cancelled earlier for another reason, records its end
        # before the loop closes.
        await self._all_closed.wait()
