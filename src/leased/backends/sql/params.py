"""Values to the parameters of the named queries, shared by the SQL backends: lists go as JSON
arrays (SQLite's json_each, MariaDB's JSON_TABLE); PostgreSQL passes arrays of its own where a
query takes them."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping, Sequence

from leased.backends.ports import AttemptEnd, JobFilter, PruneRule, WorkerRecord
from leased.jobs import Lease, Outcome, worker_died_error, worker_gone_error, worker_stalled_error
from leased.limits import QueueLimit


CANCELLED_BY_A_USER = "cancelled by a user"


def running_records(rows: Sequence[Mapping[str, Any]], outcome: Outcome | None, message: str | None = None) -> str:
    """record_attempts' :ends for the running attempts of these job rows (id, attempt, lease_owner):
    how an expired lease's or a cancelled job's attempt ended, as `outcome` with `message`, or each
    with the row's own (an expired lease's outcome says whether its worker is gone)."""
    return json.dumps([[row["id"], row["attempt"], row["lease_owner"],
                        row["outcome"] if outcome is None else outcome.value,
                        None, row["message"] if message is None else message, None] for row in rows])


def expired_leases(rows: list[Mapping[str, Any]], silent_after: float, buried: tuple[str, str] | None = None
                   ) -> list[dict[str, Any]]:
    """expired_ids' rows with how each attempt ended: `crashed` if its worker is gone (its process
    died), else `expired`; and `last_attempt`, whether the reclaim fails the job (out of attempts,
    or quarantined by this crash, its max_crashes-th). `buried`: (worker id prefix, how they died)
    of workers a supervisor saw die (bury_workers), whose crashes say how."""
    expired = []
    for row in rows:
        owner = row["lease_owner"]
        # A buried worker is dead even if it died before its first beat wrote its row.
        seen_dying = buried is not None and owner.startswith(buried[0])
        gone = seen_dying or bool(row["gone"])
        if buried is not None and seen_dying:
            message = worker_died_error(owner, buried[1])
        else:
            message = worker_gone_error(owner, silent_after) if gone else worker_stalled_error(owner)
        expired.append({**row, "outcome": (Outcome.CRASHED if gone else Outcome.EXPIRED).value, "message": message,
                        "last_attempt": row["attempt"] >= row["max_attempts"]
                        or gone and row["crashes"] + 1 >= row["max_crashes"]})
    return expired


def ends_json(ends: Sequence[AttemptEnd]) -> tuple[str, str]:
    """record_attempts' and finish's :ends for these attempts' ends, in one pass over them (it is
    per job on a drain's hot path; the statuses and outcomes are str enums, which JSON writes as
    their values)."""
    records, finishes = [], []
    for end in ends:
        lease = end.lease
        job_id, attempt, worker_id = lease.job_id, lease.attempt, lease.worker_id
        records.append([job_id, attempt, worker_id, end.outcome, end.error_type, end.error_message, end.traceback,
                        end.progress_json, int(end.handler_outlived_limit), end.trace_context])
        finishes.append([job_id, attempt, worker_id, end.job_status, end.result_json, end.last_error,
                         end.retry_in_seconds or 0.0, end.progress_json, end.outcome])
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


def expired_failures(expired: Sequence[Mapping[str, Any]]) -> str | None:
    """count_finished's :counts for expired leases (rows of id, lease_owner, queue_name, task_name,
    last_attempt) that the reclaim failed, out of attempts: each counted in its worker's rows."""
    return finished_counts((row["queue_name"], row["task_name"], row["lease_owner"], "failed")
                           for row in expired if row["last_attempt"])


def worker_params(worker: WorkerRecord) -> dict[str, Any]:
    return {"id": worker.id, "host": worker.host, "pid": worker.pid, "concurrency": worker.concurrency,
            "queues": None if worker.queues is None else json.dumps(list(worker.queues)),
            "tasks": json.dumps(list(worker.tasks)), "wake_port": worker.wake_port,
            "stuck_handlers": worker.stuck_handlers, "children": worker.children,
            "task_signatures": worker.task_signatures}


def filter_params(where: JobFilter) -> dict[str, Any]:
    return {"status": where.status and where.status.value, "queue_name": where.queue_name,
            "task_name": where.task_name, "search": where.search, "search_id": where.search_id,
            "before_id": where.before_id, "after_id": where.after_id, "limit": where.limit,
            "worker_id": where.worker_id}


def queue_limit_params(limit: QueueLimit) -> dict[str, Any]:
    rate = limit.rate_limit
    return {"queue_name": limit.queue_name, "concurrency": limit.concurrency,
            "rate_count": rate and rate.count, "rate_seconds": rate and rate.seconds}


def progress_json(progress: Mapping[Lease, str]) -> str:
    """record_progress's :progress, [[job_id, attempt, progress], ...] in job id order (the order
    renew locks the rows in)."""
    return json.dumps(sorted([lease.job_id, lease.attempt, report] for lease, report in progress.items()))


def leases_json(leases: Sequence[Lease]) -> str:
    """The leases as [[job_id, attempt], ...]: with their one worker_id, what renew, release and
    the fenced reads match on. In job id order, which is the order the rows are locked in: a
    worker's lease keeper renewing while its completer finishes lock theirs in one order, and
    never deadlock on each other (they did on MariaDB, each holding a row the other wanted)."""
    return json.dumps(sorted([lease.job_id, lease.attempt] for lease in leases))


def released_records(leases: Sequence[Lease], outcome: Outcome, message: str) -> str:
    """record_attempts' :ends for attempts given up (released), each closed as `outcome` with `message`."""
    return json.dumps([[lease.job_id, lease.attempt, lease.worker_id, outcome.value, None, message, None]
                       for lease in leases])


def rule_params(rule: PruneRule, list_param: Callable[[Sequence[Any]], Any]) -> dict[str, Any]:
    """A pruning rule as count_prunable's and prunable_ids' parameters, lists as the dialect takes them."""
    return {"status": rule.status.value, "older_than": rule.older_than_seconds,
            "task_names": None if rule.task_names is None else list_param(rule.task_names),
            "except_task_names": list_param(rule.except_task_names)}
