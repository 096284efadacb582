"""The app's tasks, as a Django developer writes them."""

import os
import time
from pathlib import Path

from django.tasks import task

from leased import Backoff

from signups.models import Signup


@task(priority=10, queue_name="mail")
def send_welcome(signup_id: int, database: str = "default") -> str:
    signup = Signup.objects.using(database).get(id=signup_id)
    signup.welcomed = True
    signup.save(update_fields=["welcomed"], using=database)
    return f"welcomed {signup.email}"


@task(max_attempts=3, backoff=Backoff(base=0, jitter=0))
def flaky(fail_times: int, marker: str) -> int:
    """Fails its first `fail_times` attempts; counts attempts in a file (any worker, any process)."""
    path = Path(marker)
    attempts = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(attempts))
    if attempts <= fail_times:
        raise ConnectionError(f"attempt {attempts} failed")
    return attempts


@task(takes_context=True, max_attempts=3, backoff=Backoff(base=0, jitter=0))
def report_attempt(context, fail_before: int) -> dict:
    if context.attempt < fail_before:
        raise RuntimeError(f"attempt {context.attempt}")
    return {"attempt": context.attempt, "id": context.task_result.id, "workers": len(context.task_result.worker_ids)}


@task()
async def add_async(a: int, b: int) -> int:
    return a + b


@task(lease=1, max_attempts=3)
def slow_once(started_marker: str, done_marker: str) -> int:
    """The first run writes its pid and blocks (its worker is killed); later runs finish."""
    started = Path(started_marker)
    if not started.exists():
        started.write_text(str(os.getpid()))
        while True:
            time.sleep(0.05)
    Path(done_marker).write_text(str(os.getpid()))
    return os.getpid()


@task(takes_context=True)
def report_backend(context) -> str:
    """The TASKS alias the running task's result names."""
    return context.task_result.backend


@task(max_attempts=1)
def interrupting() -> None:
    raise KeyboardInterrupt("raised by the task, not by a signal")


@task(takes_context=True, transactional=True, max_attempts=3, backoff=Backoff(base=0, jitter=0))
def sign_up_once(context, email: str, database: str, fail_on: int = 0, lose_lease_on: int = 0) -> int:
    """Creates a signup in the task's transaction; fails, or loses its lease, on the attempt named."""
    Signup.objects.using(database).create(email=f"{context.attempt}-{email}")
    if context.attempt == fail_on:
        raise RuntimeError(f"attempt {context.attempt} failed")
    if context.attempt == lose_lease_on:
        from django.tasks import task_backends

        from leased.testing import advance

        advance(task_backends["default"].app, 3600)  # the lease runs out before the task returns
    return context.attempt


@task(takes_context=True, max_attempts=2)
def fails_first(context) -> int:
    """Fails its first attempt; the backoff in TASKS' OPTIONS decides when the second runs."""
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return context.attempt


@task()
def in_transaction(database: str) -> bool:
    """Whether the body runs in a transaction on `database` (TASKS' OPTIONS transactional)."""
    from django.db import connections

    return connections[database].in_atomic_block


@task(max_attempts=3)
def returns_a_set() -> set:
    return {1, 2}  # not JSON
