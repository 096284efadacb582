"""What a step's end does to its workflow, one part over a database (database.py): every write
verb that ends a step's job (a worker's finish, the reclaim of its last expired lease, a cancel)
calls `settle_rows` in its own transaction, and a person's retry calls `retried_steps`.

No coordinator. A step waits (status 'waiting') with two counters in its leased_steps row: the
parents not ended yet, and those that ended failed or cancelled. Each child's counters move by what
ended, and a child whose parents have all ended becomes pending, or is cancelled, there and then.
One parent's end costs a lookup of its own edges and its children's rows, whatever their other
parents number. The children's rows are locked (FOR UPDATE; SQLite's one writer), so two parents
ending at once on two workers count one after the other, and exactly one of them releases the
child. `retried_steps` undoes a failure's cascade when a person retries the step that failed.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from leased.backends.sql.database import Database
from leased.jobs import JobStatus
from leased.runs import RunWhen

ENDED_AS_FAILED = (JobStatus.FAILED.value, JobStatus.CANCELLED.value)
_EARLIER = -1  # a cancel's parent: one that failed in an earlier transaction


class StepEnds:
    def __init__(self, database: Database):
        self._database = database
        self._execute = database.execute
        self._all = database.all

    def settle(self, connection: Any, ended: Sequence[tuple[int, str]]) -> set[str]:
        """Count ended steps (job id, the status it ended in) against their children:
        a child whose parents have all ended is released or cancelled, and a cancel ends it in
        turn. Returns the queues of the steps released: after the commit, workers to wake."""
        names: dict[int, str] = {}
        released: set[str] = set()
        while ended:
            rows = self._all(connection, "lock_children", job_ids=json.dumps([job_id for job_id, _ in ended]))
            if not rows:
                break
            failed_ids = {job_id: status for job_id, status in ended if status in ENDED_AS_FAILED}
            children: dict[int, dict[str, Any]] = {}
            for row in rows:
                child = children.setdefault(row["job_id"], {"row": row, "ended": 0, "failed": 0, "first_failed": None})
                child["ended"] += 1
                if row["parent_id"] in failed_ids:
                    child["failed"] += 1
                    child["first_failed"] = child["first_failed"] or row["parent_id"]
            # Every child counts, whatever its status: the counters always say how many of its
            # parents have not ended and how many failed, so a retry can put it back.
            self._execute(connection, "count_parents", counts=json.dumps(
                [[job_id, child["ended"], child["failed"]] for job_id, child in children.items()]))
            release, cancel = [], []
            for job_id, child in children.items():
                row = child["row"]
                if row["status"] != JobStatus.WAITING.value:
                    continue  # counted only
                left = row["parents_left"] - child["ended"]
                failed = row["parents_failed"] + child["failed"]
                run_when = RunWhen(row["run_when"])
                if run_when is RunWhen.SUCCEEDED and failed:
                    cancel.append((job_id, child["first_failed"] or _EARLIER))
                elif left <= 0:
                    if run_when is RunWhen.FAILED and not failed:
                        cancel.append((job_id, None))
                    else:
                        release.append(job_id)
            if release:
                self._release_steps(connection, release, released)
            if cancel:
                unnamed = [parent for _, parent in cancel if parent not in (None, _EARLIER) and parent not in names]
                if unnamed:
                    names |= {row["job_id"]: row["name"] for row in
                              self._all(connection, "names_of_steps", job_ids=json.dumps(unnamed))}
                self._execute(connection, "cancel_steps", steps=json.dumps([
                    [job_id, "skipped: no parent failed" if parent is None else "a parent failed" if parent is _EARLIER
                     else _reason(names.get(parent, str(parent)), failed_ids.get(parent))]
                    for job_id, parent in cancel]))
                self._execute(connection, "mark_cancelled_by_parents",
                              job_ids=json.dumps([job_id for job_id, _ in cancel]))
            ended = [(job_id, JobStatus.CANCELLED.value) for job_id, _ in cancel]
        return released

    def _release_steps(self, connection: Any, job_ids: list[int], released: set[str]) -> None:
        chained = self._all(connection, "previous_results", job_ids=json.dumps(job_ids))
        if chained:  # a chain's step gets its previous step's result as its first argument
            self._execute(connection, "set_args", steps=json.dumps([
                [row["job_id"], _prepend(self._database.from_json(row["args"]),
                                         self._database.from_json(row["result"]))]
                for row in chained]))
        released |= self._release(connection, json.dumps(job_ids))

    def _release(self, connection: Any, job_ids: str) -> set[str]:
        """Waiting steps to pending, due now; the queues they are in."""
        if not self._database.capabilities.update_returning:
            self._execute(connection, "release_steps", job_ids=job_ids)
            return {row["queue_name"] for row in self._all(connection, "released_queues", job_ids=job_ids)}
        return {row["queue_name"] for row in self._all(connection, "release_steps", job_ids=job_ids)}

    def retried_steps(self, connection: Any, job_ids: Sequence[int]) -> None:
        """After a retry made these steps pending again: they are no longer cancelled in their
        parents' name, and what their end settled is undone."""
        if job_ids:
            # A step retried before its parents have all ended, none failed, waits for them again;
            # otherwise it runs now, as asked.
            # After _revive: a step retried with its own parent counts that parent back first.
            self._execute(connection, "uncancel_steps", job_ids=json.dumps(list(job_ids)))
            self._revive(connection, job_ids)
            self._execute(connection, "rewait_steps", job_ids=json.dumps(list(job_ids)))

    def _revive(self, connection: Any, job_ids: Sequence[int]) -> None:
        """Steps a person retried are no longer ended: their children count them back, and those
        their end had cancelled wait again, transitively."""
        frontier = list(job_ids)
        while frontier:
            rows = self._all(connection, "lock_children", job_ids=json.dumps(frontier))
            counts: dict[int, int] = {}
            children: dict[int, Any] = {}
            for row in rows:
                counts[row["job_id"]] = counts.get(row["job_id"], 0) + 1
                children[row["job_id"]] = row
            # Each retried parent had ended failed or cancelled: one ended and one failed fewer. A
            # step cancelled in their name waits again.
            if not counts:
                break
            self._execute(connection, "count_parents", counts=json.dumps(
                [[job_id, -n, -n] for job_id, n in counts.items()]))
            revive = [job_id for job_id, row in children.items()
                      if row["status"] == JobStatus.CANCELLED.value and row["cancelled_by_parents"]
                      and row["parents_failed"] - counts[job_id] <= 0]  # no other parent failed
            if revive:
                self._execute(connection, "revive_steps", job_ids=json.dumps(revive))
                self._execute(connection, "uncancel_steps", job_ids=json.dumps(revive))
            frontier = revive

    def settle_rows(self, connection: Any, rows: Iterable[Mapping[str, Any]]) -> set[str]:
        """Settle the steps among `rows` (id, status, workflow_id) that ended."""
        ended = [(row["id"], row["status"]) for row in rows
                 if row["workflow_id"] is not None and row["status"] in (JobStatus.DONE.value, *ENDED_AS_FAILED)]
        return self.settle(connection, ended) if ended else set()


def _reason(parent: str, status: str | None) -> str:
    return f"parent {parent} failed" if status == JobStatus.FAILED.value else f"parent {parent} was cancelled"


def _prepend(args: Any, value: Any) -> str:
    return json.dumps([value, *(args if isinstance(args, list) else [])], ensure_ascii=False, separators=(",", ":"))
