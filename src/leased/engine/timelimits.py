"""Time limits per attempt, and the handler threads that outlive theirs.

At a job's limit the worker cancels its handler with the cause "timeout" (first cause wins, as
with a lost lease), and the attempt ends as `timeout`: retried by the task's backoff, `failed`
when out of attempts. An async handler is cancelled for real. A sync handler runs in a thread,
and Python cannot stop a thread from outside: it is told through its context and its attempt is
over, so whatever it returns later is discarded. Its end is written when it returns (it stopped
when told) or after a short grace (it is stuck), so that the stored error says which. Until that
thread returns it keeps its slot, since it truly occupies one; past the grace it counts as stuck:
logged (again every minute), counted in the worker's metrics and announced on the worker's row.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from leased.backends.ports import AttemptEnd
from leased.backoff import Backoff
from leased.durations import format_duration
from leased.engine.threads import LoopInbox
from leased.events import Event, HandlerStuck
from leased.jobs import ClaimedJob, Lease, Outcome
from leased.payloads import clean_text

if TYPE_CHECKING:
    from leased.engine.claimed import ClaimedAttempt

log = logging.getLogger("leased.worker")

THREAD_OUTLIVED = "handler thread was still running"  # the error's words; the fact is handler_outlived_limit
STUCK_AFTER_SECONDS = 1.0  # a cooperative handler returns within this of its limit; later, it is stuck
STUCK_REPORT_SECONDS = 60.0  # while stuck, log it again this often
MAX_STACK = 32_000


def timeout_end(job: ClaimedJob, backoff: Backoff, *, stopped_after: float | None = None,
                stuck_after: float | None = None, stack: str | None = None, stopped_how: str | None = None
                ) -> AttemptEnd:
    """The end of an attempt that ran past its limit, in words that stay true when read later: a
    sync handler that stopped when told (`stopped_after` seconds past the limit), or one still
    running `stuck_after` seconds past it, whose `stack` is where its thread hangs."""
    retry = job.attempt < job.max_attempts
    delay = backoff.delay(job.attempt) if retry else None
    message = f"attempt {job.attempt} ran past its time limit of {job.timeout_seconds:g}s"
    if stopped_after is not None:
        how = stopped_how or "its handler stopped when told (context.cancelled)"
        message += f"; {how}, {format_duration(stopped_after)} after it"
    elif stuck_after is not None:
        message += (f"; its {THREAD_OUTLIVED} {format_duration(stuck_after)} after it and keeps its "
                    "slot until it returns; anything it returns is discarded")
    if retry:
        log.warning("job %d (%s): %s; retrying in %.1fs", job.id, job.task_name, message, delay)
    else:
        log.error("job %d (%s): %s; out of attempts (%d), failed", job.id, job.task_name, message, job.max_attempts)
    return AttemptEnd(job.lease, Outcome.TIMEOUT, error_type="TimeLimitExceeded", error_message=message,
                      traceback=stack, retry_in_seconds=delay, workflow_id=job.workflow_id,
                      handler_outlived_limit=stuck_after is not None)


def _where(thread_id: int, when: str) -> str | None:
    """The handler thread's stack now, from the handler's own frame down (the pool's frames are noise)."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return None
    frames = traceback.extract_stack(frame)
    while frames and (frames[0].filename == threading.__file__ or frames[0].filename.startswith(_ENGINE_FOLDER)):
        frames.pop(0)
    return clean_text(f"Handler thread {when} (most recent call last):\n"
                      + "".join(traceback.format_list(frames)), MAX_STACK)


_ENGINE_FOLDER = os.path.dirname(os.path.abspath(__file__))


@dataclass(eq=False)
class _Overrun:
    """A sync handler's thread still running after its attempt ended at the time limit."""

    job: ClaimedJob
    limit_at: float  # loop time of the limit
    backoff: Backoff
    finish: Callable[[AttemptEnd], None] | None  # writes the attempt's end; None once it was called
    stack_at_limit: str | None  # where the thread was when told: the traceback of one that then stops
    stuck: bool = False
    report: asyncio.TimerHandle | None = field(default=None, repr=False)


class TimeLimits:
    """Arms each attempt's limit; watches the handler threads that outlive theirs (each keeps its
    slot, since its thread is busy, until it returns)."""

    def __init__(self, worker_id: str, on_limit: Callable[[Lease], None], emit: Callable[[Event], None],
                 on_stuck_change: Callable[[], None]):
        self._worker_id = worker_id
        self._on_limit = on_limit
        self._emit = emit
        self._on_stuck_change = on_stuck_change
        self._overruns: dict[ClaimedAttempt, _Overrun] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._to_arm: LoopInbox[ClaimedAttempt] = LoopInbox(self._arm_all)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._to_arm.start(loop)

    @property
    def holding(self) -> int:
        """Slots held by handler threads that outlived their attempt."""
        return len(self._overruns)

    @property
    def stuck(self) -> int:
        """Of those, the ones past the grace: what the worker announces and metrics show."""
        return sum(overrun.stuck for overrun in self._overruns.values())

    def arm(self, attempt: ClaimedAttempt) -> None:
        """On the loop: call on_limit(the attempt's lease) once its handler has run for the job's limit."""
        limit = attempt.job.timeout_seconds
        if limit is None or attempt.closed:
            return
        self.disarm(attempt)  # armed again: a child's handler began after its process started (executor.py)
        attempt.time_limit = self._loop.call_later(max(0.0, attempt.limit_from + limit - time.monotonic()),
                                                   self._on_limit, attempt.job.lease)

    def arm_soon(self, attempt: ClaimedAttempt) -> None:
        """From a handler thread, as its handler starts: arm() on the loop."""
        self._to_arm.put(attempt)

    def _arm_all(self, attempts: list[ClaimedAttempt]) -> None:
        for attempt in attempts:
            self.arm(attempt)

    @staticmethod
    def disarm(attempt: ClaimedAttempt) -> None:
        if attempt.time_limit is not None:
            attempt.time_limit.cancel()
            attempt.time_limit = None

    def overran(self, attempt: ClaimedAttempt, finish: Callable[[AttemptEnd], None]) -> None:
        """On the loop: the attempt reached its limit while its sync handler runs, and its handler
        was told. `finish(end)` is called once the end can say what happened: when the handler
        returns (it stopped when told), or STUCK_AFTER_SECONDS later (it is stuck)."""
        overrun = self._overruns[attempt] = _Overrun(attempt.job, self._loop.time(), attempt.handler.backoff, finish,
                                                     _where(attempt.thread_id, "at its time limit"))
        overrun.report = self._loop.call_later(STUCK_AFTER_SECONDS, self._report, attempt)

    @staticmethod
    def _write_end(overrun: _Overrun, end: AttemptEnd) -> None:
        finish, overrun.finish = overrun.finish, None
        if finish is not None:
            finish(end)

    def returned(self, attempt: ClaimedAttempt) -> None:
        """On the loop: the handler of an attempt that ended at its limit has returned."""
        overrun = self._overruns.pop(attempt, None)
        if overrun is None:
            return
        if overrun.report is not None:
            overrun.report.cancel()
        if overrun.finish is not None:  # within the grace: it stopped when told
            child = attempt.stopped_child  # a process-isolated handler's: where the thread waited says nothing
            self._write_end(overrun, timeout_end(overrun.job, overrun.backoff,
                                                 stack=None if child else overrun.stack_at_limit,
                                                 stopped_after=self._loop.time() - overrun.limit_at,
                                                 stopped_how=child))
        if overrun.stuck:
            job, past = overrun.job, self._loop.time() - overrun.limit_at
            log.warning("job %d (%s) attempt %d: sync handler returned %.1fs past its time limit; its result was "
                        "discarded and its slot is free again", job.id, job.task_name, job.attempt, past)
            self._emit(HandlerStuck(job.id, job.task_name, job.queue_name, job.attempt, self._worker_id, past,
                                    returned=True))
            self._on_stuck_change()

    def _report(self, attempt: ClaimedAttempt) -> None:
        overrun = self._overruns.get(attempt)
        if overrun is None:
            return
        job, past = overrun.job, self._loop.time() - overrun.limit_at
        if overrun.finish is not None:  # the end, written now, says where the thread hangs
            thread_id = attempt.thread_id
            self._write_end(overrun, timeout_end(job, overrun.backoff, stuck_after=past,
                                                 stack=None if thread_id is None else _where(
                                                     thread_id, f"{format_duration(past)} past its time limit")))
        log.warning("job %d (%s) attempt %d: sync handler still running %.1fs past its time limit of %gs; its "
                    "thread keeps a slot until it returns (check context.cancelled in the handler)",
                    job.id, job.task_name, job.attempt, past, job.timeout_seconds)
        if not overrun.stuck:
            overrun.stuck = True
            self._emit(HandlerStuck(job.id, job.task_name, job.queue_name, job.attempt, self._worker_id, past))
            self._on_stuck_change()
        overrun.report = self._loop.call_later(STUCK_REPORT_SECONDS, self._report, attempt)
