"""The storage ports: the only doors between the rest of leased and a database.

Internal. Verbs on jobs, one frozen parameter object per call, split by who uses them: the engine
takes the RuntimePort (producer, worker and retention verbs) and nothing else; the CLI, the
dashboard and metrics use the InspectionPort and the AdminPort; migrations go through the
SchemaPort. Nobody outside a backend sees SQL. Every backend passes the same behavioural suite in
tests/, so a new backend is done when it is green. Times that decide leases and schedules are taken
from the database's clock, never the caller's.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping, Protocol, Sequence

from leased.admin import OldTransaction, WorkerInfo
from leased.backends.capabilities import Capabilities
from leased.clock import Clock
from leased.counts import EXACT_UP_TO, SAMPLE_SIZE, JobCounts
from leased.digits import whole_number
from leased.facts import JobFacts
from leased.jobs import ClaimedJob, DurableStep, Job, JobStatus, Lease, NewJob, Outcome
from leased.fairness import QueueFairness
from leased.limits import QueueLimit
from leased.runs import Enqueued, NewStep, NewWorkflow, ParentEnd, WorkflowInfo


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    worker_id: str
    task_names: tuple[str, ...]  # only tasks this worker can run
    queue_names: tuple[str, ...] | None  # None: every queue
    limit: int
    reclaim_expired: bool = False  # first return expired leases to the pool, in the same transaction


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """How the holder of `lease` ended its attempt, and what becomes of the job."""

    lease: Lease
    outcome: Outcome
    result_json: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    retry_in_seconds: float | None = None  # with an error: schedule another attempt; None: the job fails
    # The job's workflow, if it is a step (the engine sets it from the claim): PostgreSQL settles the
    # step's children in the finish's own transaction only when told; untold, it settles them in a
    # second transaction after (not atomic with the end).
    workflow_id: int | None = None
    # How far the attempt got, as its handler last said (leased.jobs.Progress as JSON); None: it did not say.
    progress_json: str | None = None
    # Its time limit ended it while its handler's thread still ran (stuck, holding a slot): recorded
    # with the attempt (leased_attempts.handler_outlived_limit), for `leased why`.
    handler_outlived_limit: bool = False

    @property
    def job_status(self) -> JobStatus:
        if self.outcome is Outcome.DONE:
            return JobStatus.DONE
        return JobStatus.PENDING if self.retry_in_seconds is not None else JobStatus.FAILED

    @property
    def last_error(self) -> str | None:
        return None if self.error_message is None else f"{self.error_type}: {self.error_message}"


@dataclass(frozen=True, slots=True)
class JobFilter:
    status: JobStatus | None = None
    queue_name: str | None = None
    task_name: str | None = None
    search: str | None = None  # an exact job id or idempotency key
    limit: int = 100
    newest_first: bool = True
    before_id: int | None = None  # keyset pagination, newest first
    after_id: int | None = None  # keyset pagination, oldest first

    @property
    def search_id(self) -> int | None:
        return whole_number(self.search)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    id: str
    host: str
    pid: int
    concurrency: int
    queues: tuple[str, ...] | None
    tasks: tuple[str, ...]
    wake_port: int | None = None  # where the worker hears about new jobs, if it listens on a port
    stuck_handlers: int = 0  # handler threads still running past their job's time limit
    children: str | None = None  # its process-isolated handlers' children, as JSON (admin.ChildrenSummary)


# Periodic jobs (see leased/schedules.py): the state of each schedule, and what one run decided.
@dataclass(frozen=True, slots=True)
class TickPlan:
    ticks: tuple[datetime, ...]  # due ticks to enqueue (or skip, if the last run is still going), oldest first
    last_tick: datetime  # every tick up to this one is now handled, run or passed over


class TickSource(Protocol):
    """A schedule as the backend sees it: its plan is computed inside the transaction that writes it."""

    name: str
    expression: str
    timezone: str
    skip_overlap: bool

    def plan(self, last_tick: datetime | None, now: datetime) -> TickPlan: ...

    def new_job(self, tick: datetime) -> NewJob: ...


@dataclass(frozen=True, slots=True)
class ScheduleState:
    name: str
    expression: str
    timezone: str
    last_tick_at: datetime | None
    last_job_id: int | None
    last_job_status: JobStatus | None
    last_success_at: datetime | None  # when the schedule's task last finished done
    skipped_ticks: int  # ticks not run because the previous run was still pending or running
    last_skipped_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class TickOutcome:
    schedule_name: str
    tick_at: datetime
    job: Job | None  # None: skipped, the previous run still pending or running


@dataclass(frozen=True, slots=True)
class PruneRule:
    """Finished jobs of one status that finished over `older_than_seconds` ago: of `task_names`
    only (None: every task) except `except_task_names`."""

    status: JobStatus
    older_than_seconds: float
    task_names: tuple[str, ...] | None = None
    except_task_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Throughput:
    """Jobs that finished as done and as failed in one minute, of one task on one queue (None and
    None: of every task on every queue)."""

    minute: datetime
    queue_name: str | None
    task_name: str | None
    done: int
    failed: int


class Listener(Protocol):
    @property
    def port(self) -> int | None:
        """The loopback UDP port a producer on this host sends wake-ups to, which the worker records
        in its row (backends/sql/wakeups.py); None where a commit itself wakes the listener (NOTIFY)."""

    def wait(self, timeout: float) -> list[str]:
        """Queue names of jobs that became due; waits at most `timeout` seconds for the first."""

    def close(self) -> None: ...


class ProducerPort(Protocol):
    """What a producer needs: write jobs, and tell workers about jobs a caller's commit made due."""

    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[tuple[Job, bool]]:
        """Write pending jobs in one transaction (the caller's, if given; it is never committed here).

        For each: the job, and whether it was created (False: a pending job already held its key).
        """

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[tuple[Job, bool]]:
        """enqueue() on the caller's async connection, inside the caller's transaction."""

    def wake(self, queue_names: Iterable[str]) -> None:
        """Tell workers that `queue_names` have jobs due now, after a commit the backend did not
        make (jobs enqueued on a caller's connection). Does nothing where the commit itself tells
        them (PostgreSQL's NOTIFY)."""

    def nudge(self, queue_names: Iterable[str]) -> None:
        """Tell every live worker this producer reaches to look at `queue_names` now, whether or not
        a commit made jobs due (app.wake_workers: an operator's or a script's nudge). Unlike wake(),
        it sends a wake-up of its own where commits carry them (PostgreSQL: a NOTIFY)."""


class WorkerPort(Protocol):
    """What a worker's loops need: claim, keep, end and give back attempts; announce the worker; run schedules."""

    # False: the worker's claim reclaims expired leases once a second, in its transaction
    # (ClaimRequest.reclaim_expired). True: the worker calls reclaim_expired(skip_if_done_within=...)
    # once a second beside its claims (engine/reclaimer.py), because the reclaim can take longer
    # than claims should wait.
    reclaims_beside_claims: bool

    @property
    def polling_reason(self) -> str | None:
        """Why listener() gives no wake-ups, in a line for the worker's log; None when it gives them."""

    @property
    def where(self) -> str:
        """The database, named for people: SQLite's absolute path, a server's database, host and
        port, never a password. Start lines say it, so a worker on the wrong database shows."""
        ...

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        """Atomically lease up to `limit` due jobs, counting the attempt and noting its start in the job
        row (its history record is written when it ends); they come in claim order (priority, then
        due time, then id).

        With `reclaim_expired`, does what reclaim_expired() does first: an idle worker's poll is
        then one transaction, not two."""

    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]:
        """Extend every given lease in one statement; returns those still held. Waits at most
        `wait_seconds` for a write lock (SQLite), then raises DatabaseLocked. `progress`: the
        latest report (leased.jobs.Progress as JSON) of attempts whose handlers said how far they
        got since the last renewal, written in the same transaction to the jobs still held."""

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        """Record attempts' ends in one transaction, each fenced on its lease, and count the jobs
        that finished (done or failed) in the ending worker's per-minute rows of leased_throughput.

        One flag per end: False when that lease was lost, and nothing was written for it.
        """

    def attempt_transaction(self) -> AbstractContextManager[Any]:
        """For a transactional handler (engine/transactional.py): a connection of the backend's own,
        not one its other verbs use, in a transaction open from the start; committed when the block
        ends, rolled back when it raises. The driver's connection: sqlite3, psycopg, PyMySQL or MySQLdb."""

    def attempt_transaction_async(self) -> AbstractAsyncContextManager[Any]:
        """attempt_transaction() for an async transactional handler, on the running loop: a
        psycopg.AsyncConnection (PostgreSQL only; the others raise ConfigurationError)."""

    async def finish_in_async(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        """finish_in() on attempt_transaction_async()'s connection."""

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: Any) -> bool:
        """record_step() in the transaction on attempt_transaction_async()'s connection."""

    async def close_async(self) -> None:
        """Close what the backend opened on the running loop (the worker's, as it stops)."""

    def serving_worker(self) -> AbstractContextManager[None]:
        """Held while a worker runs in this process. A backend may size what serves the workers'
        own calls by it (leased.backends.worker_calls; PostgreSQL does)."""

    def finish_in(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        """Write one end in the transaction open on `connection` (attempt_transaction()'s, or a
        framework's on this database), fenced on its lease and on the lease's expiry by the
        database's clock now; never committed here. Whether it was written (False: the lease is
        gone; roll back), and the queues of steps its end made due (wake them after the commit)."""

    def record_step(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                    connection: Any = None) -> bool:
        """Record a durable step (engine/durable.py) of the job `lease` holds, fenced as finish_in():
        in a transaction of its own, or in the one open on `connection`. False: the lease is gone."""

    def durable_steps(self, job_id: int) -> list[DurableStep]:
        """The job's recorded durable steps, in the order they ran."""

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False) -> None:
        """Give up attempts: each job still held goes back to pending at once, and each attempt's
        record is closed as `outcome` unless something (expiry, a user's cancel) closed it first.
        With `explains_expiry`, `message` is the worker's account of why it let the lease lapse,
        and replaces the reclaimer's guess on an attempt that expiry closed first."""

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        """Return jobs whose lease expired to the pool (or fail them, out of attempts, counted as
        failed in their expired worker's rows of leased_throughput). With `skip_if_done_within`,
        the backend may do nothing if a reclaim so asked began that many seconds ago or less, by
        the database's clock, on any worker: a fleet's periodic reclaims take turns (PostgreSQL's
        do; elsewhere each reclaims)."""

    def bury_workers(self, id_prefix: str, how: str) -> int:
        """The workers whose ids start with `id_prefix` died (`how`: "killed by SIGKILL"), as their
        supervisor saw: their rows read as gone from now on, and their attempts end at once as
        crashed (each counted towards its job's max_crashes), not a lease later. How many ended."""

    def get_job(self, job_id: int) -> Job | None:
        """The job with its history: the lease keeper reads it to tell a user's cancel from a lease
        that ran out, when a renewal finds a lease gone."""

    def listener(self) -> Listener | None:
        """A source of wake-ups (queue names of jobs that became due), or None: poll only (then
        `polling_reason` says why)."""

    def register_worker(self, worker: WorkerRecord) -> None:
        """Insert or refresh the worker's row (its heartbeat), and forget workers silent for a day.
        Workers announce themselves for inspection; nothing in the queue's correctness depends on it."""

    def unregister_worker(self, worker_id: str) -> None: ...

    def schedule_states(self) -> tuple[datetime, list[ScheduleState]]:
        """The database's now, and every schedule's stored state."""

    def run_schedules(self, sources: Sequence[TickSource]) -> list[TickOutcome]:
        """In one transaction: for each schedule, plan its due ticks against the database's now and
        its stored last tick, and enqueue each tick's job unless a row for (schedule, tick) exists
        already (another worker wrote it). Jobs and tick rows commit together."""


class RetentionPort(Protocol):
    """What the worker's pruner needs: only finished rows are read or deleted, in short transactions."""

    def pruning(self) -> AbstractContextManager[bool]:
        """Enter to prune: True if this process may (on PostgreSQL, no other pruner holds the lock)."""

    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        """Delete up to `limit` of the rule's jobs with their attempts, in one transaction (their
        done and failed counts were kept as they finished). Returns how many went."""

    def count_prunable(self, rule: PruneRule) -> int: ...

    def prune_throughput(self, older_than_seconds: float) -> int:
        """Forget the per-minute counts older than this."""

    def fold_throughput(self, older_than_seconds: float) -> int:
        """Sum the workers' own per-minute count rows older than this into one row per minute,
        queue and task; returns how many rows were folded. The sums read are unchanged."""


class WorkflowPort(Protocol):
    """Workflows (leased.workflows; stored by backends/sql/workflows.py): a run written in one
    transaction, and what running steps need. Every verb that ends a step's job also settles its
    children in its own transaction; these are the rest."""

    def enqueue_workflow(self, workflow: NewWorkflow, connection: Any = None) -> Enqueued: ...

    def add_steps(self, lease: Lease, steps: Sequence[NewStep]) -> dict[str, int]:
        """Add steps to the run of the step `lease` holds (fenced on it); {name: job id}."""

    def parents_of(self, job_id: int) -> list[ParentEnd]: ...

    def step_names(self, workflow_id: int) -> dict[str, int]:
        """Every step of the run: {name: job id}."""


class RuntimePort(ProducerPort, WorkerPort, RetentionPort, WorkflowPort, Protocol):
    """All that the engine sees of storage: a worker and a producer need nothing else."""


class InspectionPort(Protocol):
    """Reads for the CLI, the dashboard, metrics and the Python API; they change nothing."""

    def get_job(self, job_id: int) -> Job | None: ...

    def list_jobs(self, where: JobFilter) -> list[Job]: ...

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        """Every (queue, status), exactly: reads every row."""

    def job_counts(self, exact_up_to: int = EXACT_UP_TO, sample_size: int = SAMPLE_SIZE) -> JobCounts:
        """Exact pending and running, failed and cancelled exact up to `exact_up_to` each, and the rest
        estimated from `sample_size` ids probed by primary key (leased.counts)."""

    def oldest_due(self) -> dict[str, float]:
        """Per queue: seconds the oldest due pending job has waited."""

    def finished_since(self, window_seconds: float) -> dict[tuple[str, JobStatus], int]:
        """Per queue: jobs done and failed since the start of the minute `window_seconds` ago
        (counted as they finished, so pruned jobs included)."""

    def task_names(self) -> list[str]:
        """The task names that occur in the table."""

    def queue_names(self) -> list[str]: ...

    def count_jobs(self, status: JobStatus | None, task_name: str | None, queue_name: str | None) -> int: ...

    def list_workers(self, silent_after: float) -> list[WorkerInfo]: ...

    def recent_quarantined(self, recent: int) -> dict[str, int]:
        """Poison jobs (failed when their crashes reached max_crashes) by queue, among the `recent`
        failed jobs newest by id: one bounded read, whatever the history's size."""

    def paused_queues(self) -> dict[str, float]:
        """Paused queues, with how many seconds each has been paused."""

    def queue_limits(self) -> list[QueueLimit]: ...

    def queue_fairness(self, queue_name: str, keys: int) -> QueueFairness:
        """A queue's fairness weights, and up to `keys` of its waiting keys, least pass (next served) first."""

    def throughput(self, window_seconds: float, by_task: bool = True) -> list[Throughput]:
        """Done and failed per minute, queue and task (without `by_task`, per minute alone), counted
        as jobs finished (pruned jobs included), oldest minute first."""

    def why_facts(self, job_id: int) -> JobFacts | None:
        """What leased.explain needs about one job, in one consistent read with the database's now."""

    def old_transactions(self, older_than_seconds: float) -> tuple[OldTransaction, ...]:
        """Other sessions of the database whose transaction, open longer than this, holds back vacuum."""

    def get_workflow(self, workflow_id: int) -> WorkflowInfo | None:
        """The run with every step, read in one snapshot."""

    def list_workflows(self, limit: int = 50, before_id: int | None = None, name: str | None = None
                       ) -> list[WorkflowInfo]:
        """Runs newest first, each with its steps counted by status (no steps listed)."""


class AdminPort(Protocol):
    """A person's actions on jobs and queues (the CLI, the dashboard, the Python API)."""

    def retry(self, job_id: int) -> Job:
        """A failed or cancelled job back to pending, due now; wakes workers as enqueue does."""

    def cancel(self, job_id: int) -> Job: ...

    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int:
        """Every failed job (of one task, or queue) back to pending, due now; wakes workers as enqueue does."""

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int:
        """Cancel every pending job (of one task, or queue), closing any open attempt record; returns how many."""

    # A paused queue's jobs are not claimed; pause and resume report whether they changed
    # anything, and resume wakes the workers.
    def pause_queue(self, queue_name: str) -> bool: ...

    def resume_queue(self, queue_name: str) -> bool: ...

    def set_queue_limit(self, limit: QueueLimit) -> None:
        """Set a queue's limits, replacing any before; a limit of neither kind removes them."""

    def set_fairness(self, fairness: QueueFairness) -> None:
        """Set a queue's default weight and the weights of the keys it lists, in one transaction."""

    def cancel_workflow(self, workflow_id: int) -> int:
        """Cancel every unfinished step of the run (running ones lose their leases); how many."""

    def retry_workflow(self, workflow_id: int) -> int:
        """Retry every failed step of the run (what their failure cancelled waits again); how many."""


class SchemaPort(Protocol):
    """Creating, checking and printing leased's schema."""

    def migrate(self, callers_connection: Any = None) -> list[int]:
        """Apply pending migrations; safe when several processes call it at once. Returns versions applied.

        Takes no lock when the schema is current. `callers_connection`: the first use is inside the
        caller's transaction on it, which must not be waited on. A schema newer than the code is
        refused with SchemaNotReady."""

    def check_schema(self, callers_connection: Any = None) -> None:
        """Raise SchemaNotReady unless the schema is the one this code runs on (missing, older or
        newer all say so, and what to run). Takes no lock and writes nothing; `callers_connection` as
        for migrate()."""

    def migration_sql(self) -> str: ...


class Backend(RuntimePort, InspectionPort, AdminPort, SchemaPort, Protocol):
    """A whole backend, as leased.backends.connect() opens it for the app: every port, and close().

    Errors: a backend raises leased.errors classes only (TRANSIENT_ERRORS for what is worth another
    try, SchemaNotReady for a schema to migrate), never its driver's."""

    # What this database can do (backends/capabilities.py): asked instead of its name.
    capabilities: Capabilities

    # The clock seam (leased.clock): the offset every one of its sessions adds to the database's
    # now; leased.testing.advance() moves it.
    clock: Clock

    def close(self) -> None: ...
