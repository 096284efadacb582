"""What a running handler can see of its job, and how it learns that it should stop."""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable

from leased.engine.durable import DurableSteps
from leased.engine.stopping import CancelReason as CancelReason, JobCancelled as JobCancelled  # theirs too
from leased.engine.waits import HandlerWaits
from leased.errors import ConfigurationError
from leased.jobs import MAX_PROGRESS_NOTE, ClaimedJob, Job, Lease, Progress
from leased.names import shown
from leased.runs import ParentEnd
from leased.workflows import BatchOutcome, RunningWorkflow, batch_outcome

if TYPE_CHECKING:
    from leased.backends.ports import AttemptEnd


@dataclass(eq=False)
class TaskContext:
    """Passed first to handlers of tasks declared with takes_context=True.

    Async handlers are also cancelled (asyncio.CancelledError) when the job must stop (its lease
    lost, a user's cancel, shutdown, its time limit: `cancel_reason` says which). A sync
    handler runs in a thread that cannot be interrupted, so it should check `is_cancelled` (or call
    `raise_if_cancelled()`) between steps, or wait on `cancelled` where it would sleep; whatever it
    returns after a cancellation is discarded.
    """

    claimed: ClaimedJob = field(repr=False)
    worker_id: str
    store: Any = field(default=None, repr=False)  # the worker's storage: a step reads its parents through it
    cancel_reason: CancelReason | None = None
    # Hands a progress report to the lease keeper, which sends it with the next renewal.
    report_progress: Callable[[Lease, str], None] | None = field(default=None, repr=False)
    # The event is made on first use: most handlers never look, and one per job costs more than a no-op job.
    _event: threading.Event | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _finishing: bool = field(default=False, init=False, repr=False)  # its end is being written
    _workflow: RunningWorkflow | None = field(default=None, init=False, repr=False)
    # A transactional task's connection, while its handler runs (engine/transactional.py).
    _connection: Any = field(default=None, init=False, repr=False)
    _steps: DurableSteps | None = field(default=None, init=False, repr=False)  # made on a handler's first step
    _waits: HandlerWaits | None = field(default=None, init=False, repr=False)  # made on a handler's first wait
    in_child: bool = field(default=False, repr=False)  # a process-isolated handler's (engine/children.py)
    _progress: str | None = field(default=None, init=False, repr=False)  # the latest report, as JSON
    #: The W3C trace context (JSON) of this attempt's span when its job was traced (leased.tracing),
    #: recorded with its end; None: untraced.
    trace_context: str | None = field(default=None, init=False, repr=False)

    @property
    def job(self) -> Job:
        """The job as claimed, read from its row when first asked for."""
        return self.claimed.job

    @property
    def job_id(self) -> int:
        return self.claimed.id

    @property
    def attempt(self) -> int:
        return self.claimed.attempt

    @property
    def connection(self) -> Any:
        """A transactional task's connection to the app's database (sqlite3, psycopg, PyMySQL or
        MySQLdb), in the transaction that commits with this attempt's end, and only if the worker
        still holds the job's lease then. Do not commit it: leased does."""
        if self._connection is None:
            raise ConfigurationError(
                f"job {self.job_id} ({self.claimed.task_name}) has no context.connection: only a task declared "
                "with @app.task(transactional=True, takes_context=True) runs in a transaction of its own, "
                "while its handler runs")
        return self._connection

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Say how far this attempt got: `done` of `total` (None: not known), with a short note.
        Cheap to call often: nothing is written per call. The latest report rides on the worker's
        next lease renewal (within a third of the lease) and on the attempt's end, and readers see
        it as Job.progress (leased show, leased jobs, the dashboard, leased why); a retried job
        keeps it until its next attempt reports."""
        report = checked_progress(done, total, note, self.attempt).to_json()
        self._progress = report
        if self.report_progress is not None:
            self.report_progress(self.claimed.lease, report)

    def with_reports(self, end: AttemptEnd) -> AttemptEnd:
        """The attempt's end, carrying its latest progress report, if its handler made one, and its
        span's trace context, if traced."""
        if self._progress is not None:
            end = replace(end, progress_json=self._progress)
        return end if self.trace_context is None else replace(end, trace_context=self.trace_context)

    # Durable steps (engine/durable.py).
    def step(self, name: str, fn: Callable[..., Any], *, transactional: bool = False) -> Any:
        """Run `fn()` once across this job's attempts: its JSON result is recorded, fenced on the
        lease, and a later attempt gets it without calling `fn` again. A step that raised runs
        again; one that returned but whose record did not commit (the worker died) too. With
        `transactional=True`, `fn(connection)` writes in a transaction that commits with the
        record: once."""
        return self._durable_steps().run(name, fn, transactional, self._connection)

    async def astep(self, name: str, fn: Callable[..., Any]) -> Any:
        """step() for async handlers: `fn()` may return an awaitable."""
        return await self._durable_steps().run_async(name, fn, self._connection)

    # Waits (engine/waits.py).
    def sleep(self, seconds: float | timedelta | None = None, *, until: datetime | None = None) -> None:
        """Sleep for `seconds` (a number or a timedelta), or until `until` (a datetime with a
        timezone), without holding a slot or a lease: the attempt ends here (not counted against
        max_attempts), the job sleeps, and when the time comes its handler runs again from the top,
        its durable steps returning their recorded results and this sleep returning at once. The
        end is fixed by the first run: a rerun sleeps until the same time."""
        self._handler_waits().sleep(seconds, until)

    async def asleep(self, seconds: float | timedelta | None = None, *, until: datetime | None = None) -> None:
        """sleep() for async handlers."""
        await asyncio.to_thread(self._handler_waits().sleep, seconds, until)

    def wait_for(self, name: str, *, timeout: float | timedelta | None = None) -> Any:
        """The payload of the job's next signal `name` (Leased.signal): at once if one was sent
        already, else the attempt ends here as sleep()'s does and the job sleeps until the signal
        comes (or `timeout` passes: then this raises SignalTimeout, which the handler may catch).
        Each signal is taken once; its payload is recorded, so a retried attempt gets the same."""
        return self._handler_waits().wait_for(name, timeout)

    async def await_for(self, name: str, *, timeout: float | timedelta | None = None) -> Any:
        """wait_for() for async handlers."""
        return await asyncio.to_thread(self._handler_waits().wait_for, name, timeout)

    def _handler_waits(self) -> HandlerWaits:
        if self._waits is None:
            self._waits = HandlerWaits(self, self._durable_steps(), self._step_lease_lost)
        return self._waits

    def _durable_steps(self) -> DurableSteps:
        if self._steps is None:
            self._steps = DurableSteps(self.store, self.claimed, self._step_lease_lost)
        return self._steps

    def _step_lease_lost(self, step: str) -> JobCancelled:
        """A step whose record found the lease gone stops the attempt: nothing of it was written."""
        self.cancel(CancelReason.LEASE_LOST)
        return JobCancelled(f"lease lost: step {step!r} could not be recorded")

    # A workflow's step (leased.workflows): its parents, and its run.
    @property
    def parents(self) -> dict[str, ParentEnd]:
        """Each parent step by name, with how it ended and its result (empty outside a workflow)."""
        if self.claimed.workflow_id is None or self.store is None:
            return {}
        return {parent.name: parent for parent in self.store.parents_of(self.job_id)}

    @property
    def parent_results(self) -> dict[str, Any]:
        """Each parent's result by step name, of the parents that succeeded."""
        return {name: parent.result for name, parent in self.parents.items() if parent.succeeded}

    @property
    def batch(self) -> BatchOutcome:
        """For the step after a batch: how many of its members succeeded and failed (`.succeeded`
        and `.failed` are counts, not lists; a cancelled member counts as failed), and `.results`,
        each succeeded member's result by step name."""
        return batch_outcome(self.parents)

    @property
    def workflow(self) -> RunningWorkflow:
        """This step's run, to add steps to while it runs (those waiting for it wait for them too)."""
        if self.claimed.workflow_id is None:
            raise ConfigurationError(f"job {self.job_id} is not a workflow's step: only steps add steps")
        if self._workflow is None:  # one per attempt: it numbers the steps it adds
            self._workflow = RunningWorkflow(self.store, self)
        return self._workflow

    @property
    def cancelled(self) -> threading.Event:
        """Set once the job must stop: `context.cancelled.wait(seconds)` is a sleep that ends early."""
        with self._lock:
            if self._event is None:
                self._event = threading.Event()
                if self.cancel_reason is not None:
                    self._event.set()
            return self._event

    @property
    def is_cancelled(self) -> bool:
        return self.cancel_reason is not None

    def raise_if_cancelled(self) -> None:
        if self.cancel_reason is not None:
            raise JobCancelled(str(self.cancel_reason))

    def cancel(self, reason: CancelReason) -> bool:
        """Mark the job cancelled; the first reason wins. Returns False if it already was, or if its
        end is being written (finish() came first)."""
        with self._lock:
            if self.cancel_reason is not None or self._finishing:
                return False
            self.cancel_reason = reason
            event = self._event
        if event is not None:
            event.set()
        return True

    def finish(self) -> bool:
        """The worker is about to write the attempt's end: from now on nothing cancels it. False if
        a cancellation came first (its cause decides what is recorded). Handlers end on threads
        while the loop cancels, so this and cancel() decide between them under one lock."""
        with self._lock:
            if self.cancel_reason is not None:
                return False
            self._finishing = True
            return True


def checked_progress(done: Any, total: Any, note: Any, attempt: int) -> Progress:
    """A handler's report as a Progress, or an error that names the argument and the fix. A done
    past its total is kept (totals are often estimates); readers show the fraction as 100%."""
    for name, value, may_be_none in (("done", done, False), ("total", total, True)):
        if value is None and may_be_none:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"context.progress({name}={shown(value)}): {name} must be a number "
                            f"(an int or a float){', or None if not known' if may_be_none else ''}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"context.progress({name}={value!r}): {name} must be a finite number, 0 or more")
    if note is not None:
        if not isinstance(note, str):
            raise TypeError(f"context.progress(note={shown(note)}): note must be a str or None")
        if len(note) > MAX_PROGRESS_NOTE:
            raise ValueError(f"context.progress(note=...): the note has {len(note)} characters, more than "
                             f"{MAX_PROGRESS_NOTE}; keep it short (it travels with every lease renewal) and put "
                             "details in the job's result")
    return Progress(done, total, note, attempt)
