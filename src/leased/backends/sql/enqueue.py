"""The enqueue algorithm, written once for every backend and both paths (sync and async).

Each backend's insert_jobs query takes the batch as one JSON array of jobs and returns
(id, run_after, created_at, idempotency_key, ...) for each row it inserted; a job whose key a
pending job already holds is skipped. What else a new job holds, the caller already knows.

The algorithm does no I/O: `enqueue_steps` yields what it needs from the database (an insert, or
the pending job that holds a key) and is sent the answer. `drive` answers with a blocking
connection, `drive_async` with an awaitable one, so neither path is a hand-written twin.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from operator import itemgetter
from typing import Any, Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence

from leased.jobs import Job, JobDraft, JobStatus, NewJob

ToTime = Callable[[Any], Any]

# Jobs per insert statement: a larger batch goes in several, so that no statement's JSON nears
# what a database takes in one value (PostgreSQL's jsonb stops at 256 MB).
INSERT_BATCH = 5_000


@dataclass(frozen=True, slots=True)
class InsertJobs:
    """Insert these jobs (no key twice); answer: for each, the Job created, or None (key held)."""

    jobs: Sequence[NewJob]


@dataclass(frozen=True, slots=True)
class FindHolder:
    """Answer: the pending job that holds this idempotency key, or None."""

    idempotency_key: str


Step = InsertJobs | FindHolder
Steps = Generator[Step, Any, list[tuple[Job, bool]]]


def enqueue_steps(jobs: Sequence[NewJob]) -> Steps:
    """Backend.enqueue's algorithm: for each job, the job and whether this call created it."""
    sent = first_of_each_key(jobs)
    created: list[Job | None] = []
    for part in in_parts(sent):
        created += yield InsertJobs(part)
    found = {}
    for new, job in zip(sent, created):
        if job is None:
            found[new.idempotency_key] = yield from _held_or_inserted(new)
    return enqueue_results(jobs, created, found)


def _held_or_inserted(new: NewJob) -> Generator[Step, Any, tuple[Job, bool]]:
    # A pending job holds the key. If a worker claims it before we read it (a database where the
    # insert does not hold a lock that keeps claims out), the key is free again and the next
    # insert succeeds.
    while True:
        holder = yield FindHolder(new.idempotency_key)
        if holder is not None:
            return holder, False
        (job,) = yield InsertJobs([new])
        if job is not None:
            return job, True


def drive(steps: Steps, answer: Callable[[Step], Any]) -> list[tuple[Job, bool]]:
    try:
        step = next(steps)
        while True:
            step = steps.send(answer(step))
    except StopIteration as done:
        return done.value


async def drive_async(steps: Steps, answer: Callable[[Step], Awaitable[Any]]) -> list[tuple[Job, bool]]:
    try:
        step = next(steps)
        while True:
            step = steps.send(await answer(step))
    except StopIteration as done:
        return done.value


def needs_no_transaction(jobs: Sequence[NewJob]) -> bool:
    """Whether enqueueing `jobs` on a connection of ours may run in autocommit: when its insert is
    one statement (an atomic batch), and what may follow it (finding a key's holder, inserting
    again if that holder was claimed meanwhile) concerns one job, which is written once or not at
    all. A batch with keys, or larger than one statement, takes one transaction: all or none."""
    if len(jobs) == 1:
        return True
    return len(jobs) <= INSERT_BATCH and all(job.idempotency_key is None for job in jobs)


def due_queue_names(jobs: Sequence[NewJob], results: Sequence[tuple[Job, bool]], now: datetime) -> set[str]:
    """Queues that got a new job due at `now`: after the commit, their workers are worth waking."""
    return {job.queue_name for job, (_, created) in zip(jobs, results)
            if created and job.delay_seconds <= 0 and (job.run_at is None or job.run_at <= now)}


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


def insert_statement(queries: Mapping[str, str], jobs: Sequence[NewJob], run_at: Callable[[datetime], Any]
                     ) -> tuple[str, dict[str, Any]]:
    """The insert for `jobs` and its parameters: insert_job for one (its fields as parameters, no
    batch to build, none for the database to parse), insert_jobs for more. Both return the columns
    created_jobs reads; `run_at` gives an absolute time in a form the query reads."""
    if len(jobs) > 1:
        return queries["insert_jobs"], {"jobs": jobs_json(jobs, run_at)}
    job = jobs[0]
    params = job._asdict()
    if job.run_at is not None:
        params["run_at"] = run_at(job.run_at)
    return queries["insert_job"], params


def jobs_json(jobs: Sequence[NewJob], run_at: Callable[[datetime], Any]) -> str:
    """insert_jobs' parameter: each job as the array of its fields, which NewJob keeps in the order
    the query reads them (a named tuple is written as an array: no list to build per job); `run_at`
    gives an absolute time in a form the query reads."""
    return json.dumps([job if job.run_at is None else job._replace(run_at=run_at(job.run_at)) for job in jobs])


def created_jobs(jobs: Sequence[NewJob], rows: Iterable[Sequence[Any]], to_time: ToTime) -> list[Job | None]:
    """The jobs insert_jobs created from `jobs` (no key twice), None where a pending job held the key.

    A row with a key is that key's job. Rows without one go to the jobs without one in id order:
    insert_jobs assigns ids in the batch's order (see queries.sql), whatever order it returns them in.
    """
    if not jobs:
        return []
    keyed, keyless = {}, []
    for row in sorted(rows, key=itemgetter(0)):
        if row[3] is None:
            keyless.append(row)
        else:
            keyed[row[3]] = row
    keyless_rows = iter(keyless)
    times: dict[Any, datetime] = {}  # a batch's rows mostly share their times: convert each once
    # One loads() for the batch, arguments and keywords: for documents this small, each call's
    # overhead outweighs the parsing.
    decoded = json.loads(f"[{','.join(job.args_json for job in jobs)},{','.join(job.kwargs_json for job in jobs)}]")
    args, kwargs = decoded[:len(jobs)], decoded[len(jobs):]
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
        created.append(_created_job(
            id=row[0], task_name=job.task_name, queue_name=job.queue_name, args=job_args, kwargs=job_kwargs,
            priority=job.priority, max_attempts=job.max_attempts, lease_seconds=job.lease_seconds,
            run_after=times[run_after], created_at=times[created_at], idempotency_key=job.idempotency_key,
            timeout_seconds=job.timeout_seconds, concurrency_key=job.concurrency_key, status=job.status,
            workflow_id=job.workflow_id, isolation=job.isolation, max_crashes=job.max_crashes,
            fairness_key=job.fairness_key))
    return created


def _created_job(id: int, task_name: str, queue_name: str, args: list[Any], kwargs: dict[str, Any], priority: int,
                 max_attempts: int, lease_seconds: float, run_after: datetime, created_at: datetime,
                 idempotency_key: str | None, timeout_seconds: float | None, concurrency_key: str | None,
                 status: str, workflow_id: int | None, isolation: str | None, max_crashes: int,
                 fairness_key: str | None) -> Job:
    """A job as an enqueue wrote it. Built as a JobDraft (see there), and with positional
    arguments: a class called with keywords collects them in a dict first, which costs as much
    as the rest of building it. In the order of Job's fields."""
    return JobDraft(id, task_name, queue_name, _STATUSES[status], args, kwargs, priority, 0, max_attempts,
                    lease_seconds, run_after, created_at, None, None, idempotency_key, None, None, None,
                    timeout_seconds, (), concurrency_key, workflow_id, None, isolation, 0, max_crashes, True, None,
                    fairness_key).job()


_STATUSES = {status.value: status for status in (JobStatus.PENDING, JobStatus.WAITING)}


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
