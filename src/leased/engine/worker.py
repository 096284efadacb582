"""The worker: claim due jobs into free slots, run them, record every attempt's end.

Worker is the composition root of small services, each in its own module: the claimer
(engine/claimer.py: claims into free slots, and while jobs are short a little ahead of them; once
a second the same claim first returns expired leases to the pool, or, where the backend asks, the
reclaimer does that beside the claims: engine/reclaimer.py), the claimed attempts
(engine/attempts.py: each one's way from its claim to its written end, and its cancellation), the
executor (engine/executor.py: runs one attempt's handler), the completer (engine/completer.py:
writes the ends that arrived meanwhile in one transaction, behind the handlers), the lease keeper
(engine/lease_keeper.py: a heartbeat thread renewing every held lease in one statement, and a
watchdog stopping a handler whose lease could run out before a renewal lands), the listener
(engine/listening.py: a thread turning the database's wake-ups into a claim now), the announcer
(engine/announcer.py: keeps the worker's row fresh), the time limits (engine/timelimits.py), the
pruner (engine/pruner.py) and, with periodic tasks, the scheduler (engine/scheduler.py). Database
outages are retried by one policy (engine/retrying.py). If a service dies, the worker stops
loudly. Shutdown has two phases: stop claiming and let running jobs finish within a grace period,
then cancel what is left and release its leases at once. Signal handlers only call stop().
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from leased import logs
from leased.backends.ports import ClaimRequest, RuntimePort, WorkerRecord
from leased.backends.worker_calls import worker_calls
from leased.engine.announcer import Announcer
from leased.engine.attempts import ClaimedAttempts, WorkerStats
from leased.engine.claimer import Claimer
from leased.engine.children import Children
from leased.engine.completer import Completer
from leased.engine.context import CancelReason
from leased.engine.claimed import Handler
from leased.engine.executor import Executor
from leased.engine.lease_keeper import LeaseKeeper
from leased.engine.listening import ListenerService
from leased.engine.reclaimer import Reclaimer
from leased.engine.scheduler import ScheduledTicks, Scheduler
from leased.engine.threads import call_soon_threadsafe
from leased.engine.timelimits import TimeLimits
from leased.events import Event, Events
from leased.jobs import Lease
from leased.payloads import DEFAULT_MAX_PAYLOAD_BYTES
from leased.task_signatures import signatures_json
from leased.worker_ids import default_worker_id

if TYPE_CHECKING:
    from leased.engine.pruner import Pruner

__all__ = ["Worker", "WorkerStats", "default_worker_id"]

log = logging.getLogger("leased.worker")


class Worker:
    def __init__(self, backend: RuntimePort, tasks: Mapping[str, Handler], *, concurrency: int = 8,
                 queues: list[str] | tuple[str, ...] | None = None, poll_interval: float = 1.0,
                 shutdown_grace: float = 30.0, worker_id: str | None = None,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, events: Events | None = None,
                 push: bool = True, schedules: Sequence[ScheduledTicks] = (), pruner: Pruner | None = None,
                 children: Children | None = None):
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
        self.children = children or Children()  # process-isolated handlers' (engine/children.py)
        self.children.worker_id, self.children.emit = self.id, self._child_event
        self.handle_signals = True  # SIGINT/SIGTERM stop it when run() owns the main thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._force = asyncio.Event()  # set by the second stop(): cancel running jobs now
        self._stopping = False
        self._stop_requests = 0
        self._stop_lock = threading.Lock()
        self._service_failure: BaseException | None = None
        self._in_context: asyncio.Task | None = None  # run_async() under `async with worker:`

        self._time_limits = TimeLimits(self.id, lambda lease: self._cancel(lease, CancelReason.TIMEOUT),
                                       self.events.emit, lambda: self._announcer.soon())
        # The other services are put together when the worker runs, from its settings then.
        self._announcer: Announcer
        self._lease_keeper: LeaseKeeper
        self._claimer: Claimer
        self._reclaimer: Reclaimer | None
        self._completer: Completer
        self._claimed: ClaimedAttempts  # every claimed attempt until its end is written

    def _compose(self) -> None:
        names = tuple(sorted(self.tasks))
        stopping: Callable[[], bool] = lambda: self._stopping
        self._announcer = Announcer(self.backend, WorkerRecord(self.id, socket.gethostname(), os.getpid(),
                                                               self.concurrency, self.queues, names,
                                                               task_signatures=signatures_json(self.tasks)),
                                    lambda: self._time_limits.stuck, self.children.summary)
        self._lease_keeper = LeaseKeeper(self.backend, self._cancel, heartbeat_died=self._heartbeat_died,
                                         stopping=stopping,
                                         renewed_late=lambda lease, late: self._claimed.renewed_late(lease, late))
        self._completer = Completer(self.backend, self._lease_keeper.heartbeat.overdue, self.id,
                                    recorded=lambda batch, results: self._claimed.recorded(batch, results))
        self._claimed = ClaimedAttempts(
            self.backend, self.tasks, self.concurrency,
            executor=Executor(self._time_limits, self.max_payload_bytes, self.backend, self.children),
            completer=self._completer,
            heartbeat=self._lease_keeper.heartbeat, stats=self.stats, emit=self.events.emit, worker_id=self.id,
            slot_freed=lambda: self._claimer.slot_freed(), closed=lambda: self._claimer.attempt_closed(),
            thread_failed=lambda error: self._call_soon_threadsafe(self._service_failed, "handler thread", error))
        self._reclaimer = Reclaimer(self.backend, self.id, reclaimed=lambda: self._claimer.wake(), stopping=stopping) \
            if self.backend.reclaims_beside_claims else None
        self._claimer = Claimer(self.backend, ClaimRequest(self.id, names, self.queues, limit=0),
                                self._claimed.slots, poll_interval=self.poll_interval, start=self._claimed.start,
                                claimed=lambda: len(self._claimed), held_by_stuck=lambda: self._time_limits.holding,
                                stopping=stopping, reclaimer=self._reclaimer)

    # Control, from any thread.
    def run(self, *, stop_when_idle: bool = False) -> WorkerStats:
        """Run until stopped (SIGINT/SIGTERM in the main thread, or stop()). Blocks."""
        return asyncio.run(self.run_async(stop_when_idle=stop_when_idle))

    @property
    def running(self) -> bool:
        """Whether run() has started its loop and not yet closed it."""
        return self._loop is not None

    @property
    def stopping(self) -> bool:
        """Whether it stopped claiming: asked to (stop(), a signal), or on its own (a service that
        failed); it may still be finishing its jobs."""
        return self._stopping

    def stop(self) -> None:
        """First call: stop claiming and let running jobs finish. Second call: cancel them now."""
        with self._stop_lock:
            self._stop_requests += 1
            forced = self._stop_requests > 1
        self._stopping = True
        self._call_soon_threadsafe(self._apply_stop, forced)

    def notify(self) -> None:
        """A job was enqueued in this process: look for work now instead of at the next poll."""
        self._call_soon_threadsafe(lambda: self._claimer.wake())

    def _call_soon_threadsafe(self, callback: Callable, *args: object) -> None:
        call_soon_threadsafe(self._loop, callback, *args)

    def _apply_stop(self, forced: bool) -> None:
        self._claimer.wake()
        if not forced:
            log.info("worker %s stopping: no new jobs; %d running may finish within %.0fs (signal again to force)",
                     self.id, len(self._claimed), self.shutdown_grace)
        else:
            log.warning("worker %s: forced stop, cancelling %d running job(s)", self.id, len(self._claimed))
            self._force.set()

    async def run_async(self, *, stop_when_idle: bool = False) -> WorkerStats:
        # Every call below, on this task and the tasks and threads it starts, is the worker's own
        # (leased.backends.worker_calls); the handlers' calls are theirs (the executor says so).
        # What it logs, on them too, names the worker (leased.logs).
        with worker_calls(), self.backend.serving_worker(), logs.about(worker_id=self.id):
            return await self._run(stop_when_idle)

    async def _run(self, stop_when_idle: bool) -> WorkerStats:
        self._compose()
        self._loop = asyncio.get_running_loop()
        signals = self._install_signal_handlers()
        self._time_limits.start(self._loop)
        self._completer.start(self._loop)
        self._claimed.open(self._loop)
        self._lease_keeper.start()
        listener = self.backend.listener() if self.push else None
        if self.push and listener is None:  # e.g. PostgreSQL behind PgBouncer without a listen_url
            log.warning("worker %s: wake-ups fall back to polling every %gs: %s", self.id, self.poll_interval,
                        self.backend.polling_reason or "this database gives none")
        services = [self._service("lease watchdog", self._lease_keeper.watch()),
                    self._service("completer", self._completer.run()),
                    self._service("announcer", self._announcer.run(listener.port if listener is not None else None))]
        if self._reclaimer is not None:
            services.append(self._service("reclaimer", self._reclaimer.run()))
        # run_until_empty() drains what is queued; ticking schedules would never let it be empty.
        if self.schedules and not stop_when_idle:
            services.append(self._service("scheduler", Scheduler(
                self.backend, self.schedules, wake_claimer=self.notify, poll_interval=self.poll_interval,
                worker_id=self.id).run()))
        if self.pruner and not stop_when_idle:
            services.append(self._service("pruner", self.pruner.run(self.id)))
        if listener is not None:
            ListenerService(listener, self.queues, wake_claimer=self.notify, emit=self._emit_threadsafe,
                            failed=lambda error: self._call_soon_threadsafe(self._service_failed, "listener", error),
                            stopping=lambda: self._stopping, worker_id=self.id).start()
        log.info("worker %s started on %s: concurrency %d, queues %s, tasks %s", self.id, self.backend.where,
                 self.concurrency, ",".join(self.queues) if self.queues else "all", ", ".join(sorted(self.tasks)))
        try:
            if not all(handler.is_async and handler.isolation != "process" for handler in self.tasks.values()):
                await asyncio.to_thread(self._claimed.start_threads)
            if any(handler.isolation == "process" for handler in self.tasks.values()):
                # Children start in the background: the first isolated job takes one, or spawns its own.
                threading.Thread(target=self.children.prefork, args=(min(self.concurrency, os.cpu_count() or 1),),
                                 name="leased-prefork", daemon=True).start()
            await self._claimer.run(stop_when_idle)
        finally:
            self._stopping = True
            await self._claimed.wind_down(self.shutdown_grace, self._force)  # leases still watched meanwhile
            for service in services:
                service.cancel()
            await self._announcer.sign_off()
            self._claimed.close()
            self.children.close()
            await self.backend.close_async()  # e.g. async transactional handlers' pool, on this loop
            self._lease_keeper.stop()
            for signum in signals:
                self._loop.remove_signal_handler(signum)
            self._loop = None
        failure = self._service_failure or self._lease_keeper.heartbeat.failure
        if failure is not None:
            raise RuntimeError(f"worker {self.id} stopped because a service failed: {failure!r}") from failure
        log.info("worker %s stopped: %s", self.id, self.stats)
        return self.stats

    # Supervision: if a service dies, the worker stops loudly instead of limping on.
    def _service(self, name: str, coroutine) -> asyncio.Task:
        task = asyncio.create_task(coroutine, name=f"leased-{name.replace(' ', '-')}")

        def ended(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is not None:
                self._service_failed(name, task.exception())

        task.add_done_callback(ended)
        return task

    def _service_failed(self, name: str, error: BaseException) -> None:
        self._service_failure = error
        log.error("worker %s: %s failed; stopping", self.id, name, exc_info=error)
        self._stopping = True
        self._apply_stop(forced=True)

    def _heartbeat_died(self) -> None:
        log.error("worker %s: heartbeat died; stopping", self.id)  # its failure is raised at the end
        self._stopping = True
        self._apply_stop(forced=True)

    def _cancel(self, lease: Lease, reason: CancelReason, cause: str | None = None) -> None:
        self._claimed.cancel(lease, reason, cause)

    def _emit_threadsafe(self, event: Event) -> None:
        """From another thread: subscribers run on the loop, as they expect."""
        self._call_soon_threadsafe(self.events.emit, event)

    def _child_event(self, event: Event) -> None:
        """A child started or ended (from a handler thread): said, and on the worker's row soon."""
        self._emit_threadsafe(event)
        self._call_soon_threadsafe(lambda: self._announcer.soon())

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
