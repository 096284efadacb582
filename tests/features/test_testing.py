"""leased.testing, the helpers users test their handlers with, tested on both backends: run_jobs
and its summary, each redelivery mode, the enqueue assertions, and the clock seam."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import tomllib
from dataclasses import dataclass
from datetime import timedelta

import pytest

from conftest import _MARIADB_PROBLEM, _POSTGRES_PROBLEM, MARIADB_URL, POSTGRES_URL, running_worker, wait_for
from leased import Backoff, ConfigurationError, JobStatus, Outcome, PermanentError, TaskContext
from leased.testing import advance, assert_enqueued, assert_not_enqueued, enqueued, run_jobs
from paths import ROOT


@dataclass
class Email:
    to: str
    subject: str


def test_run_jobs_runs_what_is_due_and_counts_how_it_ended(app):
    @app.task(name="ok")
    def ok(n: int) -> int:
        return n

    @app.task(name="flaky", max_attempts=3, backoff=Backoff(base=60, jitter=0))
    def flaky() -> None:
        raise RuntimeError("later")

    @app.task(name="broken")
    def broken() -> None:
        raise PermanentError("never")

    ok.enqueue(1)
    ok.enqueue(2)
    flaky.enqueue()
    broken.enqueue()
    ok.using(run_after=timedelta(minutes=5)).enqueue(3)
    summary = run_jobs(app)
    assert (summary.done, summary.failed, summary.retried) == (2, 1, 1)
    assert [job.args for job in enqueued(ok)] == [[3]]  # not due yet


def test_twice_runs_each_job_twice_one_run_after_the_other(app):
    runs, inside = [], []

    @app.task(name="count")
    def count(n: int) -> int:
        inside.append(n)
        assert len(inside) == 1, "the second run started before the first ended"
        runs.append(n)
        inside.pop()
        return len(runs)

    job = count.enqueue(7)
    assert run_jobs(app, redeliver="twice").done == 1
    assert runs == [7, 7]
    finished = app.get_job(job.id)
    assert (finished.status, finished.attempt, finished.result) == (JobStatus.DONE, 1, 2)


@pytest.mark.parametrize("is_async", [False, True])
def test_concurrently_overlaps_two_runs(app, is_async):
    entered = []
    both_inside = threading.Event()

    if is_async:
        import asyncio

        @app.task(name="overlap")
        async def overlap() -> None:
            entered.append(1)
            while len(entered) < 2:  # returns only once the other run is inside too
                await asyncio.sleep(0.001)
            both_inside.set()
    else:
        @app.task(name="overlap")
        def overlap() -> None:
            entered.append(1)
            wait_for(lambda: len(entered) == 2, message="the other run")
            both_inside.set()

    overlap.enqueue()
    assert run_jobs(app, redeliver="concurrently").done == 1
    assert both_inside.is_set() and len(entered) == 2


def test_lost_ack_runs_the_job_again_as_a_new_attempt_after_its_lease_runs_out(app):
    runs = []

    @app.task(name="charge", max_attempts=3, lease=30)
    def charge(order: int) -> str:
        runs.append(order)
        return "charged"

    job = charge.enqueue(1)
    summary = run_jobs(app, redeliver="lost_ack")
    assert runs == [1, 1] and summary.done == 1
    finished = app.get_job(job.id)
    assert (finished.status, finished.attempt) == (JobStatus.DONE, 2)
    assert [attempt.outcome for attempt in finished.history] == [Outcome.EXPIRED, Outcome.DONE]


def test_lost_ack_on_the_last_attempt_fails_the_job_as_production_would(app):
    runs = []

    @app.task(name="once", max_attempts=1)
    def once() -> None:
        runs.append(1)

    job = once.enqueue()
    assert run_jobs(app, redeliver="lost_ack").failed == 0
    assert runs == [1] and app.get_job(job.id).status == JobStatus.FAILED
    assert "lease expired" in app.get_job(job.id).last_error


def test_the_readme_example_catches_a_handler_that_is_not_idempotent(app):
    outbox: list[Email] = []
    sent_ids: set[int] = set()

    @app.task(name="send_welcome")
    def send_welcome(user_id: int, email: Email) -> None:
        outbox.append(email)

    @app.task(name="send_welcome_once")
    def send_welcome_once(user_id: int, email: Email) -> None:
        if user_id not in sent_ids:  # the side effect remembers it happened
            sent_ids.add(user_id)
            outbox.append(email)

    for mode in ("twice", "concurrently", "lost_ack"):
        outbox.clear()
        sent_ids.clear()
        send_welcome.enqueue(1, Email("a@example.com", "hi"))
        run_jobs(app, redeliver=mode)
        assert len(outbox) == 2, mode  # the non-idempotent handler sent it twice
        outbox.clear()
        send_welcome_once.enqueue(1, {"to": "a@example.com", "subject": "hi"})
        run_jobs(app, redeliver=mode)
        assert outbox == [Email("a@example.com", "hi")], mode


def test_a_bad_mode_is_a_one_line_error(app):
    app.task(name="x")(lambda: None)
    with pytest.raises(ConfigurationError, match=r"^invalid redeliver 'thrice': use one of 'twice', "):
        run_jobs(app, redeliver="thrice")


def test_enqueue_assertions_match_calls_as_the_handler_binds_them(app):
    @app.task(name="notify", takes_context=True)
    def notify(context: TaskContext, user_id: int, email: Email, urgent: bool = False) -> None: ...

    @app.task(name="other")
    def other() -> None: ...

    notify.enqueue(1, Email("a@example.com", "hi"))
    notify.enqueue(user_id=2, email={"to": "b@example.com", "subject": "yo"}, urgent=True)
    assert assert_enqueued(notify, 1, email=Email("a@example.com", "hi"), urgent=False).args[0] == 1
    assert_enqueued(notify, 2, Email("b@example.com", "yo"), True)
    assert_enqueued(notify)
    assert_not_enqueued(notify, 3, Email("a@example.com", "hi"))
    assert_not_enqueued(other)
    with pytest.raises(AssertionError, match=r"no pending notify job with args \[1, .*pending notify jobs: job "):
        assert_enqueued(notify, 1, Email("a@example.com", "bye"))
    with pytest.raises(AssertionError, match=r"expected no pending notify job .* found job \d+: args \[1, "):
        assert_not_enqueued(notify, 1, Email("a@example.com", "hi"))
    assert [job.kwargs.get("user_id", job.args and job.args[0]) for job in enqueued(notify)] == [1, 2]
    run_jobs(app)
    assert enqueued(notify) == [] and assert_not_enqueued(notify) is None


def test_advancing_the_clock_makes_delayed_jobs_and_backoffs_due(app):
    attempts = []

    @app.task(name="later", max_attempts=2, backoff=Backoff(base=600, jitter=0))
    def later() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")

    job = later.using(run_after=timedelta(hours=2)).enqueue()
    assert run_jobs(app).done == 0 and attempts == []
    advance(app, timedelta(hours=2))
    assert run_jobs(app).retried == 1
    assert run_jobs(app).done == 0  # backing off for 600 s
    advance(app, 600)
    assert run_jobs(app).done == 1 and app.get_job(job.id).attempt == 2
    assert app.why(job.id).summary  # inspection reads the same clock


def test_advancing_the_clock_ticks_periodic_tasks(app):
    ticks = []

    @app.periodic(every=timedelta(hours=1), name="hourly")
    def hourly(scheduled_at) -> None:
        ticks.append(scheduled_at)

    run_jobs(app)  # the first run records where the schedule starts
    before = len(ticks)
    advance(app, timedelta(hours=1))
    run_jobs(app)
    assert len(ticks) == before + 1


def test_advancing_the_clock_expires_a_running_jobs_lease(app):
    started, cancelled = threading.Event(), []

    # A short lease: the worker learns of its loss at its next renewal, a third of a lease later in
    # real time, and the renewal before that one keeps it from running out by the wall clock alone.
    @app.task(name="long", lease=6, takes_context=True, max_attempts=1)
    def long(context: TaskContext) -> None:
        started.set()
        context.cancelled.wait(60)
        cancelled.append(context.cancel_reason)

    job = long.enqueue()
    with running_worker(app):
        assert started.wait(30)
        advance(app, 7)  # the lease, decided by the database's clock, is over
        wait_for(lambda: cancelled, message="the handler to be cancelled")
        wait_for(lambda: app.get_job(job.id).status == JobStatus.FAILED, message="the job reclaimed")
    assert str(cancelled[0]) == "lease lost"
    assert app.get_job(job.id).history[0].outcome is Outcome.EXPIRED


def _still_there(url: str) -> bool:
    """Whether the throwaway schema (PostgreSQL) or database (MariaDB) a plugin's URL names exists."""
    from connections import connect, execute, is_mariadb

    if is_mariadb(url):
        name, server = url.rsplit("/", 1)[1], MARIADB_URL
        query = "SELECT 1 FROM information_schema.schemata WHERE schema_name = ?"
    else:
        name, server = url.rsplit("search_path%3D", 1)[1], POSTGRES_URL
        query = "SELECT 1 FROM pg_namespace WHERE nspname = ?"
    connection = connect(server, autocommit=True)
    try:
        return bool(execute(connection, query, (name,)))
    finally:
        connection.close()


# Each database the plugin knows, named by $LEASED_TEST_DATABASE_URL or the leased_database_url ini option.
@pytest.mark.parametrize(("database", "named_by"), [("sqlite", None), ("postgres", "environment"),
                                                     ("mariadb", "environment"), ("mariadb", "ini")])
def test_the_plugin_is_declared_and_gives_users_its_fixtures(tmp_path, database, named_by):
    problem = {"postgres": _POSTGRES_PROBLEM, "mariadb": _MARIADB_PROBLEM}.get(database)
    if problem:
        pytest.skip(problem)
    server = {"postgres": POSTGRES_URL, "mariadb": MARIADB_URL}.get(database)
    env = {key: value for key, value in os.environ.items() if key != "LEASED_TEST_DATABASE_URL"}
    if named_by == "environment":
        env["LEASED_TEST_DATABASE_URL"] = server
    elif named_by == "ini":
        (tmp_path / "pytest.ini").write_text(f"[pytest]\nleased_database_url = {server}\n")
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert entry_points == {"leased": "leased.testing.plugin"}
    used = tmp_path / "used_url"
    (tmp_path / "test_users_suite.py").write_text(f'''
from pathlib import Path

from leased import PermanentError

def test_fixtures(leased_app, run_jobs, assert_enqueued, enqueued, advance):
    Path({str(used)!r}).write_text(leased_app.database_url)
    sent = []

    @leased_app.task(name="send")
    def send(to: str) -> None:
        sent.append(to)

    send.enqueue("a@example.com")
    assert_enqueued(send, "a@example.com")
    assert run_jobs(leased_app, redeliver="twice").done == 1
    assert sent == ["a@example.com", "a@example.com"] and enqueued(send) == []
''')
    run = subprocess.run([sys.executable, "-m", "pytest", "-q",  # the plugin comes from the pytest11 entry point
                          "-p", "no:cacheprovider", "-p", "no:django",
                          str(tmp_path / "test_users_suite.py")], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    url = used.read_text()
    assert url.startswith({"sqlite": "sqlite:///", "postgres": "postgresql://", "mariadb": "mariadb://"}[database])
    if server is not None:
        assert url != server and not _still_there(url), "a throwaway schema or database of its own, dropped after"
