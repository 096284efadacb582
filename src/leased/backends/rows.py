"""Rows to values, shared by the backends: each passes how its driver returns times and JSON."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping, Sequence

from leased.admin import WorkerInfo
from leased.backends.ports import AttemptEnd, JobFilter, WorkerRecord
from leased.jobs import Attempt, ClaimedJob, Job, JobStatus, Outcome, with_running_attempt
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


def claimed_from_rows(rows: list[Mapping[str, Any]], to_time: ToTime, from_json: Callable[[Any], Any]
                      ) -> list[ClaimedJob]:
    """Claimed rows, in claim order (priority, then due time, then id), as the worker runs them."""
    rows.sort(key=lambda row: (-row["priority"], row["run_after"], row["id"]))
    return [ClaimedJob(row, from_json(row["args"]), from_json(row["kwargs"]),
                       lambda row=row: job_from_row(row, to_time, from_json)) for row in rows]


def history_from_rows(job: Mapping[str, Any], attempts: list[Mapping[str, Any]], to_time: ToTime
                      ) -> tuple[Attempt, ...]:
    """A job's history: its attempts' records, and its running attempt from the job row."""
    return with_running_attempt(tuple(attempt_from_row(row, to_time) for row in attempts), job["status"],
                                job["attempt"], job["lease_owner"], to_time(job["attempt_started_at"]))


CANCELLED_BY_A_USER = "cancelled by a user"


def running_records(rows: list[Mapping[str, Any]], outcome: Outcome, message: str | None = None) -> str:
    """record_attempts' :ends for the running attempts of these job rows (id, attempt, lease_owner):
    how an expired lease's or a cancelled job's attempt ended, with `message` or the row's own."""
    return json.dumps([[row["id"], row["attempt"], row["lease_owner"], outcome.value, None,
                        row["message"] if message is None else message, None] for row in rows])


def ends_json(ends: Sequence[AttemptEnd]) -> tuple[str, str]:
    """record_attempts' and finish's :ends for these attempts' ends, in one pass over them (it is
    per job on a drain's hot path; the statuses and outcomes are str enums, which JSON writes as
    their values)."""
    records, finishes = [], []
    for end in ends:
        lease = end.lease
        job_id, attempt, worker_id = lease.job_id, lease.attempt, lease.worker_id
        records.append([job_id, attempt, worker_id, end.outcome, end.error_type, end.error_message, end.traceback])
        finishes.append([job_id, attempt, worker_id, end.job_status, end.result_json, end.last_error,
                         end.retry_in_seconds or 0.0])
    return json.dumps(records), json.dumps(finishes)


def finished_counts(finished: Iterable[tuple[str, str, str, str]]) -> str | None:
    """count_finished's :counts for the jobs that ended, each (queue_name, task_name, worker_id,
    status): [queue_name, task_name, worker_id, done, failed] per key, in key order (so that two
    transactions lock count rows in the same order); None if none finished (a retry is no finish)."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for queue_name, task_name, worker_id, status in finished:
        if status == "done" or status == "failed":
            counts.setdefault((queue_name, task_name, worker_id), [0, 0])[status == "failed"] += 1
    return json.dumps([[*key, *count] for key, count in sorted(counts.items())]) if counts else None


def expired_failures(expired: list[Mapping[str, Any]]) -> str | None:
    """count_finished's :counts for expired leases (rows of id, lease_owner, queue_name, task_name,
    last_attempt) that the reclaim failed, out of attempts: each counted in its worker's rows."""
    return finished_counts((row["queue_name"], row["task_name"], row["lease_owner"], "failed")
                           for row in expired if row["last_attempt"])


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


def queue_limit_params(limit: QueueLimit) -> dict[str, Any]:
    rate = limit.rate_limit
    return {"queue_name": limit.queue_name, "concurrency": limit.concurrency,
            "rate_count": rate and rate.count, "rate_seconds": rate and rate.seconds}


def queue_limit_from_row(row: Mapping[str, Any]) -> QueueLimit:
    rate = None if row["rate_count"] is None else Rate(row["rate_count"], row["rate_seconds"])
    return QueueLimit(row["queue_name"], row["concurrency"], rate)
