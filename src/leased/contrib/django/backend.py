"""LeasedBackend: a django.tasks backend whose tasks are leased jobs in a Django database.

    TASKS = {"default": {"BACKEND": "leased.contrib.django.LeasedBackend",
                         "QUEUES": ["default", "mail"],
                         "OPTIONS": {"database": "default", "max_attempts": 3, "lease": 30}}}

enqueue() writes the job on Django's connection `database`, inside the caller's transaction if
one is open; get_result() reads it there too (so it sees what this transaction wrote). Workers
(`manage.py leased_worker`) and admin actions use leased's own connections to the same database.

A job belongs to the TASKS alias it was enqueued through: its result names that alias, and the
worker runs it, signals included, under that alias as TASKS is when it runs. The job's task name
says which: the task's module path when it went through the alias the task was declared with
(`@task(backend=...)`, "default" unless given), `path@alias` when through another.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, transaction
from django.tasks import task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskResult
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from leased.app import Leased
from leased.backoff import Backoff
from leased.contrib.django.connection import database_url, raw_connection
from leased.contrib.django.options import TASK_OPTIONS, LeasedTask, task_options
from leased.contrib.django.results import job_id_of, new_result, task_as_enqueued, task_result
from leased.engine.worker import Worker
from leased.errors import ConfigurationError
from leased.tasks import Task as LeasedHandler, check_queue_name

BACKEND_OPTIONS = ("database", *TASK_OPTIONS)

# Every Django task a LeasedBackend has validated, by its module path: a worker runs them all,
# through each LeasedBackend alias on its database.
_known_tasks: dict[str, Task] = {}
# One Leased (its connections, its handlers) per database, shared by the backend instances that
# Django makes per thread.
_apps: dict[str, Leased] = {}
_apps_lock = threading.Lock()


class LeasedBackend(BaseTaskBackend):
    task_class = LeasedTask

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]):
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - set(BACKEND_OPTIONS))
        if unknown:
            raise InvalidTaskBackend(f"TASKS[{alias!r}]['OPTIONS'] has unknown option {unknown[0]!r}: "
                                     f"leased's backend takes {', '.join(BACKEND_OPTIONS)}")
        self.database: str = self.options.get("database", DEFAULT_DB_ALIAS)
        try:
            self.defaults = {name: check(self.options[name]) for name, check in TASK_OPTIONS.items()
                             if name in self.options}
            for queue_name in self.queues:
                check_queue_name(queue_name)
        except ConfigurationError as error:
            raise InvalidTaskBackend(f"TASKS[{alias!r}]: {error}") from None

    # The contract.
    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        try:
            check_queue_name(task.queue_name)
        except ConfigurationError as error:
            raise InvalidTask(str(error)) from None
        task_options(task)
        _known_tasks[task.module_path] = task

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))  # Django's TypeError first
        options = {**self.defaults, **task_options(task)}
        call = self._handler(task, self.alias).using(
            queue_name=task.queue_name, priority=task.priority, run_after=_aware(task.run_after),
            connection=raw_connection(self.database),
            **{name: options[name] for name in ("max_attempts", "lease", "max_crashes") if name in options})
        job = call.enqueue(*args, **kwargs)
        if task.run_after is None:
            self._wake_workers_on_commit(task.queue_name)
        result = new_result(task, job, self.alias, self.database, args, kwargs)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        from leased.contrib.django.models import read_job  # models need the app registry

        number = job_id_of(result_id, self.database)
        job = read_job(self.database, number) if number is not None else None
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        module_path, alias = split_job_task_name(job.task_name)
        task = declared_task(module_path)
        if task is None:
            raise TaskResultDoesNotExist(f"{result_id} (job of {job.task_name!r}, which is not a django.tasks Task)")
        alias = alias or task.backend
        if alias not in settings.TASKS:  # the alias it was enqueued through is gone: it is read through this one
            alias = self.alias
        return task_result(task_as_enqueued(task, job, alias), job, alias, self.database)

    def job_id(self, result_id: str) -> int:
        """The leased job id of one of this backend's results, for leased's own API and CLI
        (`backend.app.cancel(backend.job_id(result.id))`, `leased show`). Raises
        TaskResultDoesNotExist for another database's result."""
        number = job_id_of(result_id, self.database)
        if number is None:
            raise TaskResultDoesNotExist(f"{result_id} (not a job id on database {self.database!r})")
        return number

    def check(self, **kwargs: Any) -> list:
        from leased.contrib.django.checks import backend_problems

        return backend_problems(self.alias, self.database)

    # leased's side.
    @property
    def app(self) -> Leased:
        """The Leased application on this backend's database (its own connections), made once per database."""
        url = database_url(self.database)
        with _apps_lock:
            if url not in _apps:
                _apps[url] = Leased(url, migrate=False)  # the schema is a Django migration
            return _apps[url]

    def worker(self, **options: Any) -> Worker:
        """A leased Worker running every django.tasks Task imported so far (see leased_worker),
        enqueued through any LeasedBackend alias on this database as TASKS is now. A job of an
        alias TASKS no longer has waits: no worker claims it."""
        url = database_url(self.database)
        aliases = [alias for alias in settings.TASKS if _is_leased_backend_on(alias, url)]
        app = self.app
        with _apps_lock:  # handlers of aliases that are gone (override_settings) are dropped
            for name, handler in list(app.tasks.items()):
                if getattr(handler.func, "django_alias", None) not in (None, *aliases):
                    del app.tasks[name]
        for task in list(_known_tasks.values()):
            for alias in aliases:
                self._handler(task, alias)
        return app.worker(**options)

    def _wake_workers_on_commit(self, queue_name: str) -> None:
        """Wake workers in other processes once the job is committed (at once outside atomic();
        after the outermost commit inside; never on a rollback): on SQLite and MariaDB, which have
        no NOTIFY. PostgreSQL's backend does nothing here: the insert's NOTIFY is delivered at commit."""
        transaction.on_commit(partial(self.app.backend.wake, [queue_name]), using=self.database)

    def _handler(self, task: Task, alias: str) -> LeasedHandler:
        """leased's handler for the jobs of `task` enqueued through TASKS[alias], with the backoff and
        transactional that TASKS and the task declare now: a handler made under other settings
        (override_settings) is made again, so the first settings in a process never win."""
        from leased.contrib.django.execution import atomic_on, handler_for

        app = self.app
        name = job_task_name(task, alias)
        declared = declared_task(task.module_path) or task
        backend = self if alias == self.alias else task_backends[alias]
        options = {**backend.defaults, **task_options(declared)}
        backoff, transactional = options.get("backoff") or Backoff(), options.get("transactional", False)
        with _apps_lock:
            handler = app.tasks.get(name)
            if handler is not None and (handler.backoff, handler.transactional) == (backoff, transactional):
                return handler
            app.tasks.pop(name, None)  # made under other settings
            handler = app.task(name=name, queue_name=task.queue_name, backoff=backoff, takes_context=True,
                               transactional=transactional)(handler_for(alias, declared, transactional))
            if transactional:  # in Django's transaction on this database, where the end is written too
                handler.transaction = atomic_on(self.database)
        return handler


def job_task_name(task: Task, alias: str) -> str:
    """The task name a job of `task` enqueued through TASKS[alias] stores (see the module's docstring)."""
    declared = declared_task(task.module_path)
    return task.module_path if alias == (declared or task).backend else f"{task.module_path}@{alias}"


def split_job_task_name(name: str) -> tuple[str, str | None]:
    """A job's task name as (module path, alias), the alias None for the task's declared one."""
    module_path, _, alias = name.partition("@")
    return module_path, alias or None


_declared_tasks: dict[str, Task] = {}  # the module-level Task objects, which never change


def declared_task(module_path: str) -> Task | None:
    """The django.tasks Task at `module_path` as its module declares it (not a using() copy), or None."""
    if module_path not in _declared_tasks:
        try:
            found = import_string(module_path)
        except ImportError:
            found = None
        if not isinstance(found, Task):
            return None  # not remembered: the module may not be importable yet
        _declared_tasks[module_path] = found
    return _declared_tasks[module_path]


def _is_leased_backend_on(alias: str, url: str) -> bool:
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        return False
    return isinstance(backend, LeasedBackend) and database_url(backend.database) == url


def _aware(run_after: Any) -> Any:
    """run_after as leased wants it: aware (with USE_TZ = False, Django allows naive local times)."""
    if run_after is None or timezone.is_aware(run_after):
        return run_after
    if isinstance(run_after, timedelta):
        return run_after
    return timezone.make_aware(run_after)


def close_all() -> None:
    """Close leased's own connections (those of workers' and admin actions' Leased apps).

    Django's test runner needs this before it drops a PostgreSQL test database."""
    with _apps_lock:
        apps = list(_apps.values())
        _apps.clear()
    for app in apps:
        app.close()
