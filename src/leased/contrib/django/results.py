"""leased's Job, as Django's TaskResult.

    pending   -> READY       (waiting for its first attempt, or for a retry)
    waiting   -> READY       (a workflow's step whose parents have not all ended)
    running   -> RUNNING
    done      -> SUCCESSFUL  (return_value is the handler's result)
    failed    -> FAILED
    cancelled -> FAILED      (with a TaskError of class TaskCancelled: Django has no cancelled status)

One entry in worker_ids per attempt, so `attempts` and `TaskContext.attempt` count them; one
TaskError per attempt that failed: an exception, a worker that died (LeaseExpired), a lease lost
to another worker (LeaseLost), a cancellation (TaskCancelled). An attempt given back by a worker
shutting down is not a failure: the task runs again.

A result's id is its job's id, and names the Django database too where that is not
"default" ("analytics:17"): two databases number their jobs alike, and a backend must never read
another database's job as its own.

Times are as Django's own backends give them (timezone.now()): aware with USE_TZ = True, naive
in the current time zone with USE_TZ = False.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from leased.contrib.django import exceptions
from leased.digits import whole_number
from leased.jobs import Attempt, Job, JobStatus, Outcome

STATUSES = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.WAITING: TaskResultStatus.READY,  # a workflow's step waiting for its parents: not started
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SLEEPING: TaskResultStatus.RUNNING,  # started, and its handler waits for a time or a signal
    JobStatus.DONE: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

# Attempts that ended without an exception of the handler's own: the class that stands for each.
_FAILURES_WITHOUT_EXCEPTION: dict[Outcome | None, type[Exception]] = {  # a running attempt (None) finds none
    Outcome.EXPIRED: exceptions.LeaseExpired,
    Outcome.LEASE_LOST: exceptions.LeaseLost,
    Outcome.CANCELLED: exceptions.TaskCancelled,
}


# leased's own classes for failures that Django's backends report as a builtin.
_AS_DJANGO_REPORTS_IT = {"leased.contrib.django.exceptions.ResultNotJSON": "builtins.TypeError"}


def class_path(error: type[BaseException]) -> str:
    path = f"{error.__module__}.{error.__qualname__}"
    return _AS_DJANGO_REPORTS_IT.get(path, path)


def exception_class_path(error_type: str, traceback: str | None) -> str:
    """The dotted path of a stored error's class.

    leased stores the class's bare name; the traceback's last header for that name carries the
    module (Python prints "package.module.Error: message", and builtins by name alone).
    """
    name = error_type
    if traceback:
        header = re.compile(rf"^((?:\w+\.)*{re.escape(error_type)})(?::|$)", re.MULTILINE)
        found = header.findall(traceback)
        if found:
            name = found[-1]
    if "." not in name and isinstance(getattr(builtins, name, None), type):
        return f"builtins.{name}"
    return _AS_DJANGO_REPORTS_IT.get(name, name)


def task_error(attempt: Attempt) -> TaskError | None:
    """The TaskError of one attempt, or None if the attempt did not fail."""
    if attempt.outcome is Outcome.ERROR:
        error_type = attempt.error_type or "Exception"
        text = attempt.traceback or f"{error_type}: {attempt.error_message or ''}\n"
        return TaskError(exception_class_path=exception_class_path(error_type, attempt.traceback), traceback=text)
    stand_in = _FAILURES_WITHOUT_EXCEPTION.get(attempt.outcome)
    if stand_in is None:
        return None
    return TaskError(exception_class_path=class_path(stand_in),
                     traceback=f"{class_path(stand_in)}: {attempt.error_message or stand_in.__doc__}\n")


def django_time(moment: datetime | None) -> datetime | None:
    """One of leased's times (aware, UTC) as Django's backends give it: see the module's docstring."""
    if moment is None or settings.USE_TZ:
        return moment
    return timezone.make_naive(moment)


def deferred_to(job: Job) -> datetime | None:
    """The run_after the job was enqueued with, or None if it was due at once.

    leased keeps one due time, run_after, which a retry (or a reclaim, or a release at shutdown)
    moves on: it is the time enqueued with until then. A job enqueued without one is due when it
    was created, to the same clock reading."""
    if job.run_after == job.created_at:
        return None
    if job.attempt == 0 or (job.attempt == 1 and job.status is not JobStatus.PENDING):
        return django_time(job.run_after)
    return None


def task_as_enqueued(task: Task, job: Job, alias: str) -> Task:
    """The task with the queue, priority and run_after the job was enqueued with (as enqueue()
    returned it)."""
    try:
        return replace(task, queue_name=job.queue_name, priority=job.priority, backend=alias,
                       run_after=deferred_to(job))
    except InvalidTask:  # e.g. the queue has since left QUEUES: the declared task still names the function
        return task


def result_id(job_id: int, database: str) -> str:
    """'17' on the default database, 'analytics:17' on another."""
    return str(job_id) if database == DEFAULT_DB_ALIAS else f"{database}:{job_id}"


def job_id_of(result_id: object, database: str) -> int | None:
    """The job a result id names on `database`; None when it names none there (another database's
    job, or not an id at all)."""
    named, _, number = str(result_id).rpartition(":")
    return whole_number(number) if (named or DEFAULT_DB_ALIAS) == database else None


def task_result(task: Task, job: Job, alias: str, database: str) -> TaskResult:
    """The TaskResult of a job read with its history."""
    history = job.history
    errors = [error for error in map(task_error, history) if error is not None]
    if job.status is JobStatus.CANCELLED and not any(a.outcome is Outcome.CANCELLED for a in history):
        errors.append(TaskError(exception_class_path=class_path(exceptions.TaskCancelled),
                                traceback=f"{class_path(exceptions.TaskCancelled)}: the job was cancelled "
                                          "before it ran\n"))
    result = TaskResult(
        task=task,
        id=result_id(job.id, database),
        status=STATUSES[job.status],
        enqueued_at=django_time(job.created_at),
        started_at=django_time(history[0].started_at) if history else None,
        finished_at=django_time(job.finished_at) if job.is_finished else None,
        last_attempted_at=django_time(history[-1].started_at) if history else None,
        args=list(job.args),
        kwargs=dict(job.kwargs),
        backend=alias,
        errors=errors,
        worker_ids=[attempt.worker_id for attempt in history],
    )
    if job.status is JobStatus.DONE:
        object.__setattr__(result, "_return_value", job.result)
    return result


def new_result(task: Task, job: Job, alias: str, database: str, args: list, kwargs: dict) -> TaskResult:
    """The TaskResult enqueue() returns: READY, nothing run yet."""
    return TaskResult(task=task, id=result_id(job.id, database), status=TaskResultStatus.READY,
                      enqueued_at=django_time(job.created_at),
                      started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
                      backend=alias, errors=[], worker_ids=[])
