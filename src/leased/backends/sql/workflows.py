"""Workflows in storage, one part over a database (database.py): writing a run (its steps go in
through the database's `insert`, enqueue's algorithm), steps added at run time, a run cancelled or
retried as a whole, and the reads. What a step's end does to its children is step_ends.py's, which
this part composes. Each statement is the same-named query of the dialect's queries.sql.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from leased.backends.sql.database import Database
from leased.backends.sql.params import CANCELLED_BY_A_USER, running_records
from leased.backends.sql.step_ends import ENDED_AS_FAILED, StepEnds
from leased.errors import ConfigurationError, InvalidTransition, WorkflowNotFound
from leased.jobs import JobStatus, Lease, Outcome
from leased.runs import Enqueued, NewStep, NewWorkflow, ParentEnd, RunWhen, StepInfo, WorkflowInfo



class Workflows:
    def __init__(self, database: Database, step_ends: StepEnds):
        self._database = database
        self._step_ends = step_ends
        self._execute = database.execute
        self._all = database.all

    # Writing a run: the workflow's row, its jobs (through enqueue's bulk insert), steps and edges.
    def enqueue_workflow(self, workflow: NewWorkflow, connection: Any = None) -> Enqueued:
        if connection is not None:
            return self._database.in_callers(connection, lambda callers: self._write_workflow(callers, workflow))
        enqueued = self._database.transact(lambda own: self._write_workflow(own, workflow))
        if enqueued.created:
            self._database.wake({step.job.queue_name for step in workflow.steps if not step.parents})
        return enqueued

    def _write_workflow(self, connection: Any, workflow: NewWorkflow) -> Enqueued:
        key = workflow.idempotency_key
        if key is not None:  # a finished run gives its key up to the new one
            self._execute(connection, "free_workflow_key", idempotency_key=key)
        rows = self._all(connection, "insert_workflow", name=workflow.name, idempotency_key=key)
        if not rows:  # an unfinished run holds the key: it is the answer, and nothing is written
            (holder,) = self._all(connection, "workflow_with_key", idempotency_key=key)
            names = self._all(connection, "step_names", workflow_id=holder["id"])
            return Enqueued(holder["id"], {row["name"]: row["job_id"] for row in names}, created=False)
        workflow_id = rows[0]["id"]
        job_ids = self._write_steps(connection, workflow_id, workflow.steps)
        return Enqueued(workflow_id, dict(zip((step.name for step in workflow.steps), job_ids, strict=True)))

    def _write_steps(self, connection: Any, workflow_id: int, steps: Sequence[NewStep],
                     added_by: int | None = None, done: frozenset[int] | set[int] = frozenset()) -> list[int]:
        """Insert `steps` as jobs of `workflow_id` with their rows and edges. A parent is an index
        into `steps`, or negative for a step written before (-1 - its job id): see _renumber; of
        those, the ones in `done` have ended done, and are not waited for."""
        waits_for = [sum(1 for parent in step.parents if parent >= 0 or -1 - parent not in done) for step in steps]
        jobs = [step.job._replace(workflow_id=workflow_id,
                                  status=JobStatus.WAITING.value if left else JobStatus.PENDING.value)
                for step, left in zip(steps, waits_for, strict=True)]
        job_ids = [job.id for job, _ in self._database.insert(connection, jobs)]

        def job_id(parent: int) -> int:
            return job_ids[parent] if parent >= 0 else -1 - parent

        self._execute(connection, "insert_steps", steps=json.dumps([
            [job_ids[index], workflow_id, step.name, step.run_when.value, waits_for[index],
             None if step.previous is None else job_id(step.previous), added_by]
            for index, step in enumerate(steps)]))
        edges = [[job_id(parent), job_ids[index]] for index, step in enumerate(steps) for parent in step.parents]
        if edges:
            self._execute(connection, "insert_dependencies", edges=json.dumps(edges))
        return job_ids

    # Steps added by a running step (fan-out decided at run time).
    def add_steps(self, lease: Lease, steps: Sequence[NewStep]) -> dict[str, int]:
        """Add `steps` to the workflow of the step `lease` holds, fenced on that lease: its
        dependents wait for them too. A name the workflow has already is that step, not a new one
        (a retried handler adds the same names again). Parents are indexes into `steps`, or
        negative: -1 - job id of a step already in the workflow."""

        def work(connection: Any) -> dict[str, int]:
            held = self._all(connection, "lock_running_step", job_id=lease.job_id, attempt=lease.attempt,
                             worker_id=lease.worker_id)
            if not held:
                raise InvalidTransition(f"job {lease.job_id} no longer holds its lease: it cannot add steps")
            workflow_id = held[0]["workflow_id"]
            if workflow_id is None:
                raise ConfigurationError(f"job {lease.job_id} is not a workflow's step: only steps add steps")
            existing = {row["name"]: row["job_id"] for row in self._all(connection, "step_names",
                                                                         workflow_id=workflow_id)}
            new = [step for step in steps if step.name not in existing]
            if not new:
                return {step.name: existing[step.name] for step in steps}
            renumbered = _renumber(steps, new, existing)
            done = self._existing_parents(connection, workflow_id, renumbered)
            job_ids = self._write_steps(connection, workflow_id, renumbered, added_by=lease.job_id, done=done)
            # Who waits for the adding step waits for its new steps too (they end after it starts,
            # and it cannot end while this transaction holds its row).
            children = [row["child_id"] for row in self._all(connection, "children_of", job_id=lease.job_id)]
            if children:
                self._execute(connection, "insert_dependencies", edges=json.dumps(
                    [[job_id, child] for job_id in job_ids for child in children]))
                self._execute(connection, "count_parents", counts=json.dumps(
                    [[child, -len(job_ids), 0] for child in children]))
            return existing | dict(zip((step.name for step in new), job_ids, strict=True))

        added = self._database.transact(work)
        self._database.wake({step.job.queue_name for step in steps if not step.parents})
        return {step.name: added[step.name] for step in steps}

    def _existing_parents(self, connection: Any, workflow_id: int, steps: Sequence[NewStep]) -> set[int]:
        """The steps already written that new steps name in after=, locked (a parent ending now
        either commits first, and is seen ended here, or waits, and then counts the new edges):
        each must be a step of this run that has not failed. Returns those that ended done, which
        the new steps do not wait for."""
        named = sorted({-1 - parent for step in steps for parent in step.parents if parent < 0})
        if not named:
            return set()
        rows = {row["id"]: row["status"] for row in
                self._all(connection, "lock_steps_of_run", workflow_id=workflow_id, job_ids=json.dumps(named))}
        for job_id in named:
            status = rows.get(job_id)
            if status is None:
                raise ConfigurationError(f"after= names job {job_id}, which is not a step of workflow {workflow_id}")
            if status in ENDED_AS_FAILED:
                raise InvalidTransition(f"after= names step job {job_id}, which is {status}: a new step cannot wait "
                                        "for a step that ended without succeeding")
        return {job_id for job_id, status in rows.items() if status == JobStatus.DONE.value}

    # A run as a whole.
    def cancel_workflow(self, workflow_id: int) -> int:
        """Cancel every unfinished step of the run, running ones through their leases; returns how many."""

        def work(connection: Any) -> int:
            if not self._all(connection, "get_workflow", workflow_id=workflow_id):
                raise WorkflowNotFound(workflow_id)
            rows = self._all(connection, "unfinished_steps", workflow_id=workflow_id)
            running = [row for row in rows if row["status"] == JobStatus.RUNNING.value]
            if running:  # their records first: the cancel clears the leases they are read from
                self._execute(connection, "record_attempts",
                              ends=running_records(running, Outcome.CANCELLED, CANCELLED_BY_A_USER))
            if rows:
                self._execute(connection, "cancel_unfinished_steps", job_ids=json.dumps([row["id"] for row in rows]))
                # Counted as ends like any cancel, so that a step retried later finds its counters true.
                self._step_ends.settle(connection, [(row["id"], JobStatus.CANCELLED.value) for row in rows])
            return len(rows)

        return self._database.transact(work)

    def retry_workflow(self, workflow_id: int) -> int:
        """Retry every failed step of the run, and the steps cancelled in its name; returns how many."""

        def work(connection: Any) -> list[Any]:
            if not self._all(connection, "get_workflow", workflow_id=workflow_id):
                raise WorkflowNotFound(workflow_id)
            rows = self._all(connection, "failed_steps", workflow_id=workflow_id)
            if rows:
                ids = [row["id"] for row in rows]
                self._execute(connection, "retry_jobs", job_ids=self._database.ids(rows))
                self._step_ends.retried_steps(connection, ids)
            return rows

        retried = self._database.transact(work)
        self._database.wake(row["queue_name"] for row in retried)
        return len(retried)

    # Reads.
    def get_workflow(self, workflow_id: int) -> WorkflowInfo | None:
        with self._database.snapshot() as read:
            rows = read("get_workflow", workflow_id=workflow_id)
            if not rows:
                return None
            steps = read("workflow_steps", workflow_id=workflow_id)
            edges = read("workflow_edges", workflow_id=workflow_id)
            counted = read("workflow_counts", workflow_ids=json.dumps([workflow_id]))
        name_of = {row["job_id"]: row["name"] for row in steps}
        parents: dict[int, list[str]] = {}
        for edge in edges:
            parents.setdefault(edge["child_id"], []).append(name_of.get(edge["parent_id"], str(edge["parent_id"])))
        infos = tuple(self._step(row, tuple(parents.get(row["job_id"], ())), name_of) for row in steps)
        # The same counts as list_workflows reads, from the same query: one run reads as one status.
        return self._workflow(rows[0], *_tally(counted).get(workflow_id, ({}, 0, 0, 0)), steps=infos)

    def list_workflows(self, limit: int = 50, before_id: int | None = None, name: str | None = None
                       ) -> list[WorkflowInfo]:
        with self._database.snapshot() as read:
            rows = read("list_workflows", limit=limit, before_id=before_id, workflow_name=name)
            if not rows:
                return []
            counted = read("workflow_counts", workflow_ids=json.dumps([row["id"] for row in rows]))
        tallies = _tally(counted)
        return [self._workflow(row, *tallies.get(row["id"], ({}, 0, 0, 0))) for row in rows]

    def parents_of(self, job_id: int) -> list[ParentEnd]:
        """The parents of a step, by name, with how each ended."""
        from_json = self._database.from_json
        return [ParentEnd(row["name"], row["job_id"], JobStatus(row["status"]), from_json(row["result"]),
                          row["last_error"], row["trace_context"])
                for row in self._database.rows("parents_of", job_id=job_id)]

    def step_names(self, workflow_id: int) -> dict[str, int]:
        return {row["name"]: row["job_id"] for row in self._database.rows("step_names", workflow_id=workflow_id)}

    def _workflow(self, row: Mapping[str, Any], counts: dict[str, int], skipped: int, open_ends: int,
                  compensations_run: int, steps: tuple[StepInfo, ...] = ()) -> WorkflowInfo:
        return WorkflowInfo(id=row["id"], name=row["name"], created_at=self._database.to_time(row["created_at"]),
                            idempotency_key=row["idempotency_key"], counts=counts, skipped=skipped,
                            open_ends=open_ends, compensations_run=compensations_run, steps=steps)

    def _step(self, row: Mapping[str, Any], parents: tuple[str, ...], name_of: Mapping[int, str]) -> StepInfo:
        return StepInfo(
            name=row["name"], job_id=row["job_id"], task_name=row["task_name"], queue_name=row["queue_name"],
            status=JobStatus(row["status"]), run_when=RunWhen(row["run_when"]), parents=parents,
            parents_left=row["parents_left"], attempt=row["attempt"], max_attempts=row["max_attempts"],
            created_at=self._database.to_time(row["created_at"]),
            finished_at=self._database.to_time(row["finished_at"]),
            result=self._database.from_json(row["result"]), last_error=row["last_error"],
            added_by=None if row["added_by"] is None else name_of.get(row["added_by"], str(row["added_by"])),
            cancelled_by_parents=bool(row["cancelled_by_parents"]))


def _tally(rows: Iterable[Mapping[str, Any]]) -> dict[int, tuple[dict[str, int], int, int, int]]:
    """workflow_counts' rows (a run and a status each) as each run's steps per status, and its
    sums of skipped steps, open ends and compensations run: what WorkflowInfo's status reads."""
    tallies: dict[int, tuple[dict[str, int], int, int, int]] = {}
    for row in rows:
        counts, *sums = tallies.get(row["workflow_id"], ({}, 0, 0, 0))
        counts[row["status"]] = row["n"]
        added = (int(row[column] or 0) for column in ("skipped", "open_ends", "compensations_run"))
        tallies[row["workflow_id"]] = (counts, *(total + more for total, more in zip(sums, added, strict=True)))
    return tallies


def _renumber(steps: Sequence[NewStep], new: Sequence[NewStep], existing: Mapping[str, int]) -> list[NewStep]:
    """`new` (the steps of `steps` not yet written) with parent indexes into `new`; a parent that
    was written already becomes its job id (as -1 - id, which _write_steps reads as a job id)."""
    position = {step.name: index for index, step in enumerate(new)}

    def parent(index: int) -> int:
        if index < 0:
            return index
        step = steps[index]
        return position[step.name] if step.name in position else -1 - existing[step.name]

    return [NewStep(step.name, step.job, tuple(parent(p) for p in step.parents), step.run_when,
                    None if step.previous is None else parent(step.previous)) for step in new]
