"""The storage interface: the only door between the engine and a database.

Internal. Verbs on jobs, one frozen parameter object per call; the engine never sees SQL. Every
backend passes the same behavioural suite in tests/, so a new backend is done when it is green.
Times that decide leases and schedules are taken from the database's clock, never the caller's.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, Sequence

from leased.admin import WorkerInfo
from leased.jobs import Job, JobStatus, Lease, Outcome


@dataclass(frozen=True, slots=True)
class NewJob:
    task_name: str
    queue_name: str
    args_json: str
    kwargs_json: str
    priority: int
    max_attempts: int
    lease_seconds: float
    run_at: datetime | None = None  # an absolute time, or
    delay_seconds: float = 0.0  # seconds after the database's now
    idempotency_key: str | None = None


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
        return int(self.search) if self.search and self.search.isdigit() and len(self.search) < 19 else None


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    id: str
    host: str
    pid: int
    concurrency: int
    queues: tuple[str, ...] | None
    tasks: tuple[str, ...]
    wake_port: int | None = None  # where the worker hears about new jobs, if it listens on a port


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
    """Jobs that finished as done and as failed in one minute, of one task on one queue."""

    minute: datetime
    queue_name: str
    task_name: str
    done: int
    failed: int


class Listener(Protocol):
    def wait(self, timeout: float) -> list[str]:
        """Queue names of jobs that became due; waits at most `timeout` seconds for the first."""

    def close(self) -> None: ...


class Backend(Protocol):
    """Runtime verbs used by workers and producers."""

    transient_errors: tuple[type[BaseException], ...]  # beyond DatabaseUnavailable: errors worth retrying

    def enqueue(self, jobs: Sequence[NewJob], connection: Any = None) -> list[tuple[Job, bool]]:
        """Write pending jobs in one transaction (the caller's, if given; it is never committed here).

        For each: the job, and whether it was created (False: a pending job already held its key).
        """

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: Any) -> list[tuple[Job, bool]]:
        """enqueue() on the caller's async connection, inside the caller's transaction."""

    def claim(self, request: ClaimRequest) -> list[Job]:
        """Atomically lease up to `limit` due jobs, counting the attempt and opening its history record.

        With `reclaim_expired`, does what reclaim_expired() does first: an idle worker's poll is
        then one transaction, not two."""

    def renew(self, leases: Sequence[Lease]) -> set[Lease]:
        """Extend every given lease in one statement; returns those still held."""

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        """Record attempts' ends in one transaction, each fenced on its lease.

        One flag per end: False when that lease was lost, and nothing was written for it.
        """

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str) -> None:
        """Give up attempts: each job still held goes back to pending at once, and each attempt's
        record is closed as `outcome` unless something (expiry, a user's cancel) closed it first."""

    def reclaim_expired(self) -> int:
        """Return jobs whose lease expired to the pool (or fail them, out of attempts)."""

    def listener(self) -> Listener | None:
        """A source of wake-ups (queue names of jobs that became due), or None: poll only."""

    # Inspection and administration.
    def get_job(self, job_id: int) -> Job | None: ...

    def list_jobs(self, where: JobFilter) -> list[Job]: ...

    def counts(self) -> dict[tuple[str, JobStatus], int]: ...

    def oldest_due(self) -> dict[str, float]:
        """Per queue: seconds the oldest due pending job has waited."""

    def finished_since(self, window_seconds: float) -> dict[tuple[str, JobStatus], int]:
        """Per queue: jobs done and failed within the last `window_seconds`."""

    def task_names(self) -> list[str]:
        """The task names that occur in the table."""

    def queue_names(self) -> list[str]: ...

    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int: ...

    # Workers announce themselves for inspection; nothing in the queue's correctness depends on it.
    def register_worker(self, worker: WorkerRecord) -> None:
        """Insert or refresh the worker's row (its heartbeat), and forget workers silent for a day."""

    def unregister_worker(self, worker_id: str) -> None: ...

    def list_workers(self, silent_after: float) -> list[WorkerInfo]: ...

    def retry(self, job_id: int) -> Job: ...

    def cancel(self, job_id: int) -> Job: ...

    # Pausing queues: a paused queue's jobs are not claimed; pause and resume report whether they
    # changed anything, and resume wakes the workers.
    def pause_queue(self, queue_name: str) -> bool: ...

    def resume_queue(self, queue_name: str) -> bool: ...

    def paused_queues(self) -> dict[str, float]:
        """Paused queues, with how many seconds each has been paused."""

    # Pruning: only finished rows are read or deleted, in short transactions.
    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        """Delete up to `limit` of the rule's jobs with their attempts, in one transaction that also
        adds their done and failed counts to the per-minute rollup. Returns how many went."""

    def count_prunable(self, rule: PruneRule) -> int: ...

    def prune_throughput(self, older_than_seconds: float) -> int:
        """Forget the rollup's minutes older than this."""

    def pruning(self) -> AbstractContextManager[bool]:
        """Enter to prune: True if this process may (on PostgreSQL, no other pruner holds the lock)."""

    def throughput(self, window_seconds: float) -> list[Throughput]:
        """Done and failed per minute, queue and task, pruned jobs included, oldest minute first."""

    # Schema.
    def migrate(self) -> list[int]:
        """Apply pending migrations; safe when several processes call it at once. Returns versions applied."""

    def migration_sql(self) -> str: ...

    def close(self) -> None: ...
