"""The Task class of the leased backend: Django's Task plus leased's per-task options.

Django 6.1's `@task(**options)` hands every option it does not know itself to the backend's
`task_class`, so `@task(max_attempts=5, lease=60, backoff=Backoff(base=2))` lands here. An
option this backend does not know is refused when the function is decorated, with the known ones.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any, Callable

from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask

from leased.backoff import Backoff
from leased.errors import ConfigurationError
from leased.tasks import check_max_attempts, check_max_crashes, lease_seconds


def _backoff(value: object) -> Backoff:
    if not isinstance(value, Backoff):
        raise ConfigurationError(f"backoff must be a leased.Backoff, got {value!r}")
    return value


def _transactional(value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"transactional must be True or False, got {value!r}")
    return value


# leased's per-task options: name -> the check that validates (and normalises) a value. A new
# option is one entry here and one keyword in LeasedTask.
TASK_OPTIONS: dict[str, Callable[[Any], Any]] = {
    "max_attempts": check_max_attempts,
    "max_crashes": check_max_crashes,
    "lease": lease_seconds,
    "backoff": _backoff,
    # The task body in transaction.atomic() on the backend's database, committed with the job's
    # end and only while the worker holds its lease (leased.contrib.django.execution).
    "transactional": _transactional,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LeasedTask(Task):
    """A django.tasks Task with leased's options; None means the backend's default (OPTIONS)."""

    max_attempts: int | None = None  # attempts before the task fails for good (a crash counts as one)
    max_crashes: int | None = None  # attempts that kill their process before the task is failed as a poison job
    lease: float | timedelta | None = None  # seconds a worker holds the task between renewals
    backoff: Backoff | None = None  # delay before each retry
    transactional: bool | None = None  # its writes to the backend's database commit with its end, once

    def __new__(cls, *args: Any, **kwargs: Any) -> LeasedTask:
        # Before the dataclass's __init__, which would say only "unexpected keyword argument".
        unknown = sorted(set(kwargs) - _FIELD_NAMES)
        if unknown:
            known = ", ".join(sorted(TASK_OPTIONS))
            raise InvalidTask(f"unknown task option {unknown[0]!r} for the leased backend: "
                              f"leased's options are {known} (Django's: priority, queue_name, backend, "
                              "takes_context)")
        return object.__new__(cls)

    def using(self, *, max_attempts: int | None = None, lease: float | timedelta | None = None,
              max_crashes: int | None = None, **django_options: Any) -> LeasedTask:
        """Django's using() (priority, queue_name, run_after, backend), plus leased's options that a
        job carries (max_attempts, lease, max_crashes). backoff and transactional are the task's,
        shared by all its jobs (a worker's handler applies them), so using() refuses them rather
        than drop them."""
        for option in ("backoff", "transactional"):
            if option in django_options:
                raise InvalidTask(f"task {self.module_path}: {option} cannot be changed per call with using(); "
                                  f"set it in @task({option}=...) or in TASKS' OPTIONS")
        task = Task.using(self, **django_options)  # not super(): slots dataclasses break its zero-argument form
        ours = {"max_attempts": max_attempts, "lease": lease, "max_crashes": max_crashes}
        changes = {name: value for name, value in ours.items() if value is not None}
        return replace(task, **changes) if changes else task


_FIELD_NAMES = frozenset(field.name for field in fields(LeasedTask))


def task_options(task: Task) -> dict[str, Any]:
    """The leased options a task sets, checked; a plain django.tasks Task sets none."""
    options = {}
    for name, check in TASK_OPTIONS.items():
        value = getattr(task, name, None)
        if value is not None:
            try:
                options[name] = check(value)
            except ConfigurationError as error:
                raise InvalidTask(f"task {task.module_path}: {error}") from None
    return options
