"""A TransactionTestCase whose available_apps leaves leased out still leaves no job for the next
test (issue 42: Django's own flush ran there, which skips leased's unmanaged tables). Two test
cases in this order: the first enqueues on every database, the second finds nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+); not this folder, which is also "django"

from djangotest import DATABASES, PROBLEMS, close_leased_connections, leased_tasks  # noqa: F401  (fixtures)

from django.test import TransactionTestCase
from signups import tasks

REACHABLE = [alias for name, alias in DATABASES.items() if not PROBLEMS.get(name, (None, False))[0]]


class EnqueuesWithLeasedLeftOutOfAvailableApps(TransactionTestCase):
    available_apps = ["signups"]  # Django's own flush runs after it, not leased's
    databases = "__all__"

    def test_enqueues_on_every_database(self):
        for alias in REACHABLE:
            with leased_tasks(alias):
                tasks.add_async.enqueue(1, 1)


class ComesNext(TransactionTestCase):
    databases = "__all__"

    def test_finds_no_job_left(self):
        from leased.contrib.django.models import Job

        assert {alias: Job.objects.using(alias).count() for alias in REACHABLE} == {alias: 0 for alias in REACHABLE}
