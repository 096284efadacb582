"""What the checks share: a job to write, a claim, an end, a read that must find its job."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Iterable

from leased.backends.ports import AttemptEnd, Backend, ClaimRequest, WorkerRecord
from leased.jobs import ClaimedJob, Job, Lease, NewJob, Outcome

TASKS = ("a", "b")


def new_job(task_name: str = "a", *, queue_name: str = "default", priority: int = 0, max_attempts: int = 3,
            lease_seconds: float = 30.0, delay_seconds: float = 0.0, run_at: datetime | None = None,
            idempotency_key: str | None = None, args_json: str = "[]", max_crashes: int = 2) -> NewJob:
    return NewJob(task_name, queue_name, args_json, "{}", priority, max_attempts, lease_seconds, run_at=run_at,
                  delay_seconds=delay_seconds, idempotency_key=idempotency_key, max_crashes=max_crashes)


def enqueue(backend: Backend, *jobs: NewJob) -> list[Job]:
    return [job for job, _ in backend.enqueue(list(jobs) or [new_job()])]


def claim(backend: Backend, worker_id: str = "w1", *, limit: int = 10, tasks: tuple[str, ...] = TASKS,
          queues: tuple[str, ...] | None = None, reclaim_expired: bool = False) -> list[ClaimedJob]:
    return backend.claim(ClaimRequest(worker_id, tasks, queues, limit, reclaim_expired))


def done(lease: Lease, result_json: str = "null") -> AttemptEnd:
    return AttemptEnd(lease, Outcome.DONE, result_json=result_json)


def error(lease: Lease, retry_in_seconds: float | None) -> AttemptEnd:
    return AttemptEnd(lease, Outcome.ERROR, error_type="ValueError", error_message="kaboom",
                      traceback="Traceback ...\nValueError: kaboom", retry_in_seconds=retry_in_seconds)


def job(backend: Backend, job_id: int) -> Job:
    found = backend.get_job(job_id)
    assert found is not None, f"job {job_id} is gone"
    return found


def register(backend: Backend, worker_id: str, *, host: str = "host-1", wake_port: int | None = None) -> None:
    backend.register_worker(WorkerRecord(worker_id, host, 4242, 8, None, TASKS, wake_port=wake_port))


def refused(kind: type[Exception], call: Callable[[int], object], job_id: int, rule: str) -> str:
    """The message of the `kind` error that call(job_id) must raise, by `rule`."""
    try:
        call(job_id)
    except kind as raised:
        return str(raised)
    raise AssertionError(rule)


def ids(jobs: Iterable[Job | ClaimedJob]) -> list[int]:
    return [each.id for each in jobs]
