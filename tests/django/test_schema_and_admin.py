"""The Django migration builds leased's schema, and the admin shows, retries and cancels jobs."""

from __future__ import annotations

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+); not this folder, which is also "django"

from djangotest import backend, close_leased_connections, db_alias, job_id, run_queued  # noqa: F401  (fixtures)

from conftest import mariadb_database, postgres_schema
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.test import Client
from schemas import leased_schema
from signups import tasks
from leased.backends.sqlite.backend import MIGRATIONS as SQLITE_MIGRATIONS

from leased import Leased
from leased.contrib.django.connection import database_url

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def _leased_migrated(db_alias: str, tmp_path) -> list[tuple]:
    """The schema `leased migrate` builds in an empty database of the same kind."""
    if connections[db_alias].vendor == "sqlite":
        return _migrated_by_leased(f"sqlite:///{tmp_path / 'leased.db'}")
    if connections[db_alias].vendor == "mysql":
        with mariadb_database() as url:
            return _migrated_by_leased(url)
    with postgres_schema() as url:
        return _migrated_by_leased(url)


def _migrated_by_leased(url: str) -> list[tuple]:
    app = Leased(url, migrate=False)
    try:
        # Every leased migration: a new one needs its Django migration (see migrations/), or this differs.
        assert app.migrate() == [migration.version for migration in SQLITE_MIGRATIONS]
    finally:
        app.close()
    return leased_schema(url)


def test_manage_py_migrate_builds_the_schema_leased_migrate_builds(db_alias, tmp_path):
    url = database_url(db_alias)  # the test database, migrated by Django's test runner
    assert leased_schema(url) == _leased_migrated(db_alias, tmp_path)
    app = Leased(url, migrate=False)
    try:
        assert app.migrate() == []  # `leased migrate` afterwards: nothing left to do
    finally:
        app.close()


def test_manage_py_migrate_after_leased_migrate_is_a_no_op_and_zero_drops_the_tables(db_alias, tmp_path):
    from leased.contrib.django.backend import close_all

    close_all()  # the tables are about to be dropped under leased's own connections
    url = database_url(db_alias)
    call_command("migrate", "leased", "zero", database=db_alias, verbosity=0)
    assert leased_schema(url) == []
    app = Leased(url, migrate=False)
    try:
        # Every leased migration: a new one needs its Django migration (see migrations/), or this differs.
        assert app.migrate() == [migration.version for migration in SQLITE_MIGRATIONS]
    finally:
        app.close()
    call_command("migrate", "leased", database=db_alias, verbosity=0)
    assert leased_schema(url) == _leased_migrated(db_alias, tmp_path)


@pytest.fixture
def staff_client(db_alias) -> Client:
    user = User.objects.create_superuser("admin", "admin@example.com", "secret")
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_lists_jobs_shows_attempts_and_retries_and_cancels(backend, staff_client, tmp_path):
    failed = tasks.flaky.using(max_attempts=1).enqueue(5, str(tmp_path / "attempts"))
    waiting = tasks.send_welcome.enqueue(1)
    backend.app.cancel(job_id(waiting))
    pending = tasks.send_welcome.enqueue(2)
    run_queued(backend, queues=["default"])

    listing = staff_client.get("/admin/leased/job/", {"status__exact": "failed"})
    assert listing.status_code == 200
    assert "signups.tasks.flaky" in listing.text and "Retry the selected" in listing.text

    page = staff_client.get(f"/admin/leased/job/{job_id(failed)}/change/")
    assert page.status_code == 200
    assert "ConnectionError" in page.text and "attempt 1 failed" in page.text and "<details>" in page.text
    assert 'name="_save"' not in page.text  # read-only: actions change jobs, not forms

    retried = staff_client.post("/admin/leased/job/", {"action": "retry_jobs", "_selected_action": [job_id(failed)]},
                                follow=True)
    assert "1 retried" in retried.text
    assert backend.get_result(failed.id).status == "READY"
    cancelled = staff_client.post("/admin/leased/job/", {
        "action": "cancel_jobs", "_selected_action": [job_id(pending), job_id(waiting)]}, follow=True)
    assert "1 cancelled" in cancelled.text and "only waiting, pending, running or sleeping jobs" in cancelled.text
    assert backend.get_result(pending.id).errors[0].exception_class_path.endswith("TaskCancelled")
    backend.app.cancel(job_id(failed))
