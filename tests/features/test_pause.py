"""Pausing a queue: its due jobs wait while other queues run, running jobs finish, enqueue works,
and resuming wakes workers at once, on every backend."""

from __future__ import annotations

import threading

import pytest

from conftest import running_worker, wait_for
from leased import ConfigurationError, JobStatus, Leased


@pytest.fixture
def tasks(app):
    release = threading.Event()

    @app.task(name="bill", queue_name="billing")
    def bill(n):
        return n

    @app.task(name="mail")
    def mail(n):
        return n

    @app.task(name="slow_bill", queue_name="billing")
    def slow_bill():
        release.wait(30)
        return "finished"

    return bill, mail, slow_bill, release


def status(app, job) -> JobStatus:
    return app.get_job(job.id).status


def test_a_paused_queues_due_jobs_wait_while_other_queues_run(app, tasks):
    bill, mail, _, _ = tasks
    bill.enqueue(0)
    assert app.pause("billing") is True
    assert app.pause("billing") is False  # already paused
    waiting = bill.enqueue(1)  # enqueue keeps working while paused
    other = mail.enqueue(2)
    with running_worker(app) as worker:
        wait_for(lambda: status(app, other) is JobStatus.DONE, message="the other queue's job")
        later = mail.enqueue(3)  # a claim after this one would have taken billing's jobs too
        wait_for(lambda: status(app, later) is JobStatus.DONE, message="a later claim")
        assert status(app, waiting) is JobStatus.PENDING
        assert app.counts()["billing"]["pending"] == 2
        assert app.resume("billing") is True
        wait_for(lambda: app.counts()["billing"]["done"] == 2, message="billing's jobs after resume")
    assert worker.stats.done == 4
    assert app.resume("billing") is False  # not paused


def test_a_running_job_finishes_after_its_queue_is_paused(app, tasks):
    _, mail, slow_bill, release = tasks
    running = slow_bill.enqueue()
    with running_worker(app):
        wait_for(lambda: status(app, running) is JobStatus.RUNNING, message="the job to start")
        app.pause("billing")
        queued = slow_bill.enqueue()
        release.set()
        wait_for(lambda: status(app, running) is JobStatus.DONE, message="the running job to finish")
        after = mail.enqueue(1)
        wait_for(lambda: status(app, after) is JobStatus.DONE, message="a claim after the pause")
        assert status(app, queued) is JobStatus.PENDING
    assert app.get_job(running.id).result == "finished"


def test_resume_wakes_a_worker_with_a_long_poll_interval(app, tasks, database_url):
    bill, _, _, _ = tasks
    app.pause("billing")
    job = bill.enqueue(7)
    with running_worker(app, poll_interval=3600) as worker:
        wait_for(lambda: app.workers(), message="the worker to announce itself")  # its wake-up port, on SQLite
        wait_for(lambda: worker.stats.claimed == 0 and app.get_job(job.id).status is JobStatus.PENDING)
        # From another Leased, as `leased resume` would: only the database's wake-up reaches the
        # worker (NOTIFY on PostgreSQL, a datagram on SQLite), not this process's own shortcut.
        other = Leased(database_url)
        try:
            assert other.resume("billing") is True
        finally:
            other.close()
        wait_for(lambda: status(app, job) is JobStatus.DONE, message="the woken worker (poll interval 1 h)")


def test_a_paused_queue_shows_in_the_overview_even_without_jobs(app, tasks):
    bill, mail, _, _ = tasks
    mail.enqueue(1)
    app.pause("reports", force=True)
    bill.enqueue(1)
    app.pause("billing")
    queues = {queue.queue_name: queue for queue in app.overview().queues}
    assert queues["billing"].paused and queues["reports"].paused and not queues["default"].paused
    assert queues["billing"].paused_seconds >= 0
    assert app.paused_queues() == ["billing", "reports"]
    app.resume("reports")
    assert app.paused_queues() == ["billing"]


def test_unknown_and_invalid_queue_names_are_one_line_errors(app, tasks):
    _, mail, _, _ = tasks
    mail.using(queue_name="mail").enqueue(1)
    with pytest.raises(ConfigurationError,
                       match=r"unknown queue 'biling'.*known queues: billing, default, mail\).*force=True"):
        app.pause("biling")
    with pytest.raises(ConfigurationError, match="unknown queue 'biling'"):
        app.resume("biling")
    with pytest.raises(ConfigurationError, match="invalid queue_name 'no spaces'"):
        app.pause("no spaces", force=True)
    assert app.pause("billing") is True  # a task's queue, ahead of its first job
    assert app.pause("reports", force=True) is True  # no task or job uses it yet
    assert app.paused_queues() == ["billing", "reports"]


def test_a_paused_queue_holds_back_its_limited_and_keyed_jobs_too(app):
    # Limited jobs are claimed by another query (claim_limited): the pause must hold there as well.
    @app.task(name="sync_customer", queue_name="billing", concurrency=1, concurrency_key="customer:{customer}")
    def sync_customer(customer):
        return customer

    @app.task(name="invoice", queue_name="billing")
    def invoice(n):
        return n

    @app.task(name="mail")
    def mail(n):
        return n

    app.limit("billing", concurrency=5)
    keyed, limited, other = sync_customer.enqueue(1), invoice.enqueue(2), mail.enqueue(3)
    app.pause("billing")
    app.run_until_empty()
    assert [status(app, job) for job in (keyed, limited, other)] == ["pending", "pending", "done"]
    app.resume("billing")
    app.run_until_empty()
    assert [status(app, job) for job in (keyed, limited)] == ["done", "done"]
