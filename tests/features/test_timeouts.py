"""Time limits per attempt, on every backend: async handlers cancelled, sync ones told and, if they
ignore it, held as stuck; the attempt ends as `timeout` and retries by the task's policy."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
import warnings
from datetime import timedelta

import pytest

from conftest import running_worker, wait_for
from leased import Backoff, CancelReason, ConfigurationError, JobStatus, Leased, Outcome, TaskContext
from leased.cli.main import describe_job
from paths import SRC

FAST = Backoff(base=0.01, cap=0.05, jitter=0.5)
LIMIT = 0.2


def test_async_handler_is_cancelled_at_its_limit_retried_then_failed(app):
    causes = []

    @app.task(name="hangs_async", timeout=LIMIT, max_attempts=2, backoff=FAST, takes_context=True)
    async def hangs_async(context: TaskContext):
        try:
            await asyncio.Event().wait()  # never set: only the time limit ends this
        except asyncio.CancelledError:
            causes.append(context.cancel_reason)
            raise

    job = hangs_async.enqueue()
    assert job.timeout_seconds == LIMIT
    with running_worker(app):
        wait_for(lambda: app.get_job(job.id).status is JobStatus.FAILED, message="job to fail")
    failed = app.get_job(job.id)
    assert causes == [CancelReason.TIMEOUT, CancelReason.TIMEOUT]
    assert [a.outcome for a in failed.history] == [Outcome.TIMEOUT, Outcome.TIMEOUT]
    assert failed.attempt == 2 and failed.result is None
    assert failed.last_error == "TimeLimitExceeded: attempt 2 ran past its time limit of 0.2s"
    assert "time limit  200ms per attempt" in describe_job(failed)


def test_cooperative_sync_handler_ends_at_its_limit_as_timeout(app):
    returned = threading.Event()
    causes = []

    @app.task(name="checks_context", timeout=LIMIT, max_attempts=1, takes_context=True)
    def checks_context(context: TaskContext):
        try:
            context.cancelled.wait(60)  # where a handler would sleep: ends at the limit
            causes.append(context.cancel_reason)
            context.raise_if_cancelled()
            return "not reached"
        finally:
            returned.set()

    job = checks_context.enqueue()
    with running_worker(app) as worker:
        wait_for(lambda: app.get_job(job.id).status is JobStatus.FAILED, message="job to fail")
        assert returned.wait(10)
        wait_for(lambda: worker._time_limits.holding == 0, message="its slot to be free")
    failed = app.get_job(job.id)
    assert causes == [CancelReason.TIMEOUT]
    assert [a.outcome for a in failed.history] == [Outcome.TIMEOUT]
    assert failed.result is None and failed.history[0].error_type == "TimeLimitExceeded"
    # The end is written once the handler stopped, and says so (unless it stopped before the worker
    # looked, a race the message then leaves out): nothing says a stopped handler still runs.
    if "stopped when told" in failed.last_error:  # where it was when told
        assert "context.cancelled.wait(60)" in failed.history[0].traceback
        assert "traceback of attempt 1\n  Handler thread at its time limit" in describe_job(failed)
    assert re.fullmatch(r"TimeLimitExceeded: attempt 1 ran past its time limit of 0\.2s"
                        r"(; its handler stopped when told \(context\.cancelled\), \w+ after it)?",
                        failed.last_error), failed.last_error


def test_sync_handler_that_ignores_its_limit_is_stuck_holds_its_slot_and_its_late_return_is_dropped(app, caplog):
    prometheus_client = pytest.importorskip("prometheus_client")
    from leased.metrics import worker_registry

    caplog.set_level(logging.WARNING, logger="leased.worker")
    registry = worker_registry(app.events)
    release, next_started = threading.Event(), threading.Event()

    @app.task(name="ignores_limit", timeout=LIMIT, max_attempts=1, priority=1)
    def ignores_limit():
        release.wait(60)  # does not look at its context
        return "late result"

    @app.task(name="next_in_line")
    def next_in_line():
        next_started.set()
        return "ran"

    stuck_job, next_job = ignores_limit.enqueue(), next_in_line.enqueue()

    def stuck_gauge() -> float | None:
        return registry.get_sample_value("leased_stuck_handlers", {"task": "ignores_limit", "queue": "default"})

    with running_worker(app, concurrency=1) as worker:
        # The attempt ends at the limit, while the thread still runs.
        wait_for(lambda: app.get_job(stuck_job.id).status is JobStatus.FAILED, message="attempt to time out")
        timed_out = app.get_job(stuck_job.id)
        assert [a.outcome for a in timed_out.history] == [Outcome.TIMEOUT]
        assert re.search(r"; its handler thread was still running [\w.]+ after it and keeps its slot until it "
                         r"returns; anything it returns is discarded$", timed_out.last_error), timed_out.last_error
        where = timed_out.history[0].traceback  # where the thread hangs, from the handler's frame down
        assert where.splitlines()[1].strip().endswith("in ignores_limit") and "release.wait(60)" in where
        shown = describe_job(timed_out)  # `leased show` prints it, as the dashboard does
        assert re.search(r"traceback of attempt 1\n  Handler thread 1\.\ds past its time limit", shown), shown
        assert "release.wait(60)" in shown
        # Visible while it runs: the worker's metrics, its announced row, its log.
        wait_for(lambda: stuck_gauge() == 1, message="the stuck gauge")
        wait_for(lambda: [w.stuck_handlers for w in app.workers()] == [1], message="the worker's row to say stuck")
        stuck_lines = [r.getMessage() for r in caplog.records if "past its time limit of 0.2s" in r.getMessage()
                       and "still running" in r.getMessage()]
        assert stuck_lines and f"job {stuck_job.id} " in stuck_lines[0]
        # The one slot is still taken: the next job has not started, nor even been claimed.
        assert worker._time_limits.holding == 1
        assert not next_started.is_set() and app.get_job(next_job.id).status is JobStatus.PENDING
        release.set()  # the thread returns at last, with a result nobody will record
        assert next_started.wait(30)
        wait_for(lambda: app.get_job(next_job.id).status is JobStatus.DONE, message="the next job")
        wait_for(lambda: stuck_gauge() == 0, message="the stuck gauge to drop")
        wait_for(lambda: [w.stuck_handlers for w in app.workers()] == [0], message="the worker's row to clear")
    late = app.get_job(stuck_job.id)
    assert late.status is JobStatus.FAILED and late.result is None
    assert [a.outcome for a in late.history] == [Outcome.TIMEOUT]
    assert worker.stats.done == 1 and worker.stats.failed == 1
    assert any("returned" in r.getMessage() and f"job {stuck_job.id} " in r.getMessage() for r in caplog.records)
    scraped = prometheus_client.generate_latest(registry).decode()
    assert 'leased_attempts_total{outcome="timeout",queue="default",task="ignores_limit"} 1.0' in scraped


def test_using_timeout_overrides_the_tasks_and_travels_with_the_job(app, database_url):
    unlimited_started, proceed = threading.Event(), threading.Event()
    seen_cancelled = []

    @app.task(name="no_limit_by_default")
    async def no_limit_by_default():
        await asyncio.Event().wait()

    @app.task(name="limited_by_default", timeout=LIMIT, max_attempts=1, takes_context=True)
    def limited_by_default(context: TaskContext):
        unlimited_started.set()
        proceed.wait(60)
        seen_cancelled.append(context.is_cancelled)
        return "finished"

    unlimited = limited_by_default.using(timeout=None).enqueue()
    assert app.get_job(unlimited.id).timeout_seconds is None

    # A worker of another Leased instance, whose task declares no limit, applies the stored one.
    other = Leased(database_url)
    other.task(name="no_limit_by_default")(no_limit_by_default.func)
    other.task(name="limited_by_default", timeout=LIMIT, takes_context=True)(limited_by_default.func)
    try:
        with running_worker(other, concurrency=2):
            assert unlimited_started.wait(30)
            limited = no_limit_by_default.using(timeout=LIMIT, max_attempts=1).enqueue()
            assert app.get_job(limited.id).timeout_seconds == LIMIT
            # The limited job starts after the unlimited one and runs past its limit, so by then the
            # unlimited one has run longer than LIMIT without being stopped.
            wait_for(lambda: app.get_job(limited.id).status is JobStatus.FAILED, message="limited job to time out")
            assert app.get_job(unlimited.id).status is JobStatus.RUNNING
            proceed.set()
            wait_for(lambda: app.get_job(unlimited.id).status is JobStatus.DONE, message="unlimited job to finish")
    finally:
        other.close()
    assert app.get_job(limited.id).history[0].outcome is Outcome.TIMEOUT
    assert app.get_job(unlimited.id).result == "finished" and seen_cancelled == [False]


def test_timeouts_accept_seconds_a_timedelta_or_a_duration_and_refuse_the_rest(app):
    @app.task(name="limited", timeout=timedelta(minutes=2))
    def limited(): ...

    assert limited.defaults.timeout_seconds == 120.0
    assert limited.using(timeout=1.5).timeout_seconds == 1.5
    assert limited.using(timeout=None).timeout_seconds is None
    # Durations as the command line and retention take them (refused here until issue 42).
    assert limited.using(timeout="5m").timeout_seconds == 300.0
    assert app.task(name="quarter", timeout="250ms")(lambda: None).defaults.timeout_seconds == 0.25
    assert app.task(name="unlimited")(lambda: None).defaults.timeout_seconds is None
    for bad in (0, -1, timedelta(0), float("nan"), float("inf"), "5 minutes", "0s", True):
        with pytest.raises(ConfigurationError) as refused:
            limited.using(timeout=bad)
        message = str(refused.value)
        assert "\n" not in message and "timeout" in message and "None for no time limit" in message
        with pytest.raises(ConfigurationError):
            app.task(name=f"bad_{id(bad)}", timeout=bad)(lambda: None)


def test_job_page_shows_the_time_limit_and_the_timeout_outcome(app):
    pytest.importorskip("starlette")
    with warnings.catch_warnings():  # Starlette 1.x warns about plain httpx, which serves here
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    from leased.web import dashboard

    @app.task(name="limited_page", timeout=LIMIT, max_attempts=1)
    async def limited_page():
        await asyncio.Event().wait()

    job = limited_page.enqueue()
    app.run_until_empty()
    page = TestClient(dashboard(app)).get(f"/jobs/{job.id}").text
    assert "<dt>Time limit</dt><dd>200ms per attempt</dd>" in page
    assert "outcome-timeout" in page and "TimeLimitExceeded" in page


def test_the_readme_example_runs_and_prints_what_it_says(tmp_path):
    from test_readme import section_code

    code = section_code("Time limits")  # docs/howto/time-limits.md
    source = str(SRC)  # this checkout's leased, not an installed one
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env=environment)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["failed ['timeout']"]
