"""Process isolation (@app.task(isolation="process")): a sync handler runs in a child process.

The worker keeps everything that makes a job safe: the claim, the lease and its renewals, fencing,
the end's record. A child only imports the handler, calls it and sends back its result (as JSON)
or its error; its progress reports travel back on the same pipe. Children are spawned (not forked:
the worker runs threads and pools, which a fork would copy mid-use) and reused, one job at a time.

The handler thread that took the job waits for the child's answer. If the attempt must stop (its
time limit, a lost lease, a user's cancel, the shutdown), the child gets SIGTERM, which sets its
context's cancel, then SIGKILL after a grace: a handler stuck in a C call or a socket read is
stopped, its slot is free at once, and a fresh child takes the old one's place. A child that dies
on its own (a segfault, the OOM killer, os._exit) ends the attempt as `crashed`, with the signal
or exit code; the job is retried by its policy. A child is recycled after max_tasks_per_child jobs,
or once its RSS passes max_memory_per_child.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from leased import tracing
from leased.admin import ChildrenSummary
from leased.engine.context import CancelReason, TaskContext
from leased.engine.error_text import message_of, traceback_of
from leased.errors import ConfigurationError, PermanentError
from leased.events import ChildProcessEnded, ChildProcessStarted, Event
from leased.jobs import Lease
from leased.payloads import encode_result

log = logging.getLogger("leased.worker")

SPAWN = multiprocessing.get_context("spawn")
# Opens a backend from its database URL; pickled by reference into each child (a module's function).
OpenBackend = Callable[[str], Any]
GRACE_SECONDS = 0.5  # between SIGTERM and SIGKILL: a handler that checks context.cancelled ends itself
# (under timelimits.STUCK_AFTER_SECONDS, so that a killed child reads as stopped, not stuck)
CANCEL_CHECK_SECONDS = 0.05  # how soon a waiting handler thread sees its attempt's cancel
ORPHAN_CHECK_SECONDS = 0.5  # how soon a child whose worker died exits


@dataclass(frozen=True, slots=True)
class Call:
    """What a child needs to run one attempt: where the handler lives, and the job's own JSON."""

    module: str
    qualname: str
    takes_context: bool
    database_url: str | None  # a child's context reaches the database (durable steps) on its own
    job_id: int
    attempt: int
    worker_id: str
    task_name: str
    args: list[Any]  # as the handler takes them (typed parameters decoded by the worker)
    kwargs: dict[str, Any]
    max_payload_bytes: int
    trace_context: str | None = None  # the attempt's span, which the child's own spans nest under


# What came back (Child.run's answers).
@dataclass(frozen=True, slots=True)
class Returned:
    result_json: str


@dataclass(frozen=True, slots=True)
class Raised:
    error_type: str
    message: str
    traceback: str
    permanent: bool  # a PermanentError: not retried
    unstorable: bool  # the result was not JSON, or too large: not retried


@dataclass(frozen=True, slots=True)
class Stopped:
    """The attempt was cancelled: the child was told, then killed if it did not end in the grace."""

    killed: bool


@dataclass(frozen=True, slots=True)
class Crashed:
    exitcode: int  # negative: the signal that killed it

    @property
    def described(self) -> str:
        if self.exitcode < 0:
            try:
                name = signal.Signals(-self.exitcode).name
            except ValueError:
                name = f"signal {-self.exitcode}"
            return f"was killed by {name}" + (" (out of memory? the kernel's OOM killer sends it)"
                                          if self.exitcode == -signal.SIGKILL else "")
        return f"exited with code {self.exitcode}"

    @property
    def how(self) -> str:
        """Short, for counting crashes by: a signal's name ("SIGSEGV"), or "exit 3"."""
        if self.exitcode < 0:
            try:
                return signal.Signals(-self.exitcode).name
            except ValueError:
                return f"signal {-self.exitcode}"
        return f"exit {self.exitcode}"


def check_per_child(name: str, value: object) -> int | None:
    """max_tasks_per_child and max_memory_per_child: a positive int, or None (no limit)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number of at least 1, or None for no limit; got {value!r}")
    return value


class Child:
    """One child process, and the pipe to it."""

    def __init__(self, open_backend: OpenBackend | None = None) -> None:
        ours, theirs = SPAWN.Pipe()
        cancel_theirs, self._cancel_ours = SPAWN.Pipe(duplex=False)  # (reader, writer)
        self.process = SPAWN.Process(target=serve, args=(theirs, cancel_theirs, open_backend), daemon=True,
                                     name="leased-child")
        self.process.start()
        theirs.close()
        cancel_theirs.close()
        self.connection: Connection = ours
        self.jobs_run = 0
        self.rss_bytes = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def run(self, call: Call, context: TaskContext, handler_started: Callable[[], None] = lambda: None
            ) -> Returned | Raised | Stopped | Crashed:
        """On the attempt's handler thread: run `call` here and wait for its answer, passing its
        progress on, calling `handler_started` when the child begins the handler (its imports
        done), and stopping it if the attempt is cancelled."""
        self.connection.send(call)
        self.jobs_run += 1
        while True:
            ready = wait([self.connection, self.process.sentinel], timeout=CANCEL_CHECK_SECONDS)
            if context.is_cancelled:
                return self.stop(context.cancel_reason)
            if self.connection in ready:
                try:
                    message = self.connection.recv()
                except (EOFError, OSError):
                    return self._died()
                kind = message[0]
                if kind == "started":
                    handler_started()
                    continue
                if kind == "progress":
                    if context.report_progress is not None:
                        context._progress = message[1]
                        context.report_progress(context.claimed.lease, message[1])
                    continue
                self.rss_bytes = message[-1]
                if kind == "returned":
                    return Returned(message[1])
                return Raised(*message[1:6])
            if self.process.sentinel in ready:
                return self._died()

    def _died(self) -> Crashed:
        self.process.join()
        return Crashed(self.process.exitcode if self.process.exitcode is not None else -signal.SIGKILL)

    def stop(self, reason: CancelReason | None = None, grace: float = GRACE_SECONDS) -> Stopped:
        """Tell the child to stop (its context's cancel, by SIGTERM), then kill it after `grace`."""
        if self.process.is_alive():
            try:
                self._cancel_ours.send(str(reason or CancelReason.SHUTDOWN))
            except OSError:
                pass
            self.process.terminate()
            self.process.join(grace)
        killed = self.process.is_alive()
        if killed:
            self.process.kill()
            self.process.join()
        self.close()
        return Stopped(killed)

    def close(self) -> None:
        self.connection.close()
        self._cancel_ours.close()


class Children:
    """The worker's children: taken by handler threads, given back after each job, replaced when
    one is stopped, dies or is due for recycling."""

    def __init__(self, *, max_tasks_per_child: int | None = None, max_memory_per_child: int | None = None,
                 open_backend: OpenBackend | None = None):
        # How a child opens the database its handlers' contexts reach (durable steps): the
        # composition root's (leased.backends.connect), passed to each child by reference. The
        # engine opens no backend itself. None: a child's context reaches no database.
        self.open_backend = open_backend
        self.max_tasks_per_child = max_tasks_per_child
        self.max_memory_per_child = max_memory_per_child  # bytes of RSS
        self.emit: Callable[[Event], None] = lambda event: None  # the worker's, once it has one
        self.worker_id = ""
        self._idle: list[Child] = []
        self._busy: set[Child] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.started = 0  # children spawned, ever
        self.recycled = 0  # retired after max_tasks_per_child or max_memory_per_child
        self.crashes: dict[str, int] = {}  # died on their own, mid-job, by how (Crashed.how)

    def prefork(self, count: int) -> None:
        """Spawn children ahead, so the first jobs do not wait for one to start (on a thread)."""
        for _ in range(count):
            child = self._spawn()
            with self._lock:
                closed = self._closed
                if not closed:
                    self._idle.append(child)
            if closed:
                self._end(child, "closed", grace=0)
                return

    def run(self, call: Call, context: TaskContext, handler_started: Callable[[], None] = lambda: None
            ) -> Returned | Raised | Stopped | Crashed:
        child = self._take()
        try:
            answer = child.run(call, context, handler_started)
        except BaseException:
            with self._lock:
                self._busy.discard(child)
            self._end(child, "stopped", grace=0)
            raise
        with self._lock:
            self._busy.discard(child)
        if isinstance(answer, Crashed):
            with self._lock:
                self.crashes[answer.how] = self.crashes.get(answer.how, 0) + 1
            log.warning("job %d (%s) attempt %d: its child process %s %s", call.job_id, call.task_name, call.attempt,
                        child.pid, answer.described)
            self._end(child, "crashed", how=answer.how)
        elif isinstance(answer, Stopped):
            self._end(child, "stopped")
        else:
            self._give_back(child)
        return answer

    def _take(self) -> Child:
        with self._lock:
            if self._idle:
                child = self._idle.pop()
                self._busy.add(child)
                return child
        child = self._spawn()
        with self._lock:
            self._busy.add(child)
        return child

    def _spawn(self) -> Child:
        child = Child(self.open_backend)
        with self._lock:
            self.started += 1
        self.emit(ChildProcessStarted(self.worker_id, child.pid or 0))
        return child

    def _end(self, child: Child, reason: str, grace: float = 1.0, how: str | None = None) -> None:
        """Stop the child (if it still runs) and say why it ended."""
        child.stop(grace=grace)
        self.emit(ChildProcessEnded(self.worker_id, child.pid or 0, reason, child.jobs_run, child.rss_bytes, how))

    def _give_back(self, child: Child) -> None:
        due = ((self.max_tasks_per_child is not None and child.jobs_run >= self.max_tasks_per_child)
               or (self.max_memory_per_child is not None and child.rss_bytes > self.max_memory_per_child))
        if due or self._closed:
            if due:
                with self._lock:
                    self.recycled += 1
            self._end(child, "recycled" if due else "closed")
            return
        with self._lock:
            self._idle.append(child)

    def summary(self) -> ChildrenSummary | None:
        """For the worker's row; None until a child has started."""
        with self._lock:
            if not self.started:
                return None
            alive = [*self._idle, *self._busy]
            return ChildrenSummary(len(alive), self.started, self.recycled, dict(self.crashes),
                                   sum(child.rss_bytes for child in alive))

    def close(self) -> None:
        """The worker stopped: idle children exit now (a busy one as its job ends)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            self._end(child, "closed")


# In the child.
class _ChildClaim:
    """What a child's TaskContext reads of its claim."""

    def __init__(self, call: Call):
        self.id, self.attempt, self.task_name = call.job_id, call.attempt, call.task_name
        self.lease = Lease(call.job_id, call.attempt, call.worker_id)
        self.workflow_id = None
        self._database_url = call.database_url

    @property
    def job(self) -> Any:
        raise ConfigurationError("context.job is not read in a child process (isolation='process'); "
                                 "use context.job_id and context.attempt, or pass what the handler needs as arguments")


def serve(connection: Connection, cancels: Connection, open_backend: OpenBackend | None = None) -> None:
    """A child's life: run one call at a time until the worker closes the pipe (or dies)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the worker decides
    contexts: list[TaskContext] = []

    told: list[CancelReason] = []
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task]] = []  # an async handler's task, while it runs

    def cancelled(signum: int, frame: Any) -> None:
        reason = CancelReason(cancels.recv()) if cancels.poll() else CancelReason.SHUTDOWN
        if not contexts and not running:  # between jobs: nothing to finish
            raise SystemExit(0)
        told.append(reason)
        for context in contexts:
            context.cancel(reason)
        for loop, task in running:  # an async handler: cancelled as the worker cancels one
            loop.call_soon_threadsafe(task.cancel)

    signal.signal(signal.SIGTERM, cancelled)
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), name="leased-orphan-watch", daemon=True).start()
    sending = threading.Lock()

    def send(message: tuple) -> None:
        with sending:
            connection.send(message)

    stores: dict[str, Any] = {}
    while True:
        try:
            call: Call = connection.recv()
        except (EOFError, OSError):  # the worker closed the pipe, or died
            return
        answer = _answer(call, contexts, running, send, stores, open_backend)
        if told:  # the worker gave up on this attempt and waits for the process to end
            return
        send(answer)


def _answer(call: Call, contexts: list[TaskContext], running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task]],
            send: Callable[[tuple], None], stores: dict[str, Any], open_backend: OpenBackend | None) -> tuple:
    try:
        func = _resolve(call.module, call.qualname)
        handler_args = list(call.args)
        if call.takes_context:
            context = TaskContext(_ChildClaim(call), call.worker_id, _store(stores, call.database_url, open_backend),  # type: ignore[arg-type]  # a _ChildClaim, not a ClaimedJob: what a context reads of it
                                  report_progress=lambda lease, report: send(("progress", report)), in_child=True)
            contexts[:] = [context]
            handler_args = [context, *handler_args]
        send(("started",))  # the handler's time limit counts from here, not from the process's start
        try:
            # Imported with the handler's module, the app's tracing (if any) is set up by now.
            with tracing.continued(call.trace_context):
                if inspect.iscoroutinefunction(func):  # an event loop of its own, for this one call
                    result = asyncio.run(_run_async(func(*handler_args, **call.kwargs), running))
                else:
                    result = func(*handler_args, **call.kwargs)
        finally:
            contexts.clear()
    except BaseException as error:  # the handler's own, or finding it: the attempt's error
        return _raised(error, unstorable=False)
    try:
        return ("returned", encode_result(result, call.max_payload_bytes), _rss())
    except Exception as error:  # not JSON, or too large: not retried, as in the worker
        return _raised(error, unstorable=True)


async def _run_async(coroutine: Any, running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task]]) -> Any:
    task = asyncio.ensure_future(coroutine)
    running[:] = [(asyncio.get_running_loop(), task)]
    try:
        return await task
    finally:
        running.clear()


def _raised(error: BaseException, unstorable: bool) -> tuple:
    frames = error.__traceback__.tb_next if error.__traceback__ is not None else None  # from the handler's frame
    return ("raised", type(error).__name__, message_of(error), traceback_of(error, frames),
            isinstance(error, PermanentError), unstorable, _rss())


def _exit_when_orphaned(worker_pid: int) -> None:
    """A worker killed with SIGKILL cannot stop its children: each sees itself handed to another
    parent and exits, even in the middle of a handler that would otherwise run on for hours."""
    while os.getppid() == worker_pid:
        time.sleep(ORPHAN_CHECK_SECONDS)
    os._exit(0)


def _resolve(module: str, qualname: str) -> Callable[..., Any]:
    if module == "__main__":  # the worker's main script, which a spawned child imports as __mp_main__
        module = "__mp_main__" if "__mp_main__" in sys.modules else module
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return getattr(found, "func", found)  # a Task (the decorator's result) or the function itself


def _store(stores: dict[str, Any], database_url: str | None, open_backend: OpenBackend | None) -> Any:
    if database_url is None or open_backend is None:
        return None
    if database_url not in stores:  # the worker that started this child has checked the schema
        stores[database_url] = open_backend(database_url)
    return stores[database_url]


def _rss() -> int:
    """This process's resident memory now, in bytes (Linux's /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
