"""Running a django.tasks Task inside leased's worker, the way Django's own backends run one.

The handler leased calls for a Django task: it sends task_started and task_finished, passes
Django's TaskContext to tasks that take one, makes the return value JSON as Django does (a value
that is not fails the attempt with TypeError), and closes stale Django connections around each
task, as Django does around each request in a long-running process.
"""

from __future__ import annotations

import inspect
from contextlib import AbstractContextManager, contextmanager
from traceback import format_exception
from typing import Any, Callable, Iterator, Protocol

from django.db import close_old_connections, connections, reset_queries, transaction
from django.tasks import task_backends
from django.tasks.base import Task, TaskContext as DjangoTaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from leased.app import Leased
from leased.contrib.django.exceptions import ResultNotJSON
from leased.contrib.django.results import class_path, new_result, task_as_enqueued, task_result
from leased.engine.context import TaskContext
from leased.errors import PermanentError


class TaskBackend(Protocol):
    """What running a task needs of its backend (leased.contrib.django.backend.LeasedBackend, the
    signals' sender): its TASKS alias, its Django database, and the Leased app on it."""

    alias: str
    database: str

    @property
    def app(self) -> Leased: ...


def handler_for(alias: str, task: Task, transactional: bool = False) -> Callable[..., Any]:
    """leased's handler for the jobs of `task` enqueued through TASKS[alias]: called with leased's
    context first, then the task's arguments. The backend is TASKS[alias] as settings are when the
    job runs (override_settings makes new backends). A transactional task runs inside atomic_on()'s
    block, which closes stale connections outside it instead."""

    def run(leased_context: TaskContext, /, *args: Any, **kwargs: Any) -> Any:
        if transactional:
            return _run(task_backends[alias], task, leased_context, args, kwargs)
        close_old_connections()
        reset_queries()
        try:
            return _run(task_backends[alias], task, leased_context, args, kwargs)
        finally:
            close_old_connections()

    # Arguments are checked at enqueue against the function's own parameters (without Django's context).
    parameters = list(inspect.signature(task.func).parameters.values())[1 if task.takes_context else 0:]
    leading = inspect.Parameter("leased_context", inspect.Parameter.POSITIONAL_ONLY)
    # inspect.signature() reads __signature__, which typeshed does not declare on a function.
    run.__signature__ = inspect.Signature([leading, *parameters])  # type: ignore[attr-defined]
    run.__name__ = run.__qualname__ = task.name
    run.__module__ = task.func.__module__
    # The worker drops handlers of aliases that are gone; mypy knows no attributes on a function.
    run.django_alias = alias  # type: ignore[attr-defined]
    return run


def atomic_on(database: str) -> Callable[[], AbstractContextManager[Any]]:
    """The transaction of a task declared transactional=True: transaction.atomic() on Django's
    connection to `database`, yielding the driver's connection under it, where leased writes the
    job's end before the block commits (engine/transactional.py). Stale connections are closed
    before it, never inside it: Django would roll the block back."""

    @contextmanager
    def opener() -> Iterator[Any]:
        close_old_connections()
        reset_queries()
        try:
            with transaction.atomic(using=database):
                connection = connections[database]
                connection.ensure_connection()
                yield connection.connection
        finally:
            close_old_connections()

    return opener


def _run(backend: TaskBackend, task: Task, leased_context: TaskContext, args: tuple, kwargs: dict) -> Any:
    job, sender = leased_context.job, type(backend)
    result = _running_result(backend, task, leased_context, list(args), kwargs)
    task_started.send(sender=sender, task_result=result)
    try:
        if task.takes_context:
            value = task.call(DjangoTaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = _as_json(value)
    except BaseException as error:  # KeyboardInterrupt too: in a worker it is the task's own (engine/executor.py)
        result.errors.append(TaskError(exception_class_path=class_path(type(error)),
                                       traceback="".join(format_exception(error))))
        if isinstance(error, PermanentError) or job.attempt >= job.max_attempts:
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", timezone.now())
            task_finished.send(sender=sender, task_result=result)  # in the except: Django's logger reads exc_info
        raise
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=sender, task_result=result)
    return value


def _as_json(value: Any) -> Any:
    """The task's return value made JSON as Django's backends make it; a value that cannot be fails
    the task for good (a retry would return another value of the same kind)."""
    try:
        return normalize_json(value)
    except TypeError as error:
        raise ResultNotJSON(str(error)) from None


def _running_result(backend: TaskBackend, task: Task, leased_context: TaskContext, args: list,
                    kwargs: dict) -> TaskResult:
    job, now = leased_context.job, timezone.now()
    enqueued = task_as_enqueued(task, job, backend.alias)
    if job.attempt > 1:  # a retry: earlier attempts' workers and errors are in the history
        result = task_result(enqueued, backend.app.get_job(job.id), backend.alias, backend.database)
    else:
        result = new_result(enqueued, job, backend.alias, backend.database, args, kwargs)
        object.__setattr__(result, "started_at", now)
        result.worker_ids.append(leased_context.worker_id)
    object.__setattr__(result, "status", TaskResultStatus.RUNNING)
    object.__setattr__(result, "last_attempted_at", now)
    return result
