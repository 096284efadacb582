"""A workflow's run and its steps, as plain values: what is written (NewWorkflow) and what is read
(WorkflowInfo). The builder that makes them is leased.workflows; storage is the backends'."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from leased.jobs import JobStatus, NewJob


class RunWhen(StrEnum):
    """When a step runs, once every parent has ended."""

    SUCCEEDED = "succeeded"  #: every parent succeeded (a parent failed for good cancels it at once)
    FINISHED = "finished"  #: whatever the parents' outcomes
    FAILED = "failed"  #: at least one parent failed or was cancelled: a compensation step


class WorkflowStatus(StrEnum):
    """A run's status, by one rule for every shape (see workflow_status; docs/howto/workflows.md)."""

    RUNNING = "running"  #: a step is waiting, pending or running
    SUCCEEDED = "succeeded"  #: every end of the run (a step no other waits for) ended done, or was skipped
    FAILED = "failed"  #: a step failed, and an end did not succeed or a compensation ran
    CANCELLED = "cancelled"  #: an end did not succeed, and no step failed: someone cancelled steps


@dataclass(frozen=True, slots=True)
class NewStep:
    """One step to write: its job, and its parents as indexes into the workflow's steps (or job ids
    of steps already written, for steps added at run time)."""

    name: str
    job: NewJob
    parents: tuple[int, ...] = ()
    run_when: RunWhen = RunWhen.SUCCEEDED
    previous: int | None = None  # a chain's step before this one (an index, as parents)


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    name: str
    steps: tuple[NewStep, ...]
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What enqueueing a workflow wrote: its id and each step's job id, by step name. `created` is
    False when an unfinished run held the idempotency key: that run is returned, nothing written."""

    workflow_id: int
    job_ids: dict[str, int]
    created: bool = True


@dataclass(frozen=True, slots=True)
class ParentEnd:
    """A parent as its child sees it: how it ended, and what it returned."""

    name: str
    job_id: int
    status: JobStatus
    result: Any = None
    error: str | None = None
    #: the W3C trace context of its last attempt's span, when traced (leased.tracing): a traced
    #: step's attempt links to it. Not compared: it names a span, not how the parent ended.
    trace_context: str | None = field(default=None, compare=False)

    @property
    def succeeded(self) -> bool:
        return self.status is JobStatus.DONE


@dataclass(frozen=True, slots=True)
class StepInfo:
    name: str
    job_id: int
    task_name: str
    queue_name: str
    status: JobStatus
    run_when: RunWhen
    parents: tuple[str, ...]  #: the names of the steps it waits for
    parents_left: int  #: of them, not ended yet
    attempt: int
    max_attempts: int
    created_at: datetime
    finished_at: datetime | None
    result: Any = None
    last_error: str | None = None
    added_by: str | None = None  #: the step that added it while running, or None
    cancelled_by_parents: bool = False


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    id: int
    name: str
    created_at: datetime
    idempotency_key: str | None
    counts: dict[str, int]  #: steps per job status
    skipped: int = 0  #: steps cancelled as their `when` asked (a compensation step whose parents all succeeded)
    open_ends: int = 0  #: steps no other step waits for that ended other than done, skipped ones aside
    compensations_run: int = 0  #: steps with when="failed" that ran (were not skipped)
    steps: tuple[StepInfo, ...] = field(default=())  #: empty in lists; get_workflow fills them

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        return sum(self.counts.get(status, 0) for status in ("done", "failed", "cancelled"))

    @property
    def status(self) -> WorkflowStatus:
        return workflow_status(self.counts, self.open_ends, self.compensations_run, self.skipped)

    @property
    def progress(self) -> str:
        return f"{self.finished} of {self.total} steps done"


def workflow_status(counts: dict[str, int], open_ends: int, compensations_run: int = 0,
                    skipped: int = 0) -> WorkflowStatus:
    """A run's status from its steps, one rule for every shape (docs/howto/workflows.md). While a step
    can still run, the run is running. Then it is judged by its ends, the steps no other step
    waits for: every end done (or skipped: a compensation whose parents all succeeded) is a
    success, whatever failed on the way, so a batch's then= step, which runs whatever its members
    did, speaks for them. A compensation step that ran undid work that did not happen: while a step
    stays failed or cancelled, that run did not succeed either, though its ends did. A run that did
    not succeed failed if a step failed, and was cancelled if none did (someone cancelled steps)."""
    if any(counts.get(status, 0) for status in ("waiting", "pending", "running", "sleeping")):
        return WorkflowStatus.RUNNING
    unsuccessful = counts.get("failed", 0) + counts.get("cancelled", 0) - skipped
    if not open_ends and not (compensations_run and unsuccessful):
        return WorkflowStatus.SUCCEEDED
    return WorkflowStatus.FAILED if counts.get("failed", 0) else WorkflowStatus.CANCELLED
