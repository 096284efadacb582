"""Set-up and helpers for the tests of the Django project under tests/django (pytest-django, on its
test databases: SQLite, and PostgreSQL and MariaDB when reachable). Test modules import it after
`pytest.importorskip("django.tasks")`: Django 6 needs Python 3.12+.

Not a conftest.py: tests/conftest.py is imported as `conftest` by the other test modules, and a
second conftest would take that name from it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import django
import pytest

from conftest import (
    _MARIADB_PROBLEM as MARIADB_PROBLEM, _POSTGRES_PROBLEM as POSTGRES_PROBLEM, REQUIRE_MARIADB, REQUIRE_POSTGRES)

PROJECT = Path(__file__).parent
SOURCE = PROJECT.parent.parent / "src"
os.environ["LEASED_DJANGO_POSTGRES"] = "0" if POSTGRES_PROBLEM else "1"  # read by testproject.settings
os.environ["LEASED_DJANGO_MARIADB"] = "0" if MARIADB_PROBLEM else "1"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django.setup()

from django.tasks import task_backends  # after setup
from django.test import override_settings

DATABASES = {"sqlite": "default", "postgres": "postgres", "mariadb": "mariadb"}
# Why a database is not there, and whether that fails the test (CI) rather than skipping it.
PROBLEMS = {"postgres": (POSTGRES_PROBLEM, REQUIRE_POSTGRES), "mariadb": (MARIADB_PROBLEM, REQUIRE_MARIADB)}


def require_database(name: str) -> None:
    """Fail or skip the test when database `name` is unreachable (as tests/conftest.py does)."""
    problem, required = PROBLEMS.get(name, (None, False))
    if problem:
        if required:
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(params=list(DATABASES))
def db_alias(request) -> str:
    """Django's database alias, once for SQLite, PostgreSQL and MariaDB each."""
    require_database(request.param)
    return DATABASES[request.param]


@pytest.fixture(scope="session", autouse=True)
def close_leased_connections(django_db_setup) -> Iterator[None]:
    """Before the test databases are dropped, leased's own connections to them are closed."""
    from leased.contrib.django.backend import close_all

    yield
    close_all()


def tasks_setting(db_alias: str, **options: Any) -> dict:
    return {"default": {"BACKEND": "leased.contrib.django.LeasedBackend", "QUEUES": ["default", "mail"],
                        "OPTIONS": {"database": db_alias, **options}}}


@contextmanager
def leased_tasks(db_alias: str, **options: Any) -> Iterator[Any]:
    """TASKS overridden to leased's backend on `db_alias`, as a user's test would; yields the backend."""
    with override_settings(TASKS=tasks_setting(db_alias, **options)):
        yield task_backends["default"]


@pytest.fixture
def backend(db_alias) -> Iterator[Any]:
    with leased_tasks(db_alias) as leased_backend:
        yield leased_backend


def run_async(coroutine: Any) -> Any:
    """asyncio.run(coroutine), then close the Django connections of the thread sync_to_async used
    (a PostgreSQL test database cannot be dropped while they are open)."""
    from asgiref.sync import sync_to_async
    from django.db import connections

    async def and_close() -> Any:
        try:
            return await coroutine
        finally:
            await sync_to_async(connections.close_all)()

    return asyncio.run(and_close())


def job_id(result: Any) -> int:
    """The leased job id of a TaskResult, through the backend that made it."""
    return task_backends[result.backend].job_id(result.id)


def run_queued(backend: Any, **options: Any) -> Any:
    """Run every due task in this process, then return the worker's stats."""
    options.setdefault("concurrency", 1)
    return backend.worker(poll_interval=0.05, **options).run(stop_when_idle=True)


def worker_process(db_alias: str, *arguments: str) -> subprocess.Popen:
    """`manage.py leased_worker` in a process of its own, on this run's test databases."""
    env = {**os.environ, "LEASED_DJANGO_USE_TEST_DBS": "1", "LEASED_DJANGO_DATABASE": db_alias,
           "PYTHONPATH": os.pathsep.join([str(PROJECT), str(SOURCE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "django", "leased_worker", "--poll-interval", "0.1", *arguments],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
