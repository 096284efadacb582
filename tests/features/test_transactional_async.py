"""Async transactional handlers, on PostgreSQL (context.connection a psycopg.AsyncConnection) and
SQLite (an aiosqlite.Connection): what the handler writes through it commits with its end, fenced
on the lease, or rolls back. MariaDB refuses the declaration, saying why and what to write instead."""

from __future__ import annotations

import asyncio
import threading
from typing import Iterator

import aiosqlite
import psycopg
import pytest

from leased import ConfigurationError, InvalidTransition, Leased, TaskContext
from leased.backends import DIALECTS
from leased.jobs import JobStatus, Outcome
from leased.testing import advance

from conftest import postgres_schema, raw_rows, raw_sql, running_worker, wait_for


@pytest.fixture(params=[name for name, kind in DIALECTS.items() if kind.capabilities.async_transactions])
def backend_name(request) -> str:
    return request.param


@pytest.fixture
def app(backend_name, tmp_path) -> Iterator[Leased]:
    if backend_name == "sqlite":
        application = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")
        yield application
        application.close()
        return
    with postgres_schema() as url:
        application = Leased(url)
        yield application
        application.close()


@pytest.fixture
def effects(app):
    raw_sql(app, "CREATE TABLE effects (job_id BIGINT NOT NULL, attempt INTEGER NOT NULL, note VARCHAR(100))")
    return lambda: sorted(tuple(row) for row in raw_rows(app, "SELECT job_id, attempt, note FROM effects"))


async def write_effect(context: TaskContext, note: str) -> None:
    mark = "?" if isinstance(context.connection, aiosqlite.Connection) else "%s"
    await context.connection.execute(f"INSERT INTO effects (job_id, attempt, note) VALUES ({mark}, {mark}, {mark})",
                                     (context.job_id, context.attempt, note))


def test_the_handlers_writes_commit_with_its_end(app, effects, backend_name):
    seen = []

    @app.task(name="credit", transactional=True, takes_context=True)
    async def credit(context: TaskContext, note: str) -> dict:
        seen.append(type(context.connection))
        await write_effect(context, note)
        return {"written": note}

    job = credit.enqueue("paid")
    app.run_until_empty()
    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == {"written": "paid"}
    assert seen == [psycopg.AsyncConnection if backend_name == "postgres" else aiosqlite.Connection]
    assert effects() == [(job.id, 1, "paid")]
    assert app.job_counts().by_queue["default"]["done"] == 1


def test_a_handler_that_raises_writes_nothing_and_is_retried(app, effects):
    """Its writes roll back, and so does a job it enqueued on its connection (aenqueue)."""
    follow = app.task(name="follow")(lambda n: n)

    @app.task(name="flaky", transactional=True, takes_context=True, max_attempts=2)
    async def flaky(context: TaskContext) -> None:
        await write_effect(context, f"attempt {context.attempt}")
        await follow.using(connection=context.connection).aenqueue(context.attempt)
        if context.attempt == 1:
            raise RuntimeError("the ledger is busy")

    job = flaky.enqueue()
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()
    done = app.get_job(job.id)
    assert [attempt.outcome for attempt in done.history] == [Outcome.ERROR, Outcome.DONE]
    assert effects() == [(job.id, 2, "attempt 2")]
    assert [followed.args for followed in app.list_jobs(task_name="follow")] == [[2]]


def test_a_lease_lost_while_the_handler_ran_writes_nothing(app, effects):
    @app.task(name="slow", transactional=True, takes_context=True, lease=30)
    async def slow(context: TaskContext) -> int:
        await write_effect(context, f"attempt {context.attempt}")
        if context.attempt == 1:
            await asyncio.to_thread(advance, app, 3600)  # the lease runs out meanwhile
        return context.attempt

    job = slow.enqueue()
    app.run_until_empty()
    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == 2
    assert done.history[0].outcome in (Outcome.LEASE_LOST, Outcome.EXPIRED)
    assert effects() == [(job.id, 2, "attempt 2")]


def test_a_cancel_stops_the_handler_and_rolls_it_back(app, effects, capabilities):
    """On PostgreSQL a user's cancel stops the handler and its writes roll back. On SQLite the
    handler holds the one write lock, so the cancel waits for its commit, and then finds the job
    done (as a sync handler's does)."""
    started = threading.Event()

    @app.task(name="long", transactional=True, takes_context=True, max_attempts=1, lease=1.5)
    async def long(context: TaskContext) -> None:
        await write_effect(context, "long")
        started.set()
        if capabilities.single_writer:
            await asyncio.sleep(0.2)  # the cancel below is waiting for the write lock meanwhile
            return
        await asyncio.sleep(60)  # cancelled here (asyncio.CancelledError), at the next renewal

    job = long.enqueue()
    with running_worker(app):
        wait_for(lambda: started.is_set(), message="the handler to start")
        if capabilities.single_writer:
            with pytest.raises(InvalidTransition, match="it is done"):
                app.cancel(job.id)
            assert effects() == [(job.id, 1, "long")]
            return
        app.cancel(job.id)
        wait_for(lambda: app.get_job(job.id).history[0].outcome is not None, message="the attempt's end")
    cancelled = app.get_job(job.id)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.history[0].outcome is Outcome.CANCELLED
    assert effects() == []


def test_a_time_limit_rolls_the_handler_back(app, effects):
    @app.task(name="stuck", transactional=True, takes_context=True, timeout=0.5, max_attempts=1)
    async def stuck(context: TaskContext) -> None:
        await write_effect(context, "before the limit")
        await asyncio.sleep(60)

    job = stuck.enqueue()
    app.run_until_empty()
    assert [attempt.outcome for attempt in app.get_job(job.id).history] == [Outcome.TIMEOUT]
    assert effects() == []


def test_a_durable_steps_record_commits_with_the_end(app, effects):
    """In an async transactional handler a step's record is in the attempt's transaction: an
    attempt that fails after the step rolls the record back with its writes, so the step runs again."""
    calls = []

    @app.task(name="onboard", transactional=True, takes_context=True, max_attempts=2)
    async def onboard(context: TaskContext) -> str:
        async def create():
            calls.append(context.attempt)
            await write_effect(context, "customer")
            return {"id": "cus_1"}

        customer = await context.astep("create_customer", create)
        if context.attempt == 1:
            raise ConnectionError("mail is down")
        return customer["id"]

    job = onboard.enqueue()
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()
    assert app.get_job(job.id).result == "cus_1"
    assert calls == [1, 2], "the first attempt's record rolled back with its effect"
    assert [(step.name, step.attempt) for step in app.job_steps(job.id)] == [("create_customer", 2)]
    assert effects() == [(job.id, 2, "customer")]


def test_a_workflow_steps_end_releases_its_child_in_the_same_transaction(app, effects):
    @app.task(name="charge", transactional=True, takes_context=True)
    async def charge(context: TaskContext) -> str:
        await write_effect(context, "charged")
        return "charged"

    @app.task(name="ship", takes_context=True)
    def ship(context: TaskContext):
        return context.parent_results

    wf = app.workflow("order")
    wf.add(ship, after=[wf.add(charge)])
    run = wf.enqueue()
    app.run_until_empty()
    assert app.get_job(run.job_ids["ship"]).result == {"charge": "charged"}
    assert len(effects()) == 1


def test_mariadb_refuses_an_async_transactional_task():
    app = Leased("mariadb://root@127.0.0.1/test")
    with pytest.raises(ConfigurationError) as refused:
        @app.task(name="credit", transactional=True, takes_context=True)
        async def credit(context):
            pass
    assert str(refused.value) == (
        "task 'credit' is transactional and async: an async transactional handler writes through an async driver "
        "(psycopg's AsyncConnection on PostgreSQL, aiosqlite on SQLite), and leased runs no async driver for "
        "MariaDB; define it with def (it runs on a handler thread, with the driver's connection)")


def test_a_handler_timed_out_while_it_waits_for_sqlites_write_lock_leaves_it_free(tmp_path):
    """The lock is waited for on a thread: an attempt cancelled meanwhile (its time limit) lets go
    of it as soon as that thread gets it, so the jobs after it still run. Both jobs are claimed
    together and the first in claim order asks for the lock first; should the other win the race,
    it times out holding the lock instead, and the same ends follow."""
    app = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.task(name="holds", transactional=True, takes_context=True, priority=1)
    async def holds(context: TaskContext) -> str:
        await asyncio.sleep(1.0)  # the write lock is this attempt's meanwhile
        return "held"

    @app.task(name="waits", transactional=True, takes_context=True, timeout=0.3, max_attempts=1)
    async def waits(context: TaskContext) -> str:
        await asyncio.sleep(1.0)
        return "never: past its time limit"

    @app.task(name="after", transactional=True, takes_context=True)
    async def after(context: TaskContext) -> str:
        return "ran"

    first, second = holds.enqueue(), waits.enqueue()
    with running_worker(app, concurrency=2):
        wait_for(lambda: app.get_job(first.id).is_finished and app.get_job(second.id).is_finished,
                 message="both attempts' ends")
        third = after.enqueue()
        wait_for(lambda: app.get_job(third.id).is_finished, message="the job after them")
    assert app.get_job(first.id).result == "held"
    assert [attempt.outcome for attempt in app.get_job(second.id).history] == [Outcome.TIMEOUT]
    assert app.get_job(third.id).result == "ran"
    app.close()


def test_sqlite_without_aiosqlite_says_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "aiosqlite" else real(name, *rest))
    app = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError,
                       match=r"pip install aiosqlite \(or 'leased\[aiosqlite\]'\), or define the handler with def"):
        @app.task(name="credit", transactional=True, takes_context=True)
        async def credit(context):
            pass
