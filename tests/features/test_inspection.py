"""Inspection: the overview, workers, search and pagination, bulk retry, and worker events."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from conftest import running_worker, wait_for
from two_workers import one_ran_jobs_another_holds_one

from leased import JobStatus, Outcome, PermanentError
from leased.errors import ConfigurationError


def test_overview_counts_waits_and_recent_finishes(app):
    @app.task(name="ok")
    def ok(): ...

    @app.task(name="bad", queue_name="mail")
    def bad():
        raise PermanentError("no")

    ok.enqueue(), ok.enqueue(), bad.enqueue()
    ok.using(run_after=timedelta(hours=1)).enqueue()
    waiting = app.overview()
    default = next(q for q in waiting.queues if q.queue_name == "default")
    assert default.counts["pending"] == 3 and default.oldest_due_seconds >= 0
    app.run_until_empty()
    overview = app.overview(window=timedelta(minutes=5))
    by_queue = {q.queue_name: q for q in overview.queues}
    assert (by_queue["default"].done_recently, by_queue["mail"].failed_recently) == (2, 1)
    assert by_queue["default"].oldest_due_seconds is None  # the delayed job is not due
    assert overview.totals == {"pending": 1, "running": 0, "done": 2, "failed": 1, "cancelled": 0, "waiting": 0,
                               "sleeping": 0}
    assert (app.task_names(), app.queue_names()) == (["bad", "ok"], ["default", "mail"])


def test_workers_announce_themselves_and_sign_off(app):
    started, release = threading.Event(), threading.Event()

    @app.task(name="block")
    def block():
        started.set()
        release.wait(30)

    block.enqueue()
    with running_worker(app, concurrency=3, queues=["default"]) as worker:
        assert started.wait(10)
        (info,) = wait_for(lambda: [w for w in app.workers() if w.running == 1], message="worker row")
        assert (info.id, info.concurrency, info.queues, info.tasks, info.alive) == (
            worker.id, 3, ["default"], ["block", "leased.wait_for"], True)  # and leased's own wait step
        assert [w.id for w in app.overview().workers] == [worker.id]
        release.set()
    assert app.workers() == []


def test_search_by_id_or_key_and_page_both_ways(app):
    @app.task(name="t")
    def t(n): ...

    ids = [t.enqueue(n).id for n in range(5)]
    keyed = t.using(idempotency_key="order:42").enqueue(99)
    assert [job.id for job in app.list_jobs(search=str(ids[2]))] == [ids[2]]
    assert [job.id for job in app.list_jobs(search=ids[2])] == [ids[2]]
    assert [job.id for job in app.list_jobs(search="order:42")] == [keyed.id]
    assert app.list_jobs(search="nothing-like-it") == []
    oldest = app.list_jobs(order="oldest", limit=2)
    assert [job.id for job in oldest] == ids[:2]
    assert [job.id for job in app.list_jobs(order="oldest", limit=2, after_id=oldest[-1].id)] == ids[2:4]


def test_jobs_by_the_worker_that_ran_them_or_holds_them_now(app):
    with one_ran_jobs_another_holds_one(app) as workers:
        first, second, ran, held = workers.first.id, workers.second.id, workers.ran, workers.held
        assert [job.id for job in app.list_jobs(worker_id=second)] == [held]  # held now: no attempt ended yet
        assert [job.id for job in app.list_jobs(worker_id=first)] == ran[::-1]
        assert [job.id for job in app.list_jobs(worker_id=first, order="oldest", limit=1)] == ran[:1]
        assert app.list_jobs(worker_id=first, status="running") == []
    assert [job.id for job in app.list_jobs(worker_id=second)] == [held]  # ran it: its attempt is recorded
    assert app.list_jobs(worker_id="nobody:1:0") == []
    with pytest.raises(ConfigurationError, match="invalid worker_id '  ': use a worker's id"):
        app.list_jobs(worker_id="  ")


def test_retry_failed_takes_back_every_failed_job_of_a_task(app):
    @app.task(name="fragile", max_attempts=1)
    def fragile(n):
        raise RuntimeError("down")

    @app.task(name="other", max_attempts=1)
    def other():
        raise RuntimeError("down")

    for n in range(3):
        fragile.enqueue(n)
    untouched = other.enqueue()
    app.run_until_empty()
    assert app.retry_failed(task_name="fragile") == 3
    assert app.counts()["default"] == {"pending": 3, "running": 0, "done": 0, "failed": 1, "cancelled": 0, "waiting": 0,
                                       "sleeping": 0}
    assert app.get_job(untouched.id).status is JobStatus.FAILED


def test_worker_emits_an_event_per_attempt(app):
    seen = []
    app.events.subscribe(seen.append)
    app.events.subscribe(lambda event: 1 / 0)  # a broken subscriber disturbs nobody

    @app.task(name="twice", max_attempts=2)
    def twice(context=None):
        raise ValueError("x")

    job = twice.enqueue()
    with running_worker(app):
        wait_for(lambda: app.get_job(job.id).status is JobStatus.FAILED, message="both attempts")
        wait_for(lambda: len(seen) == 2, message="two events")
    assert [(e.job_id, e.attempt, e.outcome, e.will_retry) for e in seen] == [
        (job.id, 1, Outcome.ERROR, True), (job.id, 2, Outcome.ERROR, False)]
    assert all(e.task_name == "twice" and e.queue_name == "default" and e.seconds >= 0 for e in seen)
