"""A system check of the jobs that wait for a TASKS alias that is gone (`manage.py check
--database ...` and `migrate` run it: Django runs checks that query only when asked to)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.db import connections

from leased.contrib.django.backend import declared_task, split_job_task_name


@checks.register(checks.Tags.database)
def jobs_of_aliases_gone(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A warning per task whose queued jobs were enqueued through a TASKS alias that is gone: a
    worker runs a job under its alias as TASKS is now, so no worker claims them until it is back."""
    from leased.contrib.django.models import Job  # models need the app registry

    problems = []
    for database in databases or ():
        if "leased_jobs" not in connections[database].introspection.table_names():
            continue
        queued = (Job.objects.using(database).filter(status__in=("pending", "waiting"))
                  .values_list("task_name", flat=True).distinct())
        for task_name in queued:
            module_path, alias = split_job_task_name(task_name)
            if alias is None:
                declared = declared_task(module_path)
                alias = None if declared is None else declared.backend  # not a django.tasks Task: not ours
            if alias is None or alias in settings.TASKS:
                continue
            count = Job.objects.using(database).filter(status__in=("pending", "waiting"), task_name=task_name).count()
            problems.append(checks.Warning(
                f"DATABASES[{database!r}] has {count} queued job(s) of {module_path} enqueued through "
                f"TASKS[{alias!r}], which TASKS no longer has: no worker runs them",
                hint=f"put {alias!r} back in TASKS, or cancel them (leased cancel, or the admin)", id="leased.W003"))
    return problems
