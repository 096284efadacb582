"""Leased: the application object. It holds the task registry and opens the backend on first use."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from dataclasses import replace
from datetime import timedelta
from typing import Any, Callable, Concatenate, Literal, ParamSpec, TypedDict, TypeVar, Unpack, overload

from leased.admin import WORKER_SILENT_AFTER, OldTransaction, Overview, QueueSummary, WorkerInfo
from leased.backends import connect, parse_database_url
from leased.backends.ports import Backend, JobFilter, PruneRule, SignalRequest, Throughput
from leased.backends.urls import redacted
from leased.backoff import Backoff
from leased.counts import JobCounts
from leased.engine.children import Children, check_per_child
from leased.engine.context import TaskContext
from leased.engine.pruner import Pruner, count_prunable, older_than_rules, prune, prune_rules
from leased.engine.retrying import retry_delay
from leased.engine.worker import Worker, WorkerStats
from leased.errors import (ConfigurationError, DatabaseLocked, DatabaseUnavailable, InvalidTransition, JobNotFound,
                           PayloadError, WorkflowNotFound)
from leased.events import Events
from leased.explain import Explanation, StepFacts, explain, parents_to_read, reads_parents
from leased.facts import JobFacts
from leased.horizon import OLD_TRANSACTION_AFTER, check_old_transaction_after
from leased.jobs import DurableStep, Job, JobStatus, NewJob, Signal
from leased.limits import QueueLimit, check_concurrency, parse_rate
from leased.names import check_name
from leased.payloads import DEFAULT_MAX_PAYLOAD_BYTES, encode_result
from leased.retention import Retention, app_retention, period
from leased.runs import Enqueued, NewWorkflow, WorkflowInfo
from leased.schedules import Schedule, ScheduleInfo, describe_schedules, make_schedule, tick_handler
from leased.suggest import did_you_mean
from leased.tasks import _UNSET, ContextTask, Isolation, Task, check_queue_name
from leased.waiting import JobEndSignals, JobWait
from leased.workflows import Workflow, wait_step_task

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

DEFAULT_DATABASE_URL = "sqlite:///leased.db"
# Statuses whose `why` says which recorded durable step the next (or this) attempt resumes after.
_RESUMABLE = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.SLEEPING)


class TaskOptions(TypedDict, total=False):
    """@app.task's options besides takes_context, for its overloads: see Leased.task."""

    name: str | None
    queue_name: str
    priority: int
    max_attempts: int
    lease: float | timedelta | str
    backoff: Backoff | None
    timeout: float | timedelta | str | None
    concurrency: int | None
    concurrency_key: str | Callable[..., str] | None
    rate_limit: str | None
    retention: Retention | dict[str, Any] | None
    transactional: bool
    isolation: Isolation
    max_crashes: int


class Leased:
    """Jobs in your database. `Leased()` uses $LEASED_DATABASE_URL, else sqlite:///leased.db.

    The schema is created or upgraded on first use unless `migrate=False` (then run `leased migrate`,
    or apply `leased migrate --sql` with your own migration tool).
    """

    def __init__(self, database_url: str | None = None, *, migrate: bool = True,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 retention: Retention | dict[str, Any] | None = Retention(),
                 old_transaction_after: float = OLD_TRANSACTION_AFTER):
        self.database_url = database_url or os.environ.get("LEASED_DATABASE_URL") or DEFAULT_DATABASE_URL
        parse_database_url(self.database_url)  # a malformed URL fails here, not at the first use
        self.auto_migrate = migrate
        self.max_payload_bytes = max_payload_bytes
        self.tasks: dict[str, Task[..., Any]] = {}
        self.schedules: dict[str, Schedule] = {}  # periodic tasks, by task name
        self._backend: Backend | None = None
        self._lock = threading.Lock()
        self._workers: weakref.WeakSet[Worker] = weakref.WeakSet()
        self.events = Events()
        self._job_ends = JobEndSignals(self.events)  # wakes app.wait() callers in this process
        self.retention = app_retention(retention)  # workers prune finished jobs past it (see prune())
        # `why` and the dashboard name a transaction open longer than this (seconds) that holds back vacuum.
        self.old_transaction_after = check_old_transaction_after(old_transaction_after)

    def __repr__(self) -> str:
        return f"Leased({redacted(self.database_url)!r})"

    @property
    def backend(self) -> Backend:
        return self._backend or self._open()

    def _open(self, callers_connection: Any = None, *, migrating: bool = False) -> Backend:
        """Connect and migrate (or, with migrate=False, check the schema), once. A first use inside the
        caller's transaction (`callers_connection`) must not wait on that transaction's own locks: see
        the backends' migrate(). `migrating`: for migrate() itself, which neither checks nor applies."""
        with self._lock:
            if self._backend is None:
                backend = connect(self.database_url)
                if migrating:  # migrate() is about to make the schema current
                    self._backend = backend
                    return backend
                try:
                    if self.auto_migrate:
                        _migrate(backend, callers_connection)
                    else:  # every entry point (worker, CLI, dashboard, producer) learns it here, in one line
                        backend.check_schema(callers_connection)
                except BaseException:
                    backend.close()
                    raise
                self._backend = backend
        return self._backend

    def migrate(self) -> list[int]:
        """Create or upgrade the schema now (e.g. at start-up); returns the versions applied."""
        return (self._backend or self._open(migrating=True)).migrate()

    def migration_sql(self) -> str:
        """The schema as one SQL script, for users who apply it with their own migration tool."""
        if self._backend is not None:
            return self._backend.migration_sql()
        backend = connect(self.database_url)  # printing needs no connection, and checks nothing
        try:
            return backend.migration_sql()
        finally:
            backend.close()

    def close(self) -> None:
        with self._lock:
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    # Tasks. The overloads tell a type checker what a decorated handler becomes: enqueue() takes
    # the handler's parameters, less the context that a takes_context=True handler receives first.
    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, *, takes_context: Literal[True], **options: Unpack[TaskOptions]
             ) -> Callable[[Callable[Concatenate[TaskContext, P], R]], ContextTask[P, R]]: ...

    @overload
    def task(self, *, takes_context: Literal[False] = False, **options: Unpack[TaskOptions]
             ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    @overload  # takes_context known only at run time: the checker cannot tell which parameters enqueue() takes
    def task(self, *, takes_context: bool, **options: Unpack[TaskOptions]
             ) -> Callable[[Callable[..., R]], Task[..., R]]: ...

    # `func` is positional-only in the overloads alone: mypy refuses an implementation that is both
    # positional-only and overloaded with **Unpack (it says the implementation accepts too little).
    def task(self, func: Callable[..., Any] | None = None, *, name: str | None = None,
             queue_name: str = "default", priority: int = 0, max_attempts: int = 3,
             lease: float | timedelta | str = 30.0, backoff: Backoff | None = None, takes_context: bool = False,
             timeout: float | timedelta | str | None = None, concurrency: int | None = None,
             concurrency_key: str | Callable[..., str] | None = None, rate_limit: str | None = None,
             retention: Retention | dict[str, Any] | None = _UNSET, transactional: bool = False,
             isolation: Isolation = "thread", max_crashes: int = 2) -> Any:
        """Register a handler. Give it an explicit `name` to keep queued jobs valid across refactors.

        `timeout` limits each attempt (seconds or a timedelta; None: no limit): an async handler is
        cancelled at the limit, a sync one told through its context; the attempt ends as `timeout`.
        `concurrency=N` runs at most N of its jobs at once per `concurrency_key` (a template over the
        arguments, "customer:{customer_id}", or a function of them; default: the task's name), and
        `rate_limit="100/m"` starts at most that many per key per window, across all workers.
        `retention` overrides the app's for this task's finished jobs (see Retention).
        `transactional=True` (with takes_context=True) runs the handler in a transaction on
        `context.connection` that commits together with the attempt's end, and only while the
        worker still holds the job's lease: its writes to this database happen once.
        `isolation="process"` runs each attempt of a sync handler in a child process of the
        worker's, which its time limit, a lost lease or a cancel stops (SIGTERM, then SIGKILL), and
        whose death ends the attempt as `crashed`; the handler must be defined at a module's top level.
        `max_crashes` (default 2): after that many attempts ended by their process dying (a
        segfault, the OOM killer, a killed worker), the job is failed as a poison job
        ("quarantined after N crashes") instead of being retried up to max_attempts."""

        def register(function: Callable[..., Any]) -> Task[..., Any]:
            task_name = check_name(f"{function.__module__}.{function.__qualname__}" if name is None else name,
                                   "task name")
            if task_name in self.tasks and self.tasks[task_name].func is not function:
                raise ConfigurationError(f"two handlers registered as task {task_name!r}; give one another name=")
            task_class: type[Task[..., Any]] = ContextTask if takes_context else Task
            task = task_class(self, function, name=task_name, queue_name=queue_name, priority=priority,
                              max_attempts=max_attempts, lease=lease, backoff=backoff or Backoff(),
                              takes_context=takes_context, timeout=timeout, concurrency=concurrency,
                              concurrency_key=concurrency_key, rate_limit=rate_limit,
                              retention=retention, transactional=transactional, isolation=isolation,
                              max_crashes=max_crashes)
            self.tasks[task_name] = task
            return task

        return register if func is None else register(func)

    def periodic(self, cron: str | None = None, /, *, every: timedelta | None = None, name: str | None = None,
                 timezone: str = "UTC", catch_up: str = "latest", catch_up_limit: int = 100, overlap: str = "allow",
                 **task_options: Any) -> Callable[[Callable[..., R]], Task[..., R]]:
        """Register a handler that workers run on a schedule: a cron expression in `timezone`, or
        `every=timedelta(...)`. It receives the tick's time as `scheduled_at` (an aware datetime).

        After downtime, catch_up="latest" runs the latest missed tick once, "all" every missed tick
        (at most `catch_up_limit`), "none" none. overlap="skip" skips a tick while the previous run is
        still pending or running. Other options are @task's (queue_name, priority, max_attempts, ...).
        """

        def register(function: Callable[..., R]) -> Task[..., R]:
            task_name = check_name(f"{function.__module__}.{function.__qualname__}" if name is None else name,
                                   "task name")
            schedule = make_schedule(task_name, cron, every, timezone, catch_up, catch_up_limit, overlap)
            handler = tick_handler(function, schedule, leading=1 if task_options.get("takes_context") else 0)
            register_task: Callable[[Callable[..., Any]], Task[..., Any]] = self.task(name=task_name, **task_options)
            task = register_task(handler)
            self.schedules[task_name] = replace(schedule, task=task)
            return task

        return register

    def list_schedules(self) -> list[ScheduleInfo]:
        """Every stored schedule and every one registered here: next run, last tick, last job and its status."""
        now, states = self.backend.schedule_states()
        return describe_schedules(self.schedules, now, states)

    def get_task(self, name: str) -> Task[..., Any]:
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none registered"
            raise ConfigurationError(f"unknown task {name!r}{did_you_mean(name, self.tasks)}; known tasks: {known}") \
                from None

    # The producer interface (leased.tasks.Producer) tasks write their jobs through.
    def enqueue_jobs(self, jobs: list[NewJob], connection: Any) -> list[Job]:
        results = self._write(lambda backend, connection: backend.enqueue(jobs, connection), connection)
        return [job for job, _ in results]

    def _write(self, write: Callable[[Backend, Any], T], connection: Any) -> T:
        """write(backend, connection): on the caller's connection if given (a SQLAlchemy Session or
        Connection: its driver's, in its open transaction), then this process's workers woken, unless
        it is the caller's transaction to commit (what it wrote exists only once that commits)."""
        if _is_sqlalchemy(connection):
            from leased.backends.sqlalchemy_sessions import driver_connection

            connection = driver_connection(connection)
        written = write(self._backend or self._open(connection), connection)
        if connection is None:
            self._wake_own_workers()
        return written

    async def enqueue_jobs_async(self, jobs: list[NewJob], connection: Any) -> list[Job]:
        if _is_sqlalchemy(connection):
            from leased.backends.sqlalchemy_sessions import driver_connection_async

            connection = await driver_connection_async(connection)
        # A first use checks the schema on the caller's connection where it can: a sqlite3 one (see _open).
        backend = self._backend or self._open(connection if type(connection).__module__ == "sqlite3" else None)
        return [job for job, _ in await backend.enqueue_async(jobs, connection)]

    # Workflows (leased.workflows).
    def workflow(self, name: str, *, idempotency_key: str | None = None) -> Workflow:
        """A builder of a run of steps that wait for each other; nothing is written until its
        enqueue(). With `idempotency_key`, enqueueing again while that run is unfinished returns it."""
        return Workflow(self, name, idempotency_key)

    def enqueue_workflow(self, workflow: NewWorkflow, connection: Any = None) -> Enqueued:
        return self._write(lambda backend, connection: backend.enqueue_workflow(workflow, connection), connection)

    def get_workflow(self, workflow_id: int) -> WorkflowInfo:
        """The run: its status, progress and every step with its job's status."""
        info = self.backend.get_workflow(workflow_id)
        if info is None:
            raise WorkflowNotFound(workflow_id)
        return info

    def list_workflows(self, *, limit: int = 50, before_id: int | None = None,
                       name: str | None = None) -> list[WorkflowInfo]:
        """Runs newest first (page on with before_id=<last id>), with their steps counted by status."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise ConfigurationError(f"invalid limit {limit!r}: use a whole number from 1 to 10000")
        return self.backend.list_workflows(limit, before_id, name)

    def cancel_workflow(self, workflow_id: int) -> int:
        """Cancel every unfinished step of the run (running ones through their leases); returns how many."""
        return self.backend.cancel_workflow(workflow_id)

    def retry_workflow(self, workflow_id: int) -> int:
        """Retry every failed step of the run; the steps its failure cancelled wait again. Returns how many."""
        retried = self.backend.retry_workflow(workflow_id)
        self._wake_own_workers()
        return retried

    # Inspection and administration.
    def get_job(self, job_id: int) -> Job:
        job = self.backend.get_job(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def job_steps(self, job_id: int) -> list[DurableStep]:
        """The durable steps (TaskContext.step) the job's attempts recorded, in the order they ran."""
        return self.backend.durable_steps(job_id)

    def job_signals(self, job_id: int) -> list[Signal]:
        """The job's mailbox (signal()), oldest first: each signal with the attempt that took it, if one did."""
        return self.backend.signals(job_id)

    def list_jobs(self, *, status: JobStatus | str | None = None, queue_name: str | None = None,
                  task_name: str | None = None, search: str | int | None = None, limit: int = 100,
                  before_id: int | None = None, after_id: int | None = None,
                  order: str = "newest", worker_id: str | None = None) -> list[Job]:
        """Jobs newest first (page on with before_id=<last id>), or oldest first (after_id=<last id>).

        `search` matches a job id or an idempotency key exactly; `worker_id` keeps the jobs that worker
        ran an attempt of or holds now (a `WorkerInfo.id`, as `workers()` lists them).
        """
        if status is not None:
            status = _job_status(status)
        if queue_name is not None:
            check_queue_name(queue_name)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise ConfigurationError(f"invalid limit {limit!r}: use a whole number from 1 to 10000")
        if order not in ("newest", "oldest"):
            raise ConfigurationError(f"invalid order {order!r}: use 'newest' or 'oldest'")
        search = None if search is None or str(search).strip() == "" else str(search).strip()
        if worker_id is not None and (not isinstance(worker_id, str) or not worker_id.strip()):
            raise ConfigurationError(f"invalid worker_id {worker_id!r}: use a worker's id, as app.workers() "
                                     "or `leased workers` lists them")
        return self.backend.list_jobs(JobFilter(status, queue_name, task_name, search, limit, order == "newest",
                                                before_id, after_id, worker_id and worker_id.strip()))

    def counts(self) -> dict[str, dict[str, int]]:
        """{queue_name: {status: count}}, every status present (zero when none), all exact: it reads
        every row, so a big table makes it slow. job_counts() is the cheap one."""
        table: dict[str, dict[str, int]] = {}
        for (queue, status), count in sorted(self.backend.counts().items()):
            table.setdefault(queue, _zeros())[status.value] = count
        return table

    def job_counts(self) -> JobCounts:
        """Jobs per queue and status without reading the finished history: pending and running exact,
        failed and cancelled exact up to 10,000 each, the rest estimated (named in `.estimated`).
        What the dashboard, /metrics and `leased stats` show; see leased.counts."""
        return self.backend.job_counts()

    def overview(self, window: timedelta = timedelta(hours=1)) -> Overview:
        """Per queue: counts (some estimated, see job_counts), the wait of the oldest due job, what
        finished within `window`; and the workers."""
        job_counts = self.job_counts()
        counts = job_counts.by_queue
        oldest = self.backend.oldest_due()
        finished = self.backend.finished_since(window.total_seconds())
        limits = self.limits()
        paused = self.backend.paused_queues()
        queues = [
            QueueSummary(queue, counts.get(queue, _zeros()), oldest.get(queue),
                         finished.get((queue, JobStatus.DONE), 0), finished.get((queue, JobStatus.FAILED), 0),
                         limits.get(queue), paused.get(queue))
            for queue in sorted(set(counts) | set(oldest) | set(limits) | set(paused))
        ]
        return Overview(queues, self.workers(), window.total_seconds(), job_counts.totals, job_counts.estimated,
                        self.old_transactions())

    def old_transactions(self) -> tuple[OldTransaction, ...]:
        """Other sessions whose transaction, open longer than old_transaction_after, holds back vacuum
        (PostgreSQL; none elsewhere): dead rows stay until it ends, and claims slow down."""
        return self.backend.old_transactions(self.old_transaction_after)

    def workers(self) -> list[WorkerInfo]:
        """Workers that announced themselves recently; `alive` is False once one has been silent a while."""
        return self.backend.list_workers(WORKER_SILENT_AFTER)

    def task_names(self) -> list[str]:
        return self.backend.task_names()

    def queue_names(self) -> list[str]:
        return self.backend.queue_names()

    def retry(self, job_id: int) -> Job:
        """Take a failed or cancelled job back to pending, now, with at least one more attempt."""
        job = self.backend.retry(job_id)
        self._wake_own_workers()
        return job

    def retry_failed(self, *, task_name: str | None = None, queue_name: str | None = None) -> int:
        """Take every failed job (of one task, or queue) back to pending; returns how many."""
        retried = self.backend.retry_failed(task_name, queue_name)
        self._wake_own_workers()
        return retried

    def cancel(self, job_id: int) -> Job:
        """Cancel a pending job, or a running one: its worker loses the lease and stops the handler."""
        job = self.backend.cancel(job_id)
        self._job_ends.job_changed(job_id)
        return job

    # Signals (TaskContext.wait_for).
    def signal(self, job_id: int | None, name: str, payload: Any = None, *, idempotency_key: str | None = None,
               connection: Any = None) -> Signal:
        """Send signal `name` with `payload` (JSON) to a job, by id or by `idempotency_key` (then
        job_id None): it goes in the job's mailbox, and wakes the job if it sleeps waiting for that
        name. With `connection`, written in the transaction open on it: it is sent when that
        commits, and never if it rolls back. A job that ended takes none: InvalidTransition."""
        request = self._signal_request(job_id, name, payload, idempotency_key)
        return self._write(lambda backend, connection: backend.send_signal(request, connection), connection)

    async def asignal(self, job_id: int | None, name: str, payload: Any = None, *,
                      idempotency_key: str | None = None) -> Signal:
        """signal() for async code, on a thread (no connection of the caller's)."""
        return await asyncio.to_thread(self.signal, job_id, name, payload, idempotency_key=idempotency_key)

    def _signal_request(self, job_id: int | None, name: str, payload: Any, idempotency_key: str | None
                        ) -> SignalRequest:
        """The request, or an error naming the argument, before anything is written."""
        if (job_id is None) == (idempotency_key is None):
            raise ConfigurationError("signal(): name the job by its id or by idempotency_key=, not "
                                     f"{'both' if job_id is not None else 'neither'}")
        if job_id is not None and (isinstance(job_id, bool) or not isinstance(job_id, int)):
            raise ConfigurationError(f"signal(job_id={job_id!r}): a job id is a whole number")
        check_name(name, "signal name")
        if idempotency_key is not None:
            check_name(idempotency_key, "idempotency_key")
        try:
            payload_json = encode_result(payload, self.max_payload_bytes)
        except PayloadError as error:
            raise PayloadError(f"signal {name!r}: its payload cannot be stored: {error}") from None
        return SignalRequest(name, payload_json, job_id, idempotency_key)

    def why(self, job_id: int) -> Explanation:
        """Why the job is where it is (waiting, running, failed...), in plain reasons from the database."""
        return self.job_and_why(job_id)[1]

    def job_and_why(self, job_id: int) -> tuple[Job, Explanation]:
        """The job (with its history) and why it is where it is, read in one snapshot, so the two agree."""
        facts = self.backend.why_facts(job_id)
        if facts is None:
            raise JobNotFound(job_id)
        if facts.job.status is JobStatus.PENDING:
            facts = replace(facts, old_transactions=self.old_transactions())
        recorded = [step.name for step in self.backend.durable_steps(job_id)] \
            if facts.job.status in _RESUMABLE and facts.job.attempt > 0 else []
        return facts.job, explain(facts, self._step_facts(facts), recorded)

    def _step_facts(self, facts: JobFacts) -> StepFacts | None:
        """A step's parents, read when `why` tells more with them (explain.reads_parents)."""
        if not reads_parents(facts):
            return None
        parents = tuple(self.backend.parents_of(facts.job.id))
        not_ended = [self.backend.get_job(job_id) for job_id in parents_to_read(parents)]
        return StepFacts(parents, tuple(job for job in not_ended if job is not None))

    # Limits per queue, across all workers (limits per key are declared on tasks).
    def limit(self, queue_name: str, *, concurrency: int | None = None, rate_limit: str | None = None) -> QueueLimit:
        """Set a queue's limits, replacing any before: at most `concurrency` of its jobs running and
        `rate_limit` ("100/m", "10/s", "1000/h") starts per sliding window. Neither: no limit."""
        limit = QueueLimit(check_queue_name(queue_name), check_concurrency(concurrency), parse_rate(rate_limit))
        self.backend.set_queue_limit(limit)
        self._wake_own_workers()
        return limit

    def limits(self) -> dict[str, QueueLimit]:
        """{queue_name: its limits}, for queues that have any."""
        return {limit.queue_name: limit for limit in self.backend.queue_limits()}

    # Workers.
    def wake_workers(self) -> None:
        """Every worker on this database looks for work now instead of at its next poll: this
        process's at once, the others by a wake-up (PostgreSQL: a NOTIFY; SQLite and MariaDB: a
        datagram to the workers on this host; workers elsewhere poll)."""
        self._wake_own_workers()
        self.backend.nudge({*self.backend.queue_names(), *(task.queue_name for task in self.tasks.values())})

    def _wake_own_workers(self) -> None:
        # After this app's own writes, whose commits already woke the other processes' workers.
        for worker in list(self._workers):
            worker.notify()

    def worker(self, *, concurrency: int = 8, queues: list[str] | None = None, poll_interval: float = 1.0,
               shutdown_grace: float = 30.0, worker_id: str | None = None, push: bool = True,
               prune: bool = True, max_tasks_per_child: int | None = None,
               max_memory_per_child: int | None = None) -> Worker:
        """A worker for this app's tasks. `push=False` turns off LISTEN/NOTIFY wake-ups (behind
        PgBouncer they need a direct `listen_url=` in the URL; without one the worker polls anyway).
        `prune=False`: this worker deletes no finished jobs (prune with `leased prune` instead).
        `max_tasks_per_child` and `max_memory_per_child` (bytes of RSS) retire a process-isolated
        task's child after that many jobs, or once it has grown past that, between jobs."""
        if not self.tasks:
            raise ConfigurationError("no tasks registered: decorate handlers with @app.task before starting a worker")
        for queue in queues or ():
            check_queue_name(queue)
        wait_step_task(self)  # a step that only waits (Workflow.wait_for), of any of this app's workflows
        worker = Worker(self.backend, self.tasks, concurrency=concurrency, queues=queues,
                        poll_interval=poll_interval, shutdown_grace=shutdown_grace, worker_id=worker_id,
                        max_payload_bytes=self.max_payload_bytes, events=self.events, push=push,
                        schedules=tuple(self.schedules.values()),
                        children=Children(
                            open_backend=connect,
                            max_tasks_per_child=check_per_child("max_tasks_per_child", max_tasks_per_child),
                            max_memory_per_child=check_per_child("max_memory_per_child", max_memory_per_child)),
                        pruner=Pruner(self.backend, rules) if prune and (rules := self._prune_rules()) else None)
        self._workers.add(worker)
        return worker

    def run_until_empty(self, *, concurrency: int = 1, queues: list[str] | None = None) -> WorkerStats:
        """Run every job that is due now (and any it enqueues) in this process, then return.

        Periodic tasks are not ticked here (a schedule would never let the queue be empty): run a
        worker for them, or call the handler yourself."""
        return self.worker(concurrency=concurrency, queues=queues).run(stop_when_idle=True)

    # Bulk actions, waiting, and what the command line checks.
    def cancel_pending(self, *, task_name: str | None = None, queue_name: str | None = None) -> int:
        """Cancel every pending job (of one task, or queue); returns how many. Running jobs go on."""
        if queue_name is not None:
            check_queue_name(queue_name)
        return self.backend.cancel_pending(task_name, queue_name)

    def count_jobs(self, *, status: JobStatus | str | None = None, task_name: str | None = None,
                   queue_name: str | None = None) -> int:
        if queue_name is not None:
            check_queue_name(queue_name)
        return self.backend.count_jobs(None if status is None else _job_status(status), task_name, queue_name)

    def known_queue_names(self) -> set[str]:
        """Queues that exist for this app: those of its jobs, its tasks, its limits and its paused
        queues. A worker started on any other is most likely a typo (`leased worker` warns), and
        pausing one needs force=True."""
        return (set(self.queue_names()) | {task.queue_name for task in self.tasks.values()}
                | set(self.backend.paused_queues()) | {limit.queue_name for limit in self.backend.queue_limits()})

    def wait(self, job_id: int, timeout: float | None = None) -> Job:
        """The job once it is done, failed or cancelled; WaitTimeout if it has not ended within `timeout`
        seconds (None: as long as it takes). A worker in this process wakes the waiter at once; a job
        run elsewhere is re-read with a backoff from 10 ms to 500 ms (see leased/waiting.py for why)."""
        return JobWait(self.get_job, self._job_ends, job_id, timeout).run()

    async def wait_async(self, job_id: int, timeout: float | None = None) -> Job:
        """wait() for async code: it waits on a thread, and stops waiting if the caller is cancelled."""
        waiting = JobWait(self.get_job, self._job_ends, job_id, timeout)
        try:
            return await asyncio.to_thread(waiting.run)
        finally:
            waiting.abandon()

    # Pausing queues, and retention (see docs/howto/pausing.md and docs/howto/retention.md).
    def pause(self, queue_name: str, *, force: bool = False) -> bool:
        """Stop every worker claiming the queue's jobs (running ones finish; enqueue still works).
        False if it was paused already. An unknown queue is an error unless `force=True`."""
        check_queue_name(queue_name)
        if not force:
            self.check_known_queue(queue_name, "pause")
        return self.backend.pause_queue(queue_name)

    def resume(self, queue_name: str) -> bool:
        """Let workers claim the queue's jobs again, and wake them. False if it was not paused."""
        self.check_known_queue(queue_name, "resume")
        resumed = self.backend.resume_queue(queue_name)
        self._wake_own_workers()
        return resumed

    def paused_queues(self) -> list[str]:
        return list(self.backend.paused_queues())

    def check_known_queue(self, queue_name: str, verb: str, *, force_option: str = "force=True") -> None:
        """Refuse to `verb` ("pause", "resume", "limit") a queue that no task or job of this app
        uses, most likely a typo; pause(force=True) and `leased limit --force` skip this check,
        while nothing can resume such a queue, since it was never paused. (app.limit() does not
        check: it is called at start-up, before the tasks of a queue may be registered.)
        `force_option` is how the caller's user skips the check: force=True in Python, --force on
        the command line."""
        check_queue_name(queue_name)
        known = self.known_queue_names()
        if queue_name not in known:
            listed = ", ".join(sorted(known)) or "none yet"
            fix = ("so it is not paused" if verb == "resume"
                   else f"to {verb} it before its first job, use {force_option}")
            raise ConfigurationError(f"unknown queue {queue_name!r}{did_you_mean(queue_name, known)}: no task or job "
                                     f"uses it (known queues: {listed}); {fix}")

    def throughput(self, window: timedelta = timedelta(hours=1), *, by_task: bool = True) -> list[Throughput]:
        """Done and failed jobs per minute, queue and task over `window`, pruned jobs included; with
        by_task=False, per minute alone (queue_name and task_name None), as the dashboard draws it."""
        return self.backend.throughput(window.total_seconds(), by_task)

    def prune(self, *, older_than: timedelta | float | str | None = None, dry_run: bool = False) -> dict[str, int]:
        """Delete finished jobs past their retention now (or every finished job older than
        `older_than`), with their attempts; returns how many per status (with `dry_run`: would)."""
        age = None if older_than is None else period(older_than, "older_than")
        rules = self._prune_rules() if age is None else older_than_rules(age.total_seconds())
        if dry_run:
            return count_prunable(self.backend, rules)
        deleted = prune(self.backend, rules)
        if deleted is None:
            raise InvalidTransition("another process is pruning this database now; try again when it is done")
        return deleted

    def _prune_rules(self) -> list[PruneRule]:
        by_task = {name: task.retention for name, task in self.tasks.items() if task.retention}
        return prune_rules(self.retention, by_task)


def _job_status(value: JobStatus | str) -> JobStatus:
    try:
        return JobStatus(value)
    except ValueError:
        choices = ", ".join(s.value for s in JobStatus)
        raise ConfigurationError(f"invalid status {value!r}; use one of {choices}") from None


def _is_sqlalchemy(connection: Any) -> bool:
    """A SQLAlchemy object (Session, Connection, ...), found without importing sqlalchemy."""
    return connection is not None and type(connection).__module__.startswith("sqlalchemy.")


def _zeros() -> dict[str, int]:
    return {status.value: 0 for status in JobStatus}


def _migrate(backend: Backend, callers_connection: Any, tries: int = 3) -> None:
    """Migrate; a connection that dies under it (a restart, a killed session) gets two more tries,
    paced as the worker paces its own (the one retry policy, engine/retrying.py). A lock that
    stayed held does not: the wait for it was the busy timeout already."""
    for attempt in range(1, tries + 1):
        try:
            backend.migrate(callers_connection)
            return
        except Exception as error:
            if attempt == tries or not isinstance(error, DatabaseUnavailable) or isinstance(error, DatabaseLocked):
                backend.close()
                raise
            time.sleep(retry_delay(attempt))
