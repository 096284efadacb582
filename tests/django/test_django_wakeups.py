"""On SQLite and MariaDB, a task enqueued on Django's connection wakes `leased_worker` processes once
it commits.

Neither has NOTIFY: leased's own enqueue sends a datagram to each live worker after its commit.
A task written inside the caller's transaction can be woken for only after that transaction commits,
so the backend calls the leased backend's wake() from transaction.on_commit(). (PostgreSQL's NOTIFY
is delivered at commit by the database itself; test_backend.py's worker tests cover it.)
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+)

from djangotest import DATABASES, close_leased_connections, leased_tasks, require_database, worker_process  # noqa: F401  (fixtures)

from conftest import wait_for
from django.db import transaction
from django.tasks import TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from signups import tasks

from leased.contrib.django.backend import close_all

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

POLL_INTERVAL = "30"  # the worker looks for tasks on its own only every 30 s
WOKEN_WITHIN = 10.0  # so a task run within 10 s was woken for, not polled for


@pytest.fixture(params=["sqlite", "mariadb"])
def no_notify_alias(request) -> str:
    """The Django database alias of a database without NOTIFY."""
    require_database(request.param)
    return DATABASES[request.param]


def succeeded(result) -> bool:
    return tasks.add_async.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


@contextmanager
def sleeping_worker(db_alias: str) -> Iterator[dict[str, str]]:
    """A `leased_worker` process that has run a first task and is now waiting out its 30 s poll;
    yields a dict that holds its output (key "output") once it has stopped."""
    stopped: dict[str, str] = {}
    with leased_tasks(db_alias):
        worker = worker_process(db_alias, "--poll-interval", POLL_INTERVAL)
        try:
            first = tasks.add_async.enqueue(1, 1)  # found by the worker's first look: it is up and listening
            wait_for(lambda: succeeded(first), timeout=60, message="the worker to start and run a first task")
            # A producer re-reads the live workers' ports at most once a second, and this one last
            # read them before the worker had started: start afresh, as a new web process would.
            close_all()
            yield stopped
        finally:
            worker.send_signal(signal.SIGTERM)
            stopped["output"], _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, stopped["output"]


@pytest.mark.slow
def test_a_task_committed_in_atomic_wakes_a_sleeping_worker_process(no_notify_alias):
    with sleeping_worker(no_notify_alias) as worker:
        with transaction.atomic(using=no_notify_alias):
            woken = tasks.add_async.enqueue(2, 3)
        wait_for(lambda: succeeded(woken), timeout=WOKEN_WITHIN,
                 message="the worker to be woken by the commit, not by its 30 s poll")
        assert tasks.add_async.get_result(woken.id).return_value == 5
    assert "stopped: 2 done" in worker["output"]


@pytest.mark.slow
def test_a_rolled_back_enqueue_leaves_no_job_and_the_next_commit_still_wakes(no_notify_alias):
    with sleeping_worker(no_notify_alias) as worker:
        with pytest.raises(RuntimeError), transaction.atomic(using=no_notify_alias):
            gone = tasks.add_async.enqueue(4, 4)
            raise RuntimeError("roll back")
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add_async.get_result(gone.id)

        kept = tasks.add_async.enqueue(5, 5)  # outside atomic(): committed, and woken for, at once
        wait_for(lambda: succeeded(kept), timeout=WOKEN_WITHIN, message="the worker to be woken by the enqueue")
    assert "stopped: 2 done, 0 failed" in worker["output"]  # the rolled-back task never ran
