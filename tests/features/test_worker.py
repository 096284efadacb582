"""The worker end to end: results, retries, cancellation, lease loss, shutdown and no deadlock."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import datetime, timezone

import pytest

from conftest import raw_scalar, raw_sql, running_worker, wait_for
from leased import Backoff, CancelReason, JobStatus, Leased, Outcome, PermanentError, TaskContext
from leased.backends.ports import ClaimRequest

FAST = Backoff(base=0.01, cap=0.05, jitter=0.5)


def test_results_of_sync_and_async_handlers_are_stored(app):
    @app.task(name="add")
    def add(a, b):
        return {"sum": a + b}

    @app.task(name="shout")
    async def shout(word):
        await asyncio.sleep(0)
        return word.upper()

    first, second = add.enqueue(2, 3), shout.enqueue("hi")
    stats = app.run_until_empty(concurrency=2)
    assert stats.done == 2
    assert app.get_job(first.id).result == {"sum": 5}
    done = app.get_job(second.id)
    assert done.status is JobStatus.DONE and done.result == "HI"
    assert [(a.number, a.outcome) for a in done.history] == [(1, Outcome.DONE)]
    assert done.history[0].duration is not None


def test_failures_retry_with_backoff_then_fail_with_the_last_error(app):
    calls = []

    @app.task(name="flaky", max_attempts=3, backoff=FAST)
    def flaky():
        calls.append(1)
        raise ConnectionError(f"relay down #{len(calls)}")

    job = flaky.enqueue()
    with running_worker(app, concurrency=2):
        wait_for(lambda: app.get_job(job.id).status is JobStatus.FAILED, message="job to fail")
    failed = app.get_job(job.id)
    assert len(calls) == 3 and failed.attempt == 3
    assert failed.last_error == "ConnectionError: relay down #3"
    assert [a.outcome for a in failed.history] == [Outcome.ERROR] * 3
    assert all("ConnectionError" in a.traceback for a in failed.history)


def test_flaky_job_succeeds_on_a_later_attempt(app):
    @app.task(name="second_time_lucky", backoff=FAST, takes_context=True)
    def second_time_lucky(context: TaskContext):
        if context.attempt == 1:
            raise TimeoutError("first try")
        return context.attempt

    job = second_time_lucky.enqueue()
    with running_worker(app):
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="retry to succeed")
    assert app.get_job(job.id).result == 2


def test_permanent_error_and_bad_arguments_fail_at_once(app):
    @app.task(name="reject", max_attempts=5)
    def reject(order_id):
        raise PermanentError(f"order {order_id} does not exist")

    bad = reject.enqueue("o-1")
    hand_edited = reject.enqueue("o-2")
    raw_sql(app, f"UPDATE leased_jobs SET kwargs = '{{\"colour\": 1}}' WHERE id = {hand_edited.id}")
    app.run_until_empty()
    job = app.get_job(bad.id)
    assert job.status is JobStatus.FAILED and job.attempt == 1
    assert job.last_error == "PermanentError: order o-1 does not exist"
    edited = app.get_job(hand_edited.id)
    assert edited.status is JobStatus.FAILED and edited.attempt == 1
    assert "arguments do not match reject(order_id)" in edited.last_error


def test_result_that_is_not_json_fails_the_job_clearly(app):
    @app.task(name="returns_object")
    def returns_object():
        return object()

    job = returns_object.enqueue()
    app.run_until_empty()
    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and "return value" in failed.last_error


def test_context_carries_job_and_attempt(app):
    seen = {}

    @app.task(name="introspect", takes_context=True)
    def introspect(context, label):
        seen.update(job_id=context.job_id, attempt=context.attempt, label=label, cancelled=context.is_cancelled)

    job = introspect.enqueue("x")
    app.run_until_empty()
    assert seen == {"job_id": job.id, "attempt": 1, "label": "x", "cancelled": False}


def test_cancelling_a_running_job_stops_its_handler(app):
    # The worker hears of a cancel on its next renewal (a third of the lease); a lease of seconds, not
    # of a fraction of one, so that a machine busy for a moment does not let it expire first.
    started, stopped = threading.Event(), threading.Event()
    reasons = []

    @app.task(name="long_sync", takes_context=True, lease=3.0)
    def long_sync(context):
        started.set()
        context.cancelled.wait(30)
        reasons.append(context.cancel_reason)
        stopped.set()
        return "should be discarded"

    @app.task(name="long_async", takes_context=True, lease=3.0)
    async def long_async(context):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            reasons.append(context.cancel_reason)
            raise

    sync_job, async_job = long_sync.enqueue(), long_async.enqueue()
    with running_worker(app, concurrency=2):
        wait_for(lambda: started.is_set() and app.get_job(async_job.id).status is JobStatus.RUNNING)
        app.cancel(sync_job.id)
        app.cancel(async_job.id)
        assert stopped.wait(10)
        wait_for(lambda: len(reasons) == 2, message="both handlers to see the cancellation")
    assert reasons == [CancelReason.CANCELLED, CancelReason.CANCELLED]
    for job_id in (sync_job.id, async_job.id):
        job = app.get_job(job_id)
        assert job.status is JobStatus.CANCELLED and job.result is None
        assert job.history[-1].outcome is Outcome.CANCELLED


class InjectedFault:
    """The real backend, with one method overridden by a subclass to inject a fault."""

    def __init__(self, backend):
        self._backend = backend

    def __getattr__(self, name):
        return getattr(self._backend, name)


def test_lost_lease_cancels_the_handler_and_discards_its_result(app):
    started, returned = threading.Event(), threading.Event()
    reasons = []

    @app.task(name="slow", takes_context=True, lease=3.0)
    def slow(context):
        started.set()
        context.cancelled.wait(30)
        reasons.append(context.cancel_reason)
        returned.set()
        return "late result"

    job = slow.enqueue()
    with running_worker(app):
        assert started.wait(10)
        raw_sql(app, f"UPDATE leased_jobs SET lease_owner = 'another-worker' WHERE id = {job.id}")
        assert returned.wait(20)
    # The worker stopped, so it has given the lease back (a stop waits for every attempt's end).
    assert reasons == [CancelReason.LEASE_LOST]
    lost = app.get_job(job.id)
    assert lost.result is None
    assert (lost.status, lost.lease_owner) == (JobStatus.RUNNING, "another-worker")  # not ours to touch
    # Nor is the attempt's record: the history shows the holder's attempt running, no outcome of ours.
    assert [(a.worker_id, a.outcome) for a in lost.history] == [("another-worker", None)]


def test_graceful_shutdown_lets_running_jobs_finish(app):
    started, proceed = threading.Event(), threading.Event()

    @app.task(name="finishing")
    def finishing():
        started.set()
        proceed.wait(30)
        return "finished"

    job = finishing.enqueue()
    later = finishing.using(run_after=None).enqueue()
    with running_worker(app, concurrency=1, shutdown_grace=30) as worker:
        assert started.wait(10)
        worker.stop()
        proceed.set()
    assert app.get_job(job.id).result == "finished"
    assert app.get_job(later.id).status is JobStatus.PENDING  # no claims after stop


def test_shutdown_past_the_grace_period_releases_jobs_at_once(app):
    started = threading.Event()
    seen = []

    @app.task(name="stubborn", takes_context=True)
    async def stubborn(context):
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            seen.append(context.cancel_reason)

    job = stubborn.enqueue()
    began = time.monotonic()
    with running_worker(app, shutdown_grace=0.2):
        assert started.wait(10)
    assert time.monotonic() - began < 30
    released = app.get_job(job.id)
    assert released.status is JobStatus.PENDING and released.lease_owner is None
    assert released.history[0].outcome is Outcome.SHUTDOWN
    assert seen == [CancelReason.SHUTDOWN]


def test_a_cancelled_sync_handler_that_ignores_it_does_not_hold_up_the_shutdown(app):
    started, release, returned = threading.Event(), threading.Event(), threading.Event()

    @app.task(name="deaf", lease=3.0)
    def deaf():
        started.set()
        release.wait(60)  # never looks at its context
        returned.set()

    job = deaf.enqueue()
    try:
        with running_worker(app, shutdown_grace=60):
            assert started.wait(10)
            app.cancel(job.id)
            wait_for(lambda: app.get_job(job.id).history[0].outcome is Outcome.CANCELLED, message="attempt closed")
        assert not returned.is_set()  # the worker stopped while the handler still ran
    finally:
        release.set()
    assert app.get_job(job.id).status is JobStatus.CANCELLED


def test_second_stop_forces_cancellation(app):
    started = threading.Event()

    @app.task(name="sleeper", takes_context=True)
    def sleeper(context):
        started.set()
        context.cancelled.wait(60)

    job = sleeper.enqueue()
    with running_worker(app, shutdown_grace=600) as worker:
        assert started.wait(10)
        worker.stop()
        wait_for(lambda: worker.stopping, message="first stop")
        worker.stop()  # the second must not wait out the 600 s grace
    assert app.get_job(job.id).status is JobStatus.PENDING


def test_many_more_jobs_than_slots_all_finish(app):
    """The seed's deadlock: a worker waiting for its heartbeat, which waited for the job to end."""

    @app.task(name="tick", lease=0.5)
    def tick(n):
        return n

    @app.task(name="atick", lease=0.5)
    async def atick(n):
        return n

    jobs = [tick.enqueue(n) for n in range(60)] + [atick.enqueue(n) for n in range(60)]
    with running_worker(app, concurrency=3):
        wait_for(lambda: app.counts()["default"]["done"] == len(jobs), timeout=60, message="all jobs done")
    assert all(app.get_job(job.id).result == job.args[0] for job in jobs[::17])


def test_jobs_of_unregistered_tasks_wait_instead_of_burning_attempts(app, database_url):
    producer = Leased(database_url)

    @producer.task(name="not_deployed_here")
    def not_deployed_here(): ...

    job = not_deployed_here.enqueue()

    @app.task(name="something_else")
    def something_else(): ...

    app.run_until_empty()
    assert app.get_job(job.id).status is JobStatus.PENDING and app.get_job(job.id).attempt == 0
    producer.close()


class UnreachableForRenewals(InjectedFault):
    """The real backend, except that renewals cannot reach the database."""

    def renew(self, leases, wait_seconds=None, progress=None):
        from leased import DatabaseUnavailable

        raise DatabaseUnavailable("connection refused (injected)")


def test_worker_that_cannot_renew_cancels_its_handler_before_the_lease_runs_out(app):
    app._backend = UnreachableForRenewals(app.backend)
    seen = []

    @app.task(name="patient", takes_context=True, lease=0.6)
    def patient(context):
        context.cancelled.wait(30)
        lease_ends = app.backend.get_job(context.job_id).lease_expires_at
        seen.append((context.cancel_reason, lease_ends > datetime.now(timezone.utc)))

    patient.enqueue()
    with running_worker(app):
        wait_for(lambda: seen, message="handler to be cancelled")
    assert seen[0] == (CancelReason.LEASE_LOST, True)  # cancelled while the lease still held


class FlakyClaims(InjectedFault):
    """The real backend, except that the first claims fail as if the database were restarting."""

    def __init__(self, backend, failures):
        super().__init__(backend)
        self.failures = failures

    def claim(self, request):
        if self.failures:
            self.failures -= 1
            from leased import DatabaseUnavailable

            raise DatabaseUnavailable("the database system is starting up (injected)")
        return self._backend.claim(request)


def test_worker_rides_out_an_unreachable_database(app, caplog):
    caplog.set_level(logging.INFO, logger="leased.worker")
    flaky = FlakyClaims(app.backend, failures=2)
    app._backend = flaky

    @app.task(name="after_outage")
    def after_outage():
        return "ok"

    job = after_outage.enqueue()
    with running_worker(app):
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="job after the outage")
    outage_lines = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(outage_lines) == 2 and all("\n" not in r.getMessage() for r in outage_lines)
    assert any("database reachable again" in r.getMessage() for r in caplog.records)


class BrokenRenewals(InjectedFault):
    def renew(self, leases, wait_seconds=None, progress=None):
        raise RuntimeError("a bug in renewal (injected)")


def test_a_dead_heartbeat_stops_the_worker_loudly_and_releases_its_jobs(app):
    app._backend = BrokenRenewals(app.backend)
    started = threading.Event()

    @app.task(name="waits", takes_context=True, lease=0.3)
    def waits(context):
        started.set()
        context.cancelled.wait(30)

    job = waits.enqueue()
    with pytest.raises(RuntimeError, match="service failed"):
        with running_worker(app) as worker:
            assert started.wait(10)
            wait_for(lambda: worker.stopping, message="the worker to stop itself")
    released = app.get_job(job.id)
    # Given back at once: by the shutdown, or by the watchdog first if the lease was about to run out.
    assert released.status is JobStatus.PENDING
    assert released.history[0].outcome in (Outcome.SHUTDOWN, Outcome.LEASE_LOST)


class BrokenListener(InjectedFault):
    def __init__(self, backend):
        super().__init__(backend)
        self.closed = threading.Event()

    def listener(self):
        closed = self.closed

        class Broken:
            port = None  # a listener the Listener port describes: it hears no datagrams

            def wait(self, timeout):
                raise RuntimeError("a bug in the listener (injected)")

            def close(self):
                closed.set()

        return Broken()


def test_a_dead_listener_stops_the_worker_loudly(app):
    app._backend = broken = BrokenListener(app.backend)

    @app.task(name="noop")
    def noop():
        return None

    with pytest.raises(RuntimeError, match="service failed") as stopped:
        with running_worker(app) as worker:
            wait_for(lambda: worker.stopping, message="the worker to stop itself")
    assert "a bug in the listener" in str(stopped.value.__cause__)
    assert broken.closed.is_set()


def test_a_worker_busy_with_long_jobs_leaves_the_rest_to_other_workers(app):
    release, started = threading.Event(), []

    @app.task(name="long")
    def long(n):
        started.append(n)
        release.wait(30)

    for n in range(6):
        long.enqueue(n)
    try:
        with running_worker(app, concurrency=2):
            wait_for(lambda: len(started) == 2, message="two jobs to start")
            counts = app.counts()["default"]
            assert (counts["running"], counts["pending"]) == (2, 4)  # nothing claimed ahead of the slots
            with running_worker(app, concurrency=4):
                wait_for(lambda: len(started) == 6, message="the second worker to take the other four")
                release.set()
                wait_for(lambda: app.counts()["default"]["done"] == 6, message="all done")
    finally:
        release.set()


def test_short_jobs_are_claimed_ahead_many_at_a_time(app):
    @app.task(name="tiny")
    def tiny(n):
        return n

    tiny.enqueue_many([(n,) for n in range(400)])
    worker = app.worker(concurrency=2)
    worker.backend = observed = _ClaimsObserved(app.backend)
    stats = worker.run(stop_when_idle=True)
    assert stats.done == 400 and sum(observed.batches) == 400
    assert max(observed.batches) > 2, observed.batches  # more than the slots: the rest start without a round trip


def test_an_idle_worker_costs_one_transaction_per_poll_whatever_its_concurrency(app):
    app.task(name="never_enqueued")(lambda: None)
    worker = app.worker(concurrency=200, poll_interval=0.02)
    worker.backend = observed = _ClaimsObserved(app.backend)
    started = time.monotonic()
    with running_worker(app, worker):
        wait_for(lambda: len(observed.batches) >= 20, message="20 polls")
    seconds = time.monotonic() - started
    # list_workers: once, after the first beat, to compare task signatures with live peers.
    at_start_and_stop = ("serving_worker", "listener", "register_worker", "list_workers", "unregister_worker",
                         "close_async")
    calls = [name for name in observed.calls if name not in at_start_and_stop]
    if not app.backend.reclaims_beside_claims:
        assert set(calls) == {"claim"}, calls  # expired leases are returned inside the poll's transaction
    else:  # PostgreSQL: a reclaim beside the polls, once a second
        assert set(calls) == {"claim", "reclaim_expired"}, calls
        assert calls.count("reclaim_expired") <= seconds + 1, (calls.count("reclaim_expired"), seconds)


def test_jobs_start_while_a_reclaim_is_under_way(app):
    """On PostgreSQL the reclaim runs beside the claims (engine/reclaimer.py): one that takes its
    time (under a transaction held open elsewhere it reads every job claimed since) holds up no
    claim. Elsewhere it is part of a claim's transaction."""
    if not app.backend.reclaims_beside_claims:
        return
    entered, released = threading.Event(), threading.Event()

    class SlowReclaim(InjectedFault):
        def reclaim_expired(self, skip_if_done_within=None):
            entered.set()
            released.wait(60)
            return self._backend.reclaim_expired(skip_if_done_within)

    ran = []
    quick = app.task(name="quick")(lambda i: ran.append(i))
    worker = app.worker(concurrency=4)
    worker.backend = SlowReclaim(app.backend)
    with running_worker(app, worker):
        try:
            wait_for(entered.is_set, message="the reclaim to start")
            quick.enqueue_many([(i,) for i in range(20)])
            wait_for(lambda: len(ran) == 20, message="the jobs to run while the reclaim waits")
            assert not released.is_set()
        finally:
            released.set()  # before the worker stops: asyncio.run waits for its threads


def test_periodic_reclaims_take_turns_across_workers(app):
    """PostgreSQL's workers take turns at the periodic reclaim (migration 0020): one that comes
    within the spacing of another worker's, or while it is under way, reads nothing, so a fleet
    reclaims about once a second rather than once a second each. A reclaim that does not take
    turns (run_until_empty's) always reads, and a turn recorded in the future (the database's clock
    went back) counts as long past."""
    if not app.backend.reclaims_beside_claims:
        return
    import psycopg

    task = app.task(name="t")(lambda: None)
    other = Leased(app.database_url, migrate=False).backend  # another worker's storage

    def lapsed_jobs(count: int) -> None:
        for _ in range(count):
            task.enqueue()
        assert len(app.backend.claim(ClaimRequest("w1", ("t",), None, count))) == count
        raw_sql(app, "UPDATE leased_jobs SET lease_expires_at = leased_now() - interval '1 second' "
                     "WHERE status = 'running'")

    try:
        lapsed_jobs(2)
        assert app.backend.reclaim_expired(skip_if_done_within=60) == 2, "the first turn"
        lapsed_jobs(2)
        assert other.reclaim_expired(skip_if_done_within=60) == 0, "another worker's turn came moments ago"
        assert raw_scalar(app, "SELECT count(*) FROM leased_jobs WHERE status = 'running'") == 2
        assert other.reclaim_expired() == 2, "a reclaim that does not take turns"

        lapsed_jobs(1)
        raw_sql(app, "SELECT setval('leased_reclaim_turn_at', "
                     "(extract(epoch FROM leased_now()) * 1000)::bigint + 3600 * 1000)")
        assert other.reclaim_expired(skip_if_done_within=60) == 1, "a turn in the future is long past"

        lapsed_jobs(1)
        with psycopg.connect(app.database_url) as holder:  # a turn under way, in its transaction
            assert holder.execute("SELECT leased_reclaim_turn(0)").fetchone()[0]
            assert other.reclaim_expired(skip_if_done_within=0) == 0, "one turn at a time"
        assert other.reclaim_expired(skip_if_done_within=0) == 1, "the holder's transaction ended"
    finally:
        other.close()


class _ClaimsObserved:
    """The real backend, with every call and the size of every claim noted."""

    def __init__(self, backend):
        self._backend, self.batches, self.calls = backend, [], []

    def __getattr__(self, name):
        value = getattr(self._backend, name)
        if callable(value):
            self.calls.append(name)
        return value

    def claim(self, request):
        self.calls.append("claim")
        jobs = self._backend.claim(request)
        self.batches.append(len(jobs))
        return jobs


def test_a_registration_still_in_flight_does_not_bring_a_signed_off_worker_back(app):
    # Stopping cancels the announcer, but a registration already in its thread goes on; if it
    # lands after the sign-off's delete, the worker would show as "gone" for a day.
    from leased.engine.announcer import Announcer
    from leased.backends.ports import WorkerRecord

    backend = app.backend
    signed_off = threading.Event()

    class SlowRegistration:
        def __getattr__(self, name):
            return getattr(backend, name)

        def register_worker(self, record):
            signed_off.wait(30)  # in flight until the sign-off has deleted the row
            backend.register_worker(record)

        def unregister_worker(self, worker_id):
            backend.unregister_worker(worker_id)
            signed_off.set()

    announcer = Announcer(SlowRegistration(), WorkerRecord("w-late", "host", 1, 1, None, ("t",)), lambda: 0)

    async def stop_during_a_registration():
        running = asyncio.create_task(announcer.run(None))
        await asyncio.sleep(0)  # run() is in its registration thread
        running.cancel()
        await announcer.sign_off()
        await asyncio.to_thread(signed_off.wait, 30)

    asyncio.run(stop_during_a_registration())  # asyncio.run waits for the registration's thread
    assert [worker.id for worker in app.workers()] == []


def test_a_running_worker_goes_on_after_a_migration_adds_a_column(app):
    """A later release's migration adds a column to the jobs table while this release's workers run.
    On PostgreSQL a statement run five times is prepared, and a prepared `RETURNING job.*` then
    meets "cached plan must not change result type": the worker forgets its prepared statements
    and claims again, rather than stopping (the previous release's workers stopped there)."""
    noop = app.task(name="noop")(lambda n: n)
    with running_worker(app, concurrency=2):
        before = noop.enqueue_many([(n,) for n in range(30)])  # claims, finishes, renewals: prepared by now
        wait_for(lambda: all(app.get_job(job.id).status == "done" for job in before), message="the first jobs")
        raw_sql(app, "ALTER TABLE leased_jobs ADD COLUMN added_by_a_later_release INTEGER")
        raw_sql(app, "ALTER TABLE leased_attempts ADD COLUMN added_by_a_later_release INTEGER")
        after = noop.enqueue_many([(n,) for n in range(30)])
        wait_for(lambda: all(app.get_job(job.id).status == "done" for job in after), message="the jobs after it")
    assert [app.get_job(job.id).result for job in after] == list(range(30))
