"""Inspection reads shared by the backends: each runs the same-named query from its own SQL file,
and these turn the rows into values. A backend provides `_rows(name, **params)`, and for reads
that must agree with each other, `_snapshot()` and how its driver returns times and JSON."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from leased.admin import WORKER_SILENT_AFTER, OldTransaction
from leased.backends.ports import PruneRule, Throughput
from leased.backends.sql.dialect import Dialect, ReadRows
from leased.backends.sql.rows import history_from_rows, job_from_row, worker_from_row
from leased.counts import EXACT_UP_TO, SAMPLE_SIZE, JobCounts, sample_ids, tally
from leased.facts import AHEAD_LIMIT, RUNNING_NAMED, FairnessFact, JobFacts, LimitFact, ScheduleTick, StepRow
from leased.jobs import JobStatus
from leased.limits import Rate
from leased.runs import RunWhen

class InspectionReads(Dialect):
    """The reads of the inspection and admin ports, over the dialect's _rows() and _snapshot()."""

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        return {(row["queue_name"], JobStatus(row["status"])): row["n"] for row in self._rows("counts")}

    def job_counts(self, exact_up_to: int = EXACT_UP_TO, sample_size: int = SAMPLE_SIZE) -> JobCounts:
        """Exact pending and running, capped exact failed and cancelled, and estimates for the rest
        (see leased.counts), read in one snapshot: a few index ranges and sample_size key lookups."""
        with self._snapshot() as read_rows:
            span = read_rows("count_id_range")[0]
            if span["low"] is None:
                return JobCounts({})
            low, high = int(span["low"]), int(span["high"])
            probes = sample_ids(low, high, sample_size)
            capped = {row["status"]: row["n"] for row in read_rows("count_capped", cap=exact_up_to + 1)}
            under = {status: capped[status] <= exact_up_to for status in capped}
            return tally(active=read_rows("count_active"), capped=capped,
                         split=read_rows("count_split", failed=under["failed"], cancelled=under["cancelled"]),
                         sampled=read_rows("count_sample", ids=self._list_param(probes)), low=low, high=high,
                         probes=len(probes), exact_up_to=exact_up_to)

    def oldest_due(self) -> dict[str, float]:
        return {row["queue_name"]: row["seconds"] for row in self._rows("oldest_due")}

    def finished_since(self, window_seconds: float) -> dict[tuple[str, JobStatus], int]:
        finished = {}
        for row in self._rows("finished_since", window_seconds=window_seconds):
            for status in (JobStatus.DONE, JobStatus.FAILED):
                if row[status.value]:
                    finished[row["queue_name"], status] = int(row[status.value])
        return finished

    def task_names(self) -> list[str]:
        return [row["name"] for row in self._rows("task_names")]

    def queue_names(self) -> list[str]:
        return [row["name"] for row in self._rows("queue_names")]

    def why_facts(self, job_id: int) -> JobFacts | None:
        """What explain() needs about one job, read in one snapshot with the database's now."""
        with self._snapshot() as read_rows:
            now = read_rows("why_now")[0]["now"]
            found = read_rows("get_job", job_id=job_id)
            if not found:
                return None
            row = found[0]
            history = read_rows("get_history", job_id=job_id)
            workers = read_rows("list_workers")
            ahead, limits, paused, fairness = None, (), None, None
            if row["status"] == JobStatus.PENDING and row["fairness_key"] is not None:
                (share,) = read_rows("why_fairness", queue_name=row["queue_name"], fairness_key=row["fairness_key"],
                                     limit=AHEAD_LIMIT)
                fairness = FairnessFact(row["fairness_key"], **share)
            if row["status"] == JobStatus.PENDING:
                ahead = read_rows("jobs_ahead", job_id=job_id, limit=AHEAD_LIMIT + 1)[0]["n"]
                limits = self._why_limits(read_rows, row)
                paused = read_rows("why_queue_paused", queue_name=row["queue_name"])
            tick = read_rows("why_schedule_tick", task_name=row["task_name"], job_id=job_id)
            step = read_rows("why_step", job_id=job_id) if row["workflow_id"] is not None else []
        to_time, from_json = self._to_time, self._from_json
        job = job_from_row(row, to_time, from_json, history_from_rows(row, history, to_time))
        return JobFacts(job, to_time(now), tuple(worker_from_row(worker, to_time, from_json, WORKER_SILENT_AFTER)
                                                 for worker in workers), ahead,
                        queue_paused_at=to_time(paused[0]["paused_at"]) if paused else None, limits=limits,
                        scheduled_by=ScheduleTick(tick[0]["schedule_name"], to_time(tick[0]["tick_at"])) if tick
                        else None,
                        step=StepRow(RunWhen(step[0]["run_when"]), bool(step[0]["cancelled_by_parents"])) if step
                        else None, fairness=fairness)

    def _why_limits(self, read_rows: ReadRows, job: Any) -> tuple[LimitFact, ...]:
        """The limits of a pending job's key and of its queue, with the running jobs of a full
        concurrency limit and the next slot of a full rate window."""
        key, queue = job["concurrency_key"], job["queue_name"]
        scopes = [("key", key, read_rows("why_key_limit", concurrency_key=key), "why_running_with_key",
                   {"concurrency_key": key})] if key is not None else []
        scopes.append(("queue", queue, read_rows("why_queue_limit", queue_name=queue), "why_running_in_queue",
                       {"queue_name": queue}))
        limits = []
        for scope, name, found, running_query, where in scopes:
            if not found:
                continue
            row = found[0]
            rate = Rate(row["rate_count"], row["rate_seconds"]) if row["rate_count"] is not None else None
            limit = LimitFact(scope, name, row["concurrency"], row["running"], rate, row["starts"])
            if limit.concurrency_full:
                running = read_rows(running_query, limit=RUNNING_NAMED, **where)
                limit = replace(limit, running_jobs=tuple((r["id"], r["lease_owner"]) for r in running))
            if limit.rate_full:
                slot = read_rows("why_next_slot", limit_name=f"{scope}:{name}", rate_count=rate.count,
                                 rate_seconds=rate.seconds)
                limit = replace(limit, next_slot_at=self._to_time(slot[0]["at"]) if slot else None)
            limits.append(limit)
        return tuple(limits)

    def old_transactions(self, older_than_seconds: float) -> tuple[OldTransaction, ...]:
        """Sessions whose transaction holds back vacuum, open longer than this; a backend that has
        no such horizon (SQLite) or does not read it (MariaDB) has none to name."""
        return ()

    def count_jobs(self, status: JobStatus | None, task_name: str | None, queue_name: str | None) -> int:
        return self._rows("count_jobs", status=status and status.value, task_name=task_name,
                          queue_name=queue_name)[0]["n"]

    # Pausing and pruning (migration 0003).
    def paused_queues(self) -> dict[str, float]:
        return {row["queue_name"]: row["seconds"] for row in self._rows("paused_queues")}

    def throughput(self, window_seconds: float, by_task: bool = True) -> list[Throughput]:
        rows = self._rows("throughput", window_seconds=window_seconds, by_task=by_task)
        # An hour is 60 minutes and thousands of rows under heavy traffic: each minute converted once.
        minutes = {minute: datetime.fromtimestamp(minute, UTC) for minute in {row["minute"] for row in rows}}
        return [Throughput(minutes[row["minute"]], row["queue_name"], row["task_name"], int(row["done"]),
                           int(row["failed"])) for row in rows]

    def count_prunable(self, rule: PruneRule) -> int:
        return self._rows("count_prunable", **self._rule_params(rule))[0]["n"]

    def _rule_params(self, rule: PruneRule) -> dict[str, Any]:
        return {"status": rule.status.value, "older_than": rule.older_than_seconds,
                "task_names": None if rule.task_names is None else self._list_param(rule.task_names),
                "except_task_names": self._list_param(rule.except_task_names)}
