"""Push wake-ups: a job enqueued elsewhere starts without waiting for the next poll.

PostgreSQL: LISTEN/NOTIFY. SQLite: a datagram on loopback to each live worker's recorded port.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from conftest import raw_sql, running_worker, wait_for
from leased import JobStatus, Leased, Outcome
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.metrics import worker_registry

SLOW_POLL = 60.0  # far longer than any wait below: only a wake-up can start these jobs in time


@pytest.fixture
def producer(app, database_url):
    other = Leased(database_url)  # another process's view: enqueueing there notifies no local worker
    yield other
    other.close()


def listening(app) -> int:
    """Listening connections of this test's schema (their channel names the schema)."""
    import psycopg

    with psycopg.connect(app.database_url, autocommit=True) as connection:
        channel = connection.execute("SELECT left('leased.' || current_schema(), 63)").fetchone()[0]
        return connection.execute("SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                                  (f'LISTEN "{channel}"',)).fetchone()[0]


def test_a_job_enqueued_elsewhere_wakes_the_worker(app, producer, capabilities):
    app.task(name="wake")(lambda: None)
    wake = producer.task(name="wake")(lambda: None)
    with running_worker(app, poll_interval=SLOW_POLL):
        if capabilities.listen_notify:
            wait_for(lambda: listening(app), message="the listener to connect")
        else:  # a datagram to the port the worker recorded in its row
            wait_for(lambda: app.workers(), message="the worker to record its port")
        for _ in range(3):
            job = wake.enqueue()
            wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, timeout=20, message="a pushed start")
        # A run_after already past is due now too: it wakes the workers as well (MariaDB's enqueue
        # once woke them only for jobs without a run_after).
        job = wake.using(run_after=datetime.now(UTC) - timedelta(minutes=1)).enqueue()
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, timeout=20, message="a pushed start")


@pytest.mark.needs("listen_notify")  # the listener's own connection, killed
def test_the_listener_reconnects_after_its_connection_is_killed(app, producer, caplog):
    import psycopg

    caplog.set_level(logging.INFO, logger="leased.worker")
    wake = producer.task(name="wake")(lambda: None)
    app.task(name="wake")(lambda: None)
    metrics = worker_registry(app.events)

    def scraped(name: str) -> float | None:
        return metrics.get_sample_value(name)

    with running_worker(app, poll_interval=SLOW_POLL):
        wait_for(lambda: listening(app), message="the listener to connect")
        assert (scraped("leased_listener_lost_total"), scraped("leased_listener_reconnects_total")) == (0, 0)
        with psycopg.connect(app.database_url, autocommit=True) as connection:
            channel = connection.execute("SELECT left('leased.' || current_schema(), 63)").fetchone()[0]
            connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s",
                               (f'LISTEN "{channel}"',))
        wait_for(lambda: any("reconnected" in r.getMessage() for r in caplog.records), message="a reconnect")
        wait_for(lambda: scraped("leased_listener_reconnects_total") == 1, message="the reconnect in the metrics")
        assert scraped("leased_listener_lost_total") == 1
        job = wake.enqueue()
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, timeout=20, message="a pushed start")
    assert any("wake-up listener lost" in r.getMessage() for r in caplog.records)


def test_push_can_be_turned_off_for_connection_poolers(app, producer):
    app.task(name="wake")(lambda: None)
    job = producer.task(name="wake")(lambda: None).enqueue()
    with running_worker(app, poll_interval=0.05, push=False):
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="a polled start")


def failed_job(app, producer):
    """A job that failed for good, made through the storage verbs: a worker here would leave a
    listener or a worker row behind that the wait for the test's own worker could mistake for it."""
    app.task(name="flaky", max_attempts=1)(lambda: None)
    producer.task(name="flaky", max_attempts=1)(lambda: None)
    job = app.get_task("flaky").enqueue()
    (claimed,) = app.backend.claim(ClaimRequest("setup", ("flaky",), None, 1))
    app.backend.finish([AttemptEnd(claimed.lease, Outcome.ERROR, error_type="ValueError", error_message="once")])
    assert app.get_job(job.id).status is JobStatus.FAILED
    return job


def wait_until_listening(app, capabilities) -> None:
    if capabilities.listen_notify:
        wait_for(lambda: listening(app) >= 1, message="the listener to connect")
    else:
        wait_for(lambda: app.workers(), message="the worker to record its port")


@pytest.mark.parametrize("how", ["one", "every failed"])
def test_a_retry_elsewhere_wakes_the_worker(app, producer, capabilities, how):
    # The retry comes from another Leased (as from the CLI or the dashboard in another process):
    # only a cross-process wake-up can start the job before the worker's 60 s poll.
    job = failed_job(app, producer)
    with running_worker(app, poll_interval=SLOW_POLL):
        wait_until_listening(app, capabilities)
        if how == "one":
            producer.retry(job.id)
        else:
            assert producer.retry_failed(task_name="flaky") == 1
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, timeout=20, message="a pushed start")


def test_wake_workers_reaches_the_workers_of_another_app_on_the_database(app, producer, capabilities):
    # A job made due behind leased's back (an operator's UPDATE): no commit of leased's tells the
    # workers, so a worker polling once a minute sleeps on until wake_workers() nudges every worker
    # on the database, not only the calling app's own (it once woke only those).
    app.task(name="later")(lambda: None)
    later = producer.task(name="later")(lambda: None)
    job = later.using(run_after=datetime.now(UTC) + timedelta(hours=1)).enqueue()
    with running_worker(app, poll_interval=SLOW_POLL):
        if capabilities.listen_notify:
            wait_for(lambda: listening(app), message="the listener to connect")
        else:
            wait_for(lambda: app.workers(), message="the worker to record its port")
        raw_sql(app, f"UPDATE leased_jobs SET run_after = created_at WHERE id = {job.id}")
        producer.wake_workers()
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, timeout=20, message="a nudged start")


def test_a_signal_sent_elsewhere_starts_the_job_that_waits_for_it(app, producer, capabilities):
    # The signal makes the sleeping job pending in the sender's transaction: PostgreSQL's NOTIFY
    # rides that commit, and elsewhere the sender's datagram follows it, as for an enqueue.
    @app.task(name="approval", takes_context=True)
    def approval(context):
        return context.wait_for("approved")

    waits = producer.task(name="approval", takes_context=True)(lambda context: None)
    with running_worker(app, poll_interval=SLOW_POLL):
        if capabilities.listen_notify:
            wait_for(lambda: listening(app), message="the listener to connect")
        else:
            wait_for(lambda: app.workers(), message="the worker to record its port")
        job = waits.enqueue()
        wait_for(lambda: app.get_job(job.id).status is JobStatus.SLEEPING, timeout=20, message="the wait")
        producer.signal(job.id, "approved", {"by": "ann"})
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, timeout=20, message="a pushed resume")
    assert app.get_job(job.id).result == {"by": "ann"}
