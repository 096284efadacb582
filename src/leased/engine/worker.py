"""The worker loop: claim due jobs into free slots, run them, record every attempt's end.

Services, each small: the claimer (claims into free slots, and while jobs are short a little
ahead of them; once a second the same claim first returns expired leases to the pool), the
completer (writes the ends that arrived meanwhile in one transaction, behind the handlers),
the heartbeat (a thread renewing every held lease in one statement), the lease watchdog (stops a
handler whose lease could run out before a renewal lands), the listener (a thread turning the
database's wake-ups into a claim now), the announcer (keeps the worker's row fresh), the time
limits (engine/timelimits.py: cancel a handler at its job's limit, hold a stuck thread's slot),
the pruner (engine/pruner.py: deletes finished jobs past their retention) and, with periodic
tasks, the scheduler (engine/scheduler.py: enqueues their due ticks). If one
dies, the worker stops loudly. Shutdown has two phases: stop claiming and let running jobs finish
within a grace period, then cancel what is left and release its leases at once. Signal handlers
only call stop().
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import socket
import threading
import time
import traceback
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from leased.admin import WORKER_BEAT_SECONDS
from leased.backends.base import AttemptEnd, Backend, ClaimRequest, Listener, WorkerRecord
from leased.engine.context import CancelReason, JobCancelled, TaskContext
from leased.engine.heartbeat import Heartbeat
from leased.engine.scheduler import ScheduledTicks, Scheduler
from leased.engine.threads import HandlerThreads
from leased.engine.timelimits import TimeLimits, timeout_end
from leased.errors import TRANSIENT_ERRORS, PayloadError, PermanentError
from leased.events import AttemptEnded, Event, Events, ListenerLost, ListenerReconnected
from leased.jobs import Job, Lease, Outcome
from leased.payloads import DEFAULT_MAX_PAYLOAD_BYTES, clean_text, encode_result

if TYPE_CHECKING:
    from leased.engine.pruner import Pruner
    from leased.tasks import Task

log = logging.getLogger("leased.worker")

MAX_ERROR_MESSAGE = 4_000
MAX_TRACEBACK = 32_000
RECLAIM_INTERVAL = 1.0
WATCHDOG_INTERVAL = 0.25
CLAIM_GATHER_SECONDS = 0.002
PREFETCH_SECONDS = 0.05  # claim ahead only the jobs the slots will start within this
END_RATE_WINDOW = 0.25  # handler ends counted over this many seconds to tell how fast slots turn over
MAX_PREFETCH = 500
MAX_UNWRITTEN_ENDS = 1_000
LISTEN_TIMEOUT = 1.0  # also how soon the listener notices that the worker stopped


@dataclass
class WorkerStats:
    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    abandoned: int = 0  # lease lost, cancelled by a user, or released at shutdown


@dataclass
class _Running:
    job: Job
    context: TaskContext
    handler: asyncio.Future | None = None
    execution: asyncio.Task | None = field(default=None, repr=False)
    finishing: bool = False  # its end is being written: that fenced write, not a renewal, tells if it held
    thread: Future | None = field(default=None, repr=False)  # a sync handler's, until it returns
    time_limit: asyncio.TimerHandle | None = field(default=None, repr=False)

    lapse_cause: str | None = None  # why this worker let the lease lapse, when it knows (e.g. a write lock)


_OUTCOME_OF_CANCEL = {
    CancelReason.LEASE_LOST: Outcome.LEASE_LOST,
    CancelReason.CANCELLED: Outcome.CANCELLED,
    CancelReason.SHUTDOWN: Outcome.SHUTDOWN,
    CancelReason.TIMEOUT: Outcome.TIMEOUT,
}


def retry_delay(failures: int) -> float:
    """Seconds before retrying after `failures` transient errors in a row. The first few retry at
    once: after a restart every pooled connection fails once, and the next one is usually fine."""
    return 0.1 if failures <= 3 else min(30.0, 0.25 * 2 ** (failures - 3))


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(self, backend: Backend, tasks: Mapping[str, Task], *, concurrency: int = 8,
                 queues: list[str] | tuple[str, ...] | None = None, poll_interval: float = 1.0,
                 shutdown_grace: float = 30.0, worker_id: str | None = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, events: Events | None = None,
                 push: bool = True, schedules: Sequence[ScheduledTicks] = (), pruner: Pruner | None = None):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.backend = backend
        self.tasks = dict(tasks)
        self.concurrency = concurrency
        self.queues = tuple(queues) if queues else None
        self.poll_interval = poll_interval
        self.shutdown_grace = shutdown_grace
        self.id = worker_id or default_worker_id()
        self.max_payload_bytes = max_payload_bytes
        self.stats = WorkerStats()
        self.events = events or Events()
        self.push = push
        self.schedules = tuple(schedules)
        self.pruner = pruner  # deletes finished jobs past their retention (engine/pruner.py)
        self._running: dict[Lease, _Running] = {}  # claimed, until the attempt's end is written
        self._handling = 0  # of those, how many are waiting for a slot or in their handler
        self._handler_ends: collections.deque[float] = collections.deque()  # recent, monotonic
        self._claimer_needs_slots = False
        self._slots: asyncio.Semaphore | None = None
        self._completions: list[tuple[AttemptEnd, asyncio.Future]] = []
        self._completions_ready: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._force: asyncio.Event | None = None
        self._stopping = False
        self._stop_requests = 0
        self._stop_lock = threading.Lock()
        self._service_failure: BaseException | None = None
        self._threads = HandlerThreads()
        self._heartbeat = Heartbeat(backend, self._on_lease_lost, self._is_transient)
        self._announce_soon = asyncio.Event()
        self._time_limits = TimeLimits(self.id, lambda lease: self._cancel(lease, CancelReason.TIMEOUT),
                                       self.events.emit, self._announce_soon.set)
        self.handle_signals = True  # SIGINT/SIGTERM stop it when run() owns the main thread
        self._in_context: asyncio.Task | None = None  # run_async() under `async with worker:`

    # Control, from any thread.
    def run(self, *, stop_when_idle: bool = False) -> WorkerStats:
        """Run until stopped (SIGINT/SIGTERM in the main thread, or stop()). Blocks."""
        return asyncio.run(self.run_async(stop_when_idle=stop_when_idle))

    def stop(self) -> None:
        """First call: stop claiming and let running jobs finish. Second call: cancel them now."""
        with self._stop_lock:
            self._stop_requests += 1
            forced = self._stop_requests > 1
        self._stopping = True
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._apply_stop, forced)
            except RuntimeError:  # the loop closed meanwhile: nothing left to stop
                pass

    def notify(self) -> None:
        """A job was enqueued in this process: look for work now instead of at the next poll."""
        loop = self._loop
        if loop is not None and self._wakeup is not None:
            try:
                loop.call_soon_threadsafe(self._wakeup.set)
            except RuntimeError:
                pass

    def _apply_stop(self, forced: bool) -> None:
        self._wakeup.set()
        if not forced:
            log.info("worker %s stopping: no new jobs; %d running may finish within %.0fs (signal again to force)",
                     self.id, len(self._running), self.shutdown_grace)
        else:
            log.warning("worker %s: forced stop, cancelling %d running job(s)", self.id, len(self._running))
            self._force.set()

    async def run_async(self, *, stop_when_idle: bool = False) -> WorkerStats:
        self._loop = asyncio.get_running_loop()
        self._wakeup, self._force, self._completions_ready = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._slots = asyncio.Semaphore(self.concurrency)
        signals = self._install_signal_handlers()
        self._heartbeat.start()
        watchdog = self._service(self._watch_leases())
        completer = self._service(self._complete_loop())
        listener = self.backend.listener() if self.push else None
        announcer = self._service(self._announce_loop(getattr(listener, "port", None)))
        # run_until_empty() drains what is queued; ticking schedules would never let it be empty.
        scheduler = None if stop_when_idle or not self.schedules else self._service(Scheduler(
            self.backend, self.schedules, wake_claimer=self.notify, is_transient=self._is_transient,
            retry_delay=retry_delay, poll_interval=self.poll_interval, worker_id=self.id).run())
        pruner = self._service(self.pruner.run(self.id)) if self.pruner and not stop_when_idle else None
        if listener is not None:
            threading.Thread(target=self._listen, args=(listener,), name="leased-listener", daemon=True).start()
        log.info("worker %s started: concurrency %d, queues %s, tasks %s", self.id, self.concurrency,
                 ",".join(self.queues) if self.queues else "all", ", ".join(sorted(self.tasks)))
        try:
            await self._claim_loop(stop_when_idle)
        finally:
            await self._shut_down()  # leases still watched while running jobs finish
            watchdog.cancel()
            completer.cancel()
            announcer.cancel()
            if scheduler is not None:
                scheduler.cancel()
            if pruner is not None:
                pruner.cancel()
            await self._unregister()
            self._threads.shutdown()
            self._heartbeat.stop()
            for signum in signals:
                self._loop.remove_signal_handler(signum)
            self._loop = None
        failure = self._service_failure or self._heartbeat.failure
        if failure is not None:
            raise RuntimeError(f"worker {self.id} stopped because a service failed: {failure!r}") from failure
        log.info("worker %s stopped: %s", self.id, self.stats)
        return self.stats

    def _service(self, coroutine) -> asyncio.Task:
        """Start a background loop; if it dies, the worker stops loudly instead of limping on."""
        task = asyncio.create_task(coroutine)

        def ended(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is not None:
                self._service_failure = task.exception()
                log.error("worker %s: %s failed; stopping", self.id, coroutine.__name__, exc_info=task.exception())
                self._stopping = True
                self._apply_stop(forced=True)

        task.add_done_callback(ended)
        return task

    def _install_signal_handlers(self) -> list[int]:
        if threading.current_thread() is not threading.main_thread() or not self.handle_signals:
            return []
        installed = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._loop.add_signal_handler(signum, self.stop)
                installed.append(signum)
            except (NotImplementedError, RuntimeError):
                pass
        return installed

    # Claiming.
    async def _claim_loop(self, stop_when_idle: bool) -> None:
        failures = 0
        next_reclaim = 0.0
        request = ClaimRequest(self.id, tuple(sorted(self.tasks)), self.queues, limit=0)
        while not self._stopping:
            wanted = self._wanted()
            self._claimer_needs_slots = wanted <= 0
            if wanted <= 0:
                await self._nap(None)
                continue
            if wanted < self.concurrency // 2:
                # Let a few more slots free up: one claim of many costs little more than a claim of one.
                await asyncio.sleep(CLAIM_GATHER_SECONDS)
                wanted = self._wanted()
                if wanted <= 0:
                    continue
            try:
                claimed_at = time.monotonic()
                reclaim = claimed_at >= next_reclaim
                # A limit may refuse jobs only because ours still run: if they end during the claim,
                # "nothing claimed, nothing running" does not mean the queue is empty.
                was_running = bool(self._running)
                jobs = await asyncio.to_thread(self.backend.claim,
                                               replace(request, limit=wanted, reclaim_expired=reclaim))
                if reclaim:
                    next_reclaim = claimed_at + RECLAIM_INTERVAL
            except Exception as error:
                if not self._is_transient(error):
                    raise
                failures += 1
                delay = retry_delay(failures)
                log.warning("worker %s: database unavailable (%s); retrying in %.1fs", self.id,
                            _one_line(error), delay)
                await self._nap(delay)
                continue
            if failures:
                log.info("worker %s: database reachable again", self.id)
                failures = 0
            if jobs:
                self._heartbeat.track([(job.lease, job.lease_seconds) for job in jobs], claimed_at)
            for job in jobs:
                self._start(job)
            # A full claim means more may be due: claim again as soon as a slot frees. A short one
            # means the queue is drained, and only a wake-up or the poll brings the claimer back.
            self._claimer_needs_slots = len(jobs) == wanted
            if len(jobs) < wanted:
                if stop_when_idle and not jobs and not self._running:
                    if not was_running:
                        return
                    continue  # ours ended during the claim: look again
                await self._nap(None if stop_when_idle else self.poll_interval)

    async def _nap(self, timeout: float | None) -> None:
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            pass
        self._wakeup.clear()

    def _wanted(self) -> int:
        """How many jobs to claim now: enough to fill the free slots, and while jobs are short, as
        many more as the slots will start within PREFETCH_SECONDS, so that one claim serves many
        slots and a freed slot starts its next job without a round trip. Long jobs get no extra:
        a job must not wait here while another worker sits idle. A slot frees when its handler
        returns, before its end is written; a slow database holds claims back through the cap on
        ends waiting to be written."""
        now = time.monotonic()
        recent = self._handler_ends
        while recent and recent[0] < now - END_RATE_WINDOW:
            recent.popleft()
        prefetch = min(MAX_PREFETCH, int(len(recent) * PREFETCH_SECONDS / END_RATE_WINDOW))
        unwritten = len(self._running) - self._handling + self._time_limits.holding
        return min(self.concurrency + prefetch - self._handling, MAX_UNWRITTEN_ENDS - unwritten)

    def _is_transient(self, error: BaseException) -> bool:
        return isinstance(error, TRANSIENT_ERRORS)

    # Running.
    def _start(self, job: Job) -> None:
        running = _Running(job, TaskContext(job, self.id))
        self._running[job.lease] = running
        self.stats.claimed += 1
        self._handling += 1
        running.execution = asyncio.create_task(self._execute(running), name=f"leased-job-{job.id}")

    async def _execute(self, running: _Running) -> None:
        job, context, lease = running.job, running.context, running.job.lease
        started = 0.0  # when it gets its slot
        outcome, will_retry, written = None, False, False
        try:
            await self._slots.acquire()
            try:
                started = time.monotonic()
                end = None if context.is_cancelled else await self._attempt(running)
            finally:
                timed_out = context.cancel_reason is CancelReason.TIMEOUT
                self._time_limits.after_attempt(job, running.time_limit, timed_out, running.thread, self._free_slot)
            if timed_out:  # whatever the handler did after its limit, the attempt ended there
                end = timeout_end(job, self.tasks[job.task_name].backoff, running.thread)
            if end is not None and context.cancel_reason in (None, CancelReason.TIMEOUT):
                running.finishing = True
                written = await self._finish(end)
                if written:
                    self._count(end)
                    outcome, will_retry = end.outcome, end.retry_in_seconds is not None
                else:
                    log.warning("job %d (%s) attempt %d: lease lost before the result was written; "
                                "result discarded", job.id, job.task_name, job.attempt)
                    context.cancel(CancelReason.LEASE_LOST)
            if not written and context.is_cancelled:
                outcome = _OUTCOME_OF_CANCEL[context.cancel_reason]
                await self._abandon(running)
        except Exception:
            # Storage failed while recording the end: the lease will expire and the job run again.
            log.exception("job %d (%s) attempt %d: could not record its end", job.id, job.task_name, job.attempt)
        finally:
            self._heartbeat.untrack(lease)
            self._running.pop(lease, None)
            if self._claimer_needs_slots or not self._running:
                self._wakeup.set()
        if outcome is not None:
            self.events.emit(AttemptEnded(job.id, job.task_name, job.queue_name, job.attempt, outcome,
                                          time.monotonic() - started, self.id, will_retry))

    def _free_slot(self) -> None:
        self._slots.release()
        self._handling -= 1
        self._handler_ends.append(time.monotonic())
        if self._claimer_needs_slots:
            self._wakeup.set()

    async def _attempt(self, running: _Running) -> AttemptEnd | None:
        """Run the handler once. None means it was cancelled and nothing is to be written."""
        job, context = running.job, running.context
        task = self.tasks[job.task_name]
        leading = (context,) if task.takes_context else ()
        try:
            task.check_arguments(job.args, job.kwargs)
            args, kwargs = task.handler_arguments(job.args, job.kwargs)  # typed parameters decoded
        except PayloadError as error:
            return self._error_end(job, error, retry=False)
        try:
            if task.is_async:
                running.handler = asyncio.ensure_future(task.func(*leading, *args, **kwargs))
            else:
                running.thread = self._threads.submit(task.func, (*leading, *args), kwargs)
                running.handler = asyncio.wrap_future(running.thread)
            running.time_limit = self._time_limits.arm(job)
            if context.is_cancelled:
                running.handler.cancel()
            result = await running.handler
        except asyncio.CancelledError:
            if context.is_cancelled:
                return None
            raise
        except JobCancelled:
            return None
        except PermanentError as error:
            return self._error_end(job, error, retry=False)
        except (Exception, SystemExit) as error:
            return self._error_end(job, error, retry=job.attempt < job.max_attempts, backoff=task.backoff)
        if context.is_cancelled:
            return None
        try:
            result_json = encode_result(result, self.max_payload_bytes)
        except PayloadError as error:
            return self._error_end(job, error, retry=False)
        log.debug("job %d (%s) attempt %d done", job.id, job.task_name, job.attempt)
        return AttemptEnd(job.lease, Outcome.DONE, result_json=result_json)

    def _error_end(self, job: Job, error: BaseException, *, retry: bool, backoff=None) -> AttemptEnd:
        delay = backoff.delay(job.attempt) if retry else None
        message = clean_text(str(error), MAX_ERROR_MESSAGE)
        if retry:
            log.warning("job %d (%s) attempt %d/%d failed: %s: %s; retrying in %.1fs", job.id, job.task_name,
                        job.attempt, job.max_attempts, type(error).__name__, _one_line(message), delay)
        else:
            log.error("job %d (%s) attempt %d/%d failed for good: %s: %s", job.id, job.task_name,
                      job.attempt, job.max_attempts, type(error).__name__, _one_line(message))
        return AttemptEnd(
            job.lease, Outcome.ERROR, error_type=type(error).__name__, error_message=message,
            traceback=clean_text("".join(traceback.format_exception(type(error), error, _handler_frames(error))),
                                 MAX_TRACEBACK),
            retry_in_seconds=delay,
        )

    async def _finish(self, end: AttemptEnd) -> bool:
        """Hand the attempt's end to the completer; True once written, False if the lease was lost."""
        written = self._loop.create_future()
        self._completions.append((end, written))
        self._completions_ready.set()
        return await written

    async def _complete_loop(self) -> None:
        """The completer: writes every end that arrived meanwhile in one transaction."""
        delay = 0.1
        while True:
            await self._completions_ready.wait()
            self._completions_ready.clear()
            batch, self._completions = self._completions, []
            if not batch:
                continue
            try:
                kept = await asyncio.to_thread(self.backend.finish, [end for end, _ in batch])
            except Exception as error:
                # Through a brief outage, keep trying while the leases hold; past that the jobs
                # will be reclaimed and run again, which at-least-once allows.
                overdue = set(self._heartbeat.overdue(time.monotonic()))
                retry = [(end, written) for end, written in batch
                         if self._is_transient(error) and end.lease not in overdue]
                for end, written in batch:
                    if (end, written) not in retry:
                        written.set_exception(error)
                if retry:
                    log.warning("worker %s: could not record %d result(s) (%s); retrying", self.id, len(retry),
                                _one_line(error))
                    self._completions[:0] = retry
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    self._completions_ready.set()
                continue
            delay = 0.1
            for (_, written), flag in zip(batch, kept):
                written.set_result(flag)

    async def _abandon(self, running: _Running) -> None:
        self.stats.abandoned += 1
        if running.context.cancel_reason is CancelReason.LEASE_LOST:
            # If the lease was taken over, this writes nothing. If this worker gave up on its own
            # (it could not renew), the job goes back to the pool now rather than at expiry.
            cause = running.lapse_cause
            message = (f"the worker {cause}" if cause else "the worker lost its lease") + \
                "; handler cancelled, result discarded"
            try:  # its own account of the lapse replaces the reclaimer's guess ("stopped renewing")
                await asyncio.to_thread(self.backend.release, [running.job.lease], Outcome.LEASE_LOST, message,
                                        explains_expiry=cause is not None)
            except Exception as error:
                if not self._is_transient(error):
                    raise
                log.warning("job %d: could not give it back (%s); it returns when its lease expires",
                            running.job.id, _one_line(error))
        # A user's cancel and a shutdown release have already closed the attempt's record.

    def _count(self, end: AttemptEnd) -> None:
        if end.outcome is Outcome.DONE:
            self.stats.done += 1
        elif end.retry_in_seconds is not None:
            self.stats.retried += 1
        else:
            self.stats.failed += 1

    # Losing leases.
    def _on_lease_lost(self, lease: Lease) -> None:
        """Called on the heartbeat thread when a renewal did not match: find out why, then cancel."""
        try:
            job = self.backend.get_job(lease.job_id)
        except Exception:
            job = None
        reason = CancelReason.CANCELLED if job is not None and job.status == "cancelled" else CancelReason.LEASE_LOST
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._cancel, lease, reason)

    def _cancel(self, lease: Lease, reason: CancelReason, cause: str | None = None) -> None:
        running = self._running.get(lease)
        if running is None or running.finishing or not running.context.cancel(reason):
            return
        running.lapse_cause = cause
        log.warning("job %d (%s) attempt %d: %s%s; cancelling its handler", lease.job_id, running.job.task_name,
                    lease.attempt, reason, f" (the worker {cause})" if cause else "")
        if running.handler is not None:
            running.handler.cancel()

    def _listen(self, listener: Listener) -> None:
        """On its own thread: turn the database's wake-ups into an immediate claim."""
        failures = 0
        try:
            while not self._stopping:
                try:
                    queues = listener.wait(LISTEN_TIMEOUT)
                except Exception as error:
                    if not self._is_transient(error):
                        raise
                    failures += 1
                    if failures == 1:
                        self._emit_threadsafe(ListenerLost(self.id, _one_line(error)))
                    delay = retry_delay(failures)
                    log.warning("worker %s: %s; polling meanwhile, reconnecting in %.1fs", self.id,
                                _one_line(error), delay)
                    time.sleep(delay)
                    continue
                if failures:
                    log.info("worker %s: wake-up listener reconnected", self.id)
                    self._emit_threadsafe(ListenerReconnected(self.id))
                    failures = 0
                if queues and (self.queues is None or any(queue in self.queues for queue in queues)):
                    self.notify()
        except Exception:
            log.exception("worker %s: wake-up listener stopped; polling only", self.id)
        finally:
            listener.close()

    def _emit_threadsafe(self, event: Event) -> None:
        """From another thread: subscribers run on the loop, as they expect."""
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self.events.emit, event)
            except RuntimeError:  # the loop closed meanwhile
                pass

    async def _announce_loop(self, wake_port: int | None) -> None:
        """Keep this worker's row fresh so that inspection (and producers waking it) know it is alive."""
        record = WorkerRecord(self.id, socket.gethostname(), os.getpid(), self.concurrency, self.queues,
                              tuple(sorted(self.tasks)), wake_port)
        while True:
            self._announce_soon.clear()
            try:
                await asyncio.to_thread(self.backend.register_worker,
                                        replace(record, stuck_handlers=self._time_limits.stuck))
            except Exception as error:
                if not self._is_transient(error):
                    raise
            try:  # a handler getting stuck or coming back is announced at once
                await asyncio.wait_for(self._announce_soon.wait(), WORKER_BEAT_SECONDS)
            except TimeoutError:
                pass

    async def _unregister(self) -> None:
        try:
            await asyncio.to_thread(self.backend.unregister_worker, self.id)
        except Exception as error:
            log.warning("worker %s: could not sign off (%s)", self.id, _one_line(error))

    async def _watch_leases(self) -> None:
        while True:
            await asyncio.sleep(min(WATCHDOG_INTERVAL, self._heartbeat.shortest_lease() / 12))
            if not self._heartbeat.is_alive and not self._stopping:
                log.error("worker %s: heartbeat died; stopping", self.id)
                self._stopping = True
                self._apply_stop(forced=True)
            for lease in self._heartbeat.overdue(time.monotonic()):
                self._cancel(lease, CancelReason.LEASE_LOST, self._heartbeat.lapse_cause())

    # Shutting down.
    async def _shut_down(self) -> None:
        self._stopping = True
        if self._running:
            finished = asyncio.create_task(asyncio.wait([running.execution for running in self._running.values()]))
            forced = asyncio.create_task(self._force.wait())
            await asyncio.wait([finished, forced], timeout=self.shutdown_grace, return_when=asyncio.FIRST_COMPLETED)
            finished.cancel()
            forced.cancel()
        leftovers = [running for running in self._running.values()  # a job being recorded is finished
                     if not running.finishing and running.context.cancel(CancelReason.SHUTDOWN)]
        if leftovers:
            log.warning("worker %s: releasing %d unfinished job(s)", self.id, len(leftovers))
            try:
                await asyncio.to_thread(self.backend.release, [running.job.lease for running in leftovers],
                                        Outcome.SHUTDOWN, "released by the worker at shutdown")
            except Exception as error:
                log.error("worker %s: could not release leases (%s); they return when they expire", self.id,
                          _one_line(error))
            for running in leftovers:
                if running.handler is not None:
                    running.handler.cancel()
        # Every execution, including those cancelled earlier for another reason, records its end
        # before the loop closes.
        if self._running:
            await asyncio.wait([running.execution for running in self._running.values()])


    # `async with app.worker(...):` in an asyncio app (e.g. a FastAPI lifespan): runs beside it on
    # its loop, stops gracefully on exit. The app's server keeps its signals.
    async def __aenter__(self) -> Worker:
        self.handle_signals = False
        self._in_context = asyncio.create_task(self.run_async(), name=f"leased-worker-{self.id}")
        while self._loop is None and not self._in_context.done():
            await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()  # first phase: no new claims; running jobs finish within shutdown_grace
        await self._in_context


def _handler_frames(error: BaseException):
    """The traceback from the handler's own frames on: the worker's machinery above it is noise."""
    frames = error.__traceback__
    while frames is not None and frames.tb_next is not None and \
            frames.tb_frame.f_code.co_filename.startswith(_ENGINE_FOLDER):
        frames = frames.tb_next
    return frames


_ENGINE_FOLDER = os.path.dirname(os.path.abspath(__file__))


def _one_line(error: object) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
