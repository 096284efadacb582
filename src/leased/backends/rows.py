"""Rows to values, shared by the backends: each passes how its driver returns times and JSON."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from operator import itemgetter
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from leased.admin import WorkerInfo
from leased.backends.base import JobFilter, NewJob, WorkerRecord
from leased.jobs import Attempt, Job, JobStatus, Outcome
from leased.limits import QueueLimit, Rate

ToTime = Callable[[Any], Any]


def job_from_row(row: Mapping[str, Any], to_time: ToTime, from_json: Callable[[Any], Any],
                 history: tuple[Attempt, ...] = ()) -> Job:
    return Job(
        id=row["id"],
        task_name=row["task_name"],
        queue_name=row["queue_name"],
        status=JobStatus(row["status"]),
        args=from_json(row["args"]),
        kwargs=from_json(row["kwargs"]),
        priority=row["priority"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        lease_seconds=row["lease_seconds"],
        run_after=to_time(row["run_after"]),
        created_at=to_time(row["created_at"]),
        finished_at=to_time(row["finished_at"]),
        last_error=row["last_error"],
        idempotency_key=row["idempotency_key"],
        result=from_json(row["result"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=to_time(row["lease_expires_at"]),
        timeout_seconds=row["timeout_seconds"],
        history=history,
        concurrency_key=row["concurrency_key"],
    )


def attempt_from_row(row: Mapping[str, Any], to_time: ToTime) -> Attempt:
    return Attempt(
        number=row["attempt"],
        worker_id=row["worker_id"],
        started_at=to_time(row["started_at"]),
        finished_at=to_time(row["finished_at"]),
        outcome=Outcome(row["outcome"]) if row["outcome"] else None,
        error_type=row["error_type"],
        error_message=row["error_message"],
        traceback=row["traceback"],
    )


def worker_from_row(row: Mapping[str, Any], to_time: ToTime, from_json: Callable[[Any], Any],
                    silent_after: float) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"], host=row["host"], pid=row["pid"], started_at=to_time(row["started_at"]),
        last_seen_at=to_time(row["last_seen_at"]), concurrency=row["concurrency"],
        queues=from_json(row["queues"]), tasks=from_json(row["tasks"]), running=row["running"],
        alive=row["silent_seconds"] < silent_after, stuck_handlers=row["stuck_handlers"],
    )


def worker_params(worker: WorkerRecord) -> dict[str, Any]:
    return {"id": worker.id, "host": worker.host, "pid": worker.pid, "concurrency": worker.concurrency,
            "queues": None if worker.queues is None else json.dumps(list(worker.queues)),
            "tasks": json.dumps(list(worker.tasks)), "wake_port": worker.wake_port,
            "stuck_handlers": worker.stuck_handlers}


def filter_params(where: JobFilter) -> dict[str, Any]:
    return {"status": where.status and where.status.value, "queue_name": where.queue_name,
            "task_name": where.task_name, "search": where.search, "search_id": where.search_id,
            "before_id": where.before_id, "after_id": where.after_id, "limit": where.limit}


# Enqueueing a batch. Each backend's insert_jobs query takes the batch as one JSON array of jobs
# and returns (id, run_after, created_at, idempotency_key, ...) for each row it inserted; a job whose
# key a pending job already holds is skipped. What else a new job holds, the caller already knows.

# Jobs per insert statement: a larger batch goes in several, so that no statement's JSON nears
# what a database takes in one value (PostgreSQL's jsonb stops at 256 MB).
INSERT_BATCH = 5_000


def in_parts(jobs: Sequence[NewJob]) -> Iterator[Sequence[NewJob]]:
    for start in range(0, len(jobs), INSERT_BATCH):
        yield jobs[start:start + INSERT_BATCH]


def first_of_each_key(jobs: Sequence[NewJob]) -> list[NewJob]:
    """The jobs to insert: those without a key, and the first with each key (the later ones get
    its job, as their own insert would find it pending)."""
    seen: set[str] = set()
    first = []
    for job in jobs:
        key = job.idempotency_key
        if key is None or key not in seen:
            if key is not None:
                seen.add(key)
            first.append(job)
    return first


def jobs_json(jobs: Sequence[NewJob], run_at: Callable[[datetime], Any]) -> str:
    """insert_jobs' parameter; `run_at` gives an absolute time in a form the query reads."""
    return json.dumps([
        [job.task_name, job.queue_name, job.args_json, job.kwargs_json, job.priority, job.max_attempts,
         job.lease_seconds, None if job.run_at is None else run_at(job.run_at), job.delay_seconds,
         job.idempotency_key, job.timeout_seconds, job.concurrency_key, job.key_concurrency,
         job.key_rate_count, job.key_rate_seconds]
        for job in jobs])


def created_jobs(jobs: Sequence[NewJob], rows: Iterable[Sequence[Any]], to_time: ToTime) -> list[Job | None]:
    """The jobs insert_jobs created from `jobs` (no key twice), None where a pending job held the key.

    A row with a key is that key's job. Rows without one go to the jobs without one in id order:
    insert_jobs assigns ids in the batch's order (see queries.sql), whatever order it returns them in.
    """
    keyed, keyless = {}, []
    for row in sorted(rows, key=itemgetter(0)):
        if row[3] is None:
            keyless.append(row)
        else:
            keyed[row[3]] = row
    keyless_rows = iter(keyless)
    times: dict[Any, datetime] = {}  # a batch's rows mostly share their times: convert each once
    # One loads() for the batch: for documents this small, each call's overhead outweighs the parsing.
    args = json.loads(f"[{','.join(job.args_json for job in jobs)}]")
    kwargs = json.loads(f"[{','.join(job.kwargs_json for job in jobs)}]")
    created: list[Job | None] = []
    for job, job_args, job_kwargs in zip(jobs, args, kwargs):
        row = next(keyless_rows) if job.idempotency_key is None else keyed.get(job.idempotency_key)
        if row is None:
            created.append(None)
            continue
        run_after, created_at = row[1], row[2]
        if run_after not in times:
            times[run_after] = to_time(run_after)
        if created_at not in times:
            times[created_at] = to_time(created_at)
        created.append(Job(
            id=row[0], task_name=job.task_name, queue_name=job.queue_name, status=JobStatus.PENDING,
            args=job_args, kwargs=job_kwargs, priority=job.priority, attempt=0, max_attempts=job.max_attempts,
            lease_seconds=job.lease_seconds, run_after=times[run_after], created_at=times[created_at],
            idempotency_key=job.idempotency_key, timeout_seconds=job.timeout_seconds, concurrency_key=job.concurrency_key,
            created=True))
    return created


def enqueue_results(jobs: Sequence[NewJob], created: Iterable[Job | None],
                    found: Mapping[str, tuple[Job, bool]]) -> list[tuple[Job, bool]]:
    """Backend.enqueue's answer for `jobs`, given what inserting first_of_each_key(jobs) created
    and, for each key that was held, what the backend found: the holder, or a job inserted later."""
    made = iter(created)
    holders: dict[str, Job] = {}  # each key's job, as a later duplicate in the batch gets it
    results = []
    for new in jobs:
        key = new.idempotency_key
        if key is None:
            results.append((next(made), True))
        elif key in holders:
            results.append((_returned_again(holders[key]), False))
        else:
            job = next(made)
            job, was_created = (job, True) if job is not None else found[key]
            holders[key] = job
            results.append((job, True) if was_created else (_returned_again(job), False))
    return results


def _returned_again(job: Job) -> Job:
    """The job an enqueue found holding its key, marked as not created by that enqueue."""
    return job if job.created is False else replace(job, created=False)


def queue_limit_params(limit: QueueLimit) -> dict[str, Any]:
    rate = limit.rate_limit
    return {"queue_name": limit.queue_name, "concurrency": limit.concurrency,
            "rate_count": rate and rate.count, "rate_seconds": rate and rate.seconds}


def queue_limit_from_row(row: Mapping[str, Any]) -> QueueLimit:
    rate = None if row["rate_count"] is None else Rate(row["rate_count"], row["rate_seconds"])
    return QueueLimit(row["queue_name"], row["concurrency"], rate)
