"""Rows to values, shared by the backends: each passes how its driver returns times and JSON.
(Values to parameters are leased.backends.sql.params.)"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from leased.admin import ChildrenSummary, WorkerInfo
from leased.jobs import Attempt, ClaimedJob, Job, JobStatus, Outcome, Progress, with_running_attempt
from leased.limits import QueueLimit, Rate

ToTime = Callable[[Any], Any]


def job_from_row(row: Mapping[str, Any], to_time: ToTime, from_json: Callable[[Any], Any],
                 history: tuple[Attempt, ...] = ()) -> Job:
    return Job(
        id=row["id"],
        task_name=row["task_name"],
        queue_name=row["queue_name"],
        status=JobStatus(row["status"]),
        args=_readable(from_json, row["args"]),
        kwargs=_readable(from_json, row["kwargs"]),
        priority=row["priority"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        lease_seconds=row["lease_seconds"],
        run_after=to_time(row["run_after"]),
        created_at=to_time(row["created_at"]),
        finished_at=to_time(row["finished_at"]),
        last_error=row["last_error"],
        idempotency_key=row["idempotency_key"],
        result=_readable(from_json, row["result"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=to_time(row["lease_expires_at"]),
        timeout_seconds=row["timeout_seconds"],
        history=history,
        concurrency_key=row["concurrency_key"],
        workflow_id=row["workflow_id"],
        progress=Progress.from_json(row["progress"]),
        isolation=row["isolation"],
        crashes=row["crashes"],
        max_crashes=row["max_crashes"],
        trace_context=row["trace_context"],
        fairness_key=row["fairness_key"],
    )


def _readable(from_json: Callable[[Any], Any], value: Any) -> Any:
    """A stored JSON value, or, where another program stored one that cannot be read back, a text
    saying so: the job is still listed and shown (its run fails with the same reason)."""
    try:
        return from_json(value)
    except (ValueError, TypeError, RecursionError) as error:
        return f"<unreadable: {type(error).__name__}: {str(error)[:200]}>"


def claimed_from_rows(rows: list[Mapping[str, Any]], to_time: ToTime, from_json: Callable[[Any], Any]
                      ) -> list[ClaimedJob]:
    """Claimed rows, in claim order (priority, then due time, then id), as the worker runs them."""
    rows.sort(key=lambda row: (-row["priority"], row["run_after"], row["id"]))
    return [_claimed(row, to_time, from_json) for row in rows]


def _claimed(row: Mapping[str, Any], to_time: ToTime, from_json: Callable[[Any], Any]) -> ClaimedJob:
    """One claimed row. Arguments that cannot be read (nested past the decoder's depth, not JSON:
    a row another program wrote) are that job's failure, said when it runs (ClaimedJob.unreadable),
    not the claim's: raised here they stopped the worker and held the jobs claimed with it."""
    unreadable = None
    try:
        args, kwargs = from_json(row["args"]), from_json(row["kwargs"])
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError(f"args must be a JSON array and kwargs an object, got {type(args).__name__} and "
                             f"{type(kwargs).__name__}")
    except (ValueError, TypeError, RecursionError) as error:
        args, kwargs = [], {}
        unreadable = f"the job's stored arguments cannot be read: {type(error).__name__}: {str(error)[:200]}"
    return ClaimedJob(row, args, kwargs, lambda: job_from_row(row, to_time, from_json), unreadable)


def history_from_rows(job: Mapping[str, Any], attempts: list[Mapping[str, Any]], to_time: ToTime
                      ) -> tuple[Attempt, ...]:
    """A job's history: its attempts' records, and its running attempt from the job row."""
    return with_running_attempt(tuple(attempt_from_row(row, to_time) for row in attempts), job["status"],
                                job["attempt"], job["lease_owner"], to_time(job["attempt_started_at"]),
                                Progress.from_json(job["progress"]))


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
        progress=Progress.from_json(row["progress"]),
        handler_outlived_limit=None if row["handler_outlived_limit"] is None else bool(row["handler_outlived_limit"]),
    )


def worker_from_row(row: Mapping[str, Any], to_time: ToTime, from_json: Callable[[Any], Any],
                    silent_after: float) -> WorkerInfo:
    return WorkerInfo(
        id=row["id"], host=row["host"], pid=row["pid"], started_at=to_time(row["started_at"]),
        last_seen_at=to_time(row["last_seen_at"]), concurrency=row["concurrency"],
        queues=from_json(row["queues"]), tasks=from_json(row["tasks"]), running=row["running"],
        alive=row["silent_seconds"] < silent_after, stuck_handlers=row["stuck_handlers"],
        children=ChildrenSummary.from_json(row["children"]),
    )


def queue_limit_from_row(row: Mapping[str, Any]) -> QueueLimit:
    rate = None if row["rate_count"] is None else Rate(row["rate_count"], row["rate_seconds"])
    return QueueLimit(row["queue_name"], row["concurrency"], rate)
