"""SQLite's one write lock, held by a long transaction in the user's code: a healthy worker keeps
its leases while the lock is held for less than a lease, and when it is held longer, the log and
the attempt's history say that the lock, not the worker, kept the lease from being renewed."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from contextlib import contextmanager
from typing import Iterator

import pytest

from conftest import running_worker, wait_for
from leased import JobStatus, Leased, Outcome


@contextmanager
def write_lock_held(path) -> Iterator[threading.Event]:
    """Another connection holds the write lock (as `with conn:` around a write and a long pause
    would) from entry until the yielded event is set."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(60)
        connection.execute("COMMIT")
        connection.close()

    thread = threading.Thread(target=hold, name="lock-holder")
    thread.start()
    assert held.wait(30), "the lock holder did not get the lock"
    try:
        yield release
    finally:
        release.set()
        thread.join()


@pytest.fixture
def sqlite_app(tmp_path) -> Iterator[Leased]:
    application = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield application
    application.close()


def _logged(caplog, *parts: str) -> bool:
    return any(all(part in record.getMessage() for part in parts) for record in list(caplog.records))


def test_a_write_lock_held_for_less_than_the_lease_costs_the_worker_nothing(sqlite_app, caplog):
    caplog.set_level(logging.INFO, logger="leased.worker")
    started, finish = threading.Event(), threading.Event()

    @sqlite_app.task(name="long", lease=2.0, max_attempts=1)
    def long():
        started.set()
        assert finish.wait(60)
        return "done"

    job = long.enqueue()
    with running_worker(sqlite_app):
        assert started.wait(30)
        with write_lock_held(sqlite_app.backend.path):
            # Held past the renewal that was due a third of a lease in (about 1.5 renewal intervals).
            wait_for(lambda: _logged(caplog, "could not renew", "write lock"), message="a renewal to be blocked")
        wait_for(lambda: _logged(caplog, "renewal went through after failing", "1 of 1 lease(s) still held"),
                 message="the renewal after the lock")
        finish.set()
        wait_for(lambda: sqlite_app.get_job(job.id).status is JobStatus.DONE, message="the job done")
    done = sqlite_app.get_job(job.id)
    assert done.attempt == 1 and [a.outcome for a in done.history] == [Outcome.DONE]
    assert not _logged(caplog, "lease lost")


def test_a_write_lock_held_past_the_lease_is_named_in_the_log_and_the_history(sqlite_app, caplog):
    caplog.set_level(logging.INFO, logger="leased.worker")
    started = threading.Event()

    @sqlite_app.task(name="long", lease=1.0, max_attempts=2, takes_context=True)
    async def long(context):
        if context.attempt == 1:
            started.set()
            await asyncio.Event().wait()  # until cancelled
        return "done"

    job = long.enqueue()
    with running_worker(sqlite_app):
        assert started.wait(30)
        with write_lock_held(sqlite_app.backend.path):
            wait_for(lambda: _logged(caplog, "lease lost", "write lock"), message="the handler to be cancelled")
        wait_for(lambda: sqlite_app.get_job(job.id).status is JobStatus.DONE, message="the second attempt")
        wait_for(lambda: "write lock" in (sqlite_app.get_job(job.id).history[0].error_message or ""),
                 message="the first attempt's record to name the lock")
    first = sqlite_app.get_job(job.id).history[0]
    assert first.outcome in (Outcome.EXPIRED, Outcome.LEASE_LOST)
    assert "could not renew its lease for" in first.error_message and "stopped renewing" not in first.error_message
