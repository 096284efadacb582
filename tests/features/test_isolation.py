"""Process isolation on every backend: @app.task(isolation="process") runs a sync handler in a child
process of the worker's, which a time limit stops however it is stuck, whose death is a recorded
`crashed` attempt, and which is reused, or recycled after max_tasks_per_child."""

from __future__ import annotations

import os
import re

import pytest

from leased import ConfigurationError, Outcome
from leased.events import ChildProcessEnded, ChildProcessStarted
from leased.jobs import JobStatus, Progress
from leased.testing import advance

import isolated_handlers as handlers
from conftest import running_worker, wait_for


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie, not yet reaped by its parent, still answers kill 0
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_runs_the_handler_and_is_reused(app):
    add = app.task(name="add", isolation="process")(handlers.add)
    pid = app.task(name="pid", isolation="process")(handlers.pid)
    total = add.enqueue(2, 3)
    first, second = pid.enqueue(), pid.enqueue()
    app.run_until_empty()
    assert app.get_job(total.id).result == 5
    pids = {app.get_job(first.id).result, app.get_job(second.id).result}
    assert len(pids) == 1 and os.getpid() not in pids, "one child, reused, not the worker itself"


def test_max_tasks_per_child_gives_each_job_a_new_process(app):
    pid = app.task(name="pid", isolation="process")(handlers.pid)
    jobs = [pid.enqueue() for _ in range(3)]
    seen = []
    app.events.subscribe(seen.append)
    app.worker(concurrency=1, max_tasks_per_child=1).run(stop_when_idle=True)
    pids = {app.get_job(job.id).result for job in jobs}
    assert len(pids) == 3
    ended = [(event.pid, event.reason, event.jobs_run) for event in seen if isinstance(event, ChildProcessEnded)]
    assert sorted(ended) == sorted((pid, "recycled", 1) for pid in pids), "each retired after its one job"
    assert all(event.rss_bytes > 0 for event in seen if isinstance(event, ChildProcessEnded))
    assert sum(isinstance(event, ChildProcessStarted) for event in seen) >= 3


@pytest.mark.parametrize("handler", [handlers.sleeps_in_c, handlers.reads_forever])
def test_a_handler_stuck_in_a_c_call_is_killed_at_its_time_limit(app, tmp_path, handler):
    stuck = app.task(name="stuck", isolation="process", timeout=1, max_attempts=1)(handler)
    add = app.task(name="add", isolation="process")(handlers.add)
    job = stuck.enqueue(str(tmp_path / "pid"))
    after = add.using(priority=-1).enqueue(2, 2)  # claimed after the stuck one, on the one slot it held
    stats = app.worker(concurrency=1).run(stop_when_idle=True)
    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and stats.failed == 1
    assert app.get_job(after.id).result == 4, "the next job runs on that slot, in a fresh child"
    (attempt,) = failed.history
    assert attempt.outcome is Outcome.TIMEOUT
    # Killed at the limit, not later: the message names the limit it passed and the kill that
    # followed the grace (no bound on the attempt's length: a loaded machine's child start-up is
    # in it, and the limit counts from the handler's start).
    assert "ran past its time limit of 1s" in attempt.error_message
    assert "its child process did not stop when told and was killed (SIGKILL)" in attempt.error_message
    assert not alive(int((tmp_path / "pid").read_text())), "no child is left behind"


def test_a_handler_that_checks_its_context_stops_when_told_and_reports_progress(app, tmp_path):
    cooperative = app.task(name="cooperative", isolation="process", timeout=1, max_attempts=1,
                           takes_context=True)(handlers.stops_when_told)
    job = cooperative.enqueue(str(tmp_path / "pid"))
    app.run_until_empty()
    failed = app.get_job(job.id)
    (attempt,) = failed.history
    assert attempt.outcome is Outcome.TIMEOUT
    assert "its child process stopped when told (SIGTERM)" in attempt.error_message
    assert attempt.progress == Progress(1, 3, "waiting to be told", attempt=1), "progress crosses the boundary"


def test_a_time_limit_counts_the_handler_not_its_childs_start(app):
    """An isolated handler's limit used to run from the attempt's start, so a child that took longer
    to start and import the handler than the limit failed every attempt, the handler unrun."""
    import slow_import_handlers

    quick = app.task(name="quick", isolation="process", timeout=1, max_attempts=1)(slow_import_handlers.quick)
    job = quick.enqueue(1)
    app.run_until_empty()
    done = app.get_job(job.id)
    assert (done.status, done.result) == (JobStatus.DONE, 2), done.history


def test_a_child_that_segfaults_ends_the_attempt_crashed_and_is_retried(app):
    crashing = app.task(name="crashing", isolation="process", max_attempts=2)(handlers.segfaults)
    add = app.task(name="add", isolation="process")(handlers.add)
    job, after = crashing.enqueue(), None
    app.run_until_empty()
    retried = app.get_job(job.id)
    assert retried.status is JobStatus.PENDING
    (attempt,) = retried.history
    assert (attempt.outcome, attempt.error_type) == (Outcome.CRASHED, "ChildProcessDied")
    assert attempt.error_message == "the handler's child process was killed by SIGSEGV"
    advance(app, 60)
    after = add.enqueue(1, 1)
    app.run_until_empty()
    assert [a.outcome for a in app.get_job(job.id).history] == [Outcome.CRASHED, Outcome.CRASHED]
    assert app.get_job(job.id).status is JobStatus.FAILED
    assert app.get_job(after.id).result == 2, "the worker carries on with a fresh child"


def test_a_child_that_exits_is_crashed_with_its_code(app):
    exiting = app.task(name="exiting", isolation="process", max_attempts=1)(handlers.exits)
    job = exiting.enqueue()
    app.run_until_empty()
    (attempt,) = app.get_job(job.id).history
    assert (attempt.outcome, attempt.error_message) == (Outcome.CRASHED,
                                                        "the handler's child process exited with code 3")


def test_errors_and_results_cross_the_boundary_as_in_the_worker(app):
    failing = app.task(name="failing", isolation="process", max_attempts=1)(handlers.fails)
    unstorable = app.task(name="unstorable", isolation="process", max_attempts=3)(handlers.unstorable)
    reports = app.task(name="reports", isolation="process", takes_context=True)(handlers.reports)
    failed, bad, reported = failing.enqueue("no such invoice"), unstorable.enqueue(), reports.enqueue(50)
    app.run_until_empty()
    (attempt,) = app.get_job(failed.id).history
    assert (attempt.error_type, attempt.error_message) == ("ValueError", "no such invoice")
    assert "isolated_handlers.py" in attempt.traceback and 'raise ValueError(message)' in attempt.traceback
    bad_job = app.get_job(bad.id)
    assert bad_job.status is JobStatus.FAILED and len(bad_job.history) == 1, "not retried: it would fail again"
    assert bad_job.history[0].error_type == "ResultNotStored"
    done = app.get_job(reported.id)
    assert done.result == reported.id and done.progress == Progress(50, 50, "rows", attempt=1)


def test_bad_declarations_are_refused_with_the_fix(app):
    with pytest.raises(ConfigurationError, match=r"imports its handler by name: define '.*<lambda>' at a module's top"):
        app.task(name="anonymous", isolation="process")(lambda: None)

    def local():
        pass

    with pytest.raises(ConfigurationError, match="not inside a function or as a lambda"):
        app.task(name="local", isolation="process")(local)
    with pytest.raises(ConfigurationError, match="isolation must be 'thread' or 'process', got 'fork'"):
        app.task(name="odd", isolation="fork")(handlers.add)
    with pytest.raises(ConfigurationError, match="cannot run in a child process; drop isolation='process'"):
        app.task(name="both", isolation="process", transactional=True, takes_context=True)(handlers.stops_when_told)
    with pytest.raises(ConfigurationError, match="max_tasks_per_child must be a whole number of at least 1"):
        app.task(name="add")(handlers.add)
        app.worker(max_tasks_per_child=0)


def test_no_child_outlives_its_worker(app):
    pid = app.task(name="pid", isolation="process")(handlers.pid)
    job = pid.enqueue()
    app.run_until_empty()
    assert not alive(app.get_job(job.id).result), "the worker's children stop with it"


def test_why_and_the_history_name_a_crash(app):
    crashing = app.task(name="crashing", isolation="process", max_attempts=1)(handlers.segfaults)
    job = crashing.enqueue()
    app.run_until_empty()
    reasons = {reason.code: reason.message for reason in app.why(job.id).reasons}
    assert reasons["crashed"].startswith(
        "Its handler's child process died at attempt 1 of 1: the handler's child process was killed by SIGSEGV.")
    from leased.cli.main import describe_job

    assert "crashed" in describe_job(app.get_job(job.id))


def test_an_async_handler_runs_isolated_on_an_event_loop_of_the_childs(app, tmp_path):
    add = app.task(name="async_add", isolation="process")(handlers.async_add)
    sleeps = app.task(name="async_sleeps", isolation="process", timeout=1, max_attempts=1,
                      takes_context=True)(handlers.async_sleeps)
    total, stuck = add.enqueue(20, 22), sleeps.enqueue(str(tmp_path / "pid"))
    app.run_until_empty()
    assert app.get_job(total.id).result == 42
    (attempt,) = app.get_job(stuck.id).history
    assert attempt.outcome is Outcome.TIMEOUT and "stopped when told (SIGTERM)" in attempt.error_message
    assert (tmp_path / "pid.cancelled").read_text() == "timeout", "cancelled as the worker cancels an async handler"


def test_a_sigkilled_workers_child_exits_and_its_job_is_recovered(app, worker_processes, tmp_path):
    """kill -9 of the worker while its child hangs mid-job: the child exits by itself (it sees its
    parent gone), and the job's lease expires and is recorded as any crashed worker's."""
    sleeps = app.task(name="sleeps_in_c", isolation="process", lease=1.0, max_attempts=2)(handlers.sleeps_in_c)
    marker = tmp_path / "pid"
    job = sleeps.enqueue(str(marker))
    worker = worker_processes("isolation_app.py", "isolated-worker")
    wait_for(lambda: marker.exists() and marker.read_text(), message="the child to start the handler")
    child = int(marker.read_text())
    worker.kill()
    worker.wait()
    wait_for(lambda: not alive(child), timeout=10, message="the orphaned child to exit")
    advance(app, 2)  # past the dead worker's lease
    app.backend.reclaim_expired()
    assert [attempt.outcome for attempt in app.get_job(job.id).history] == [Outcome.EXPIRED]


def test_durable_steps_are_recorded_from_the_child(app):
    stepping = app.task(name="steps", isolation="process", takes_context=True, max_attempts=2)(handlers.steps)
    job = stepping.enqueue()
    app.run_until_empty()
    advance(app, 60)
    app.run_until_empty()
    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE
    assert [(step.name, step.attempt) for step in app.job_steps(job.id)] == [("first", 1)]
    assert done.result == app.job_steps(job.id)[0].result, "attempt 2 got attempt 1's recorded result"


def test_isolation_is_chosen_per_call_through_using(app):
    threaded = app.task(name="pid")(handlers.pid)
    isolated = app.task(name="isolated_pid", isolation="process")(handlers.pid)
    in_child = threaded.using(isolation="process").enqueue()
    in_worker = isolated.using(isolation="thread").enqueue()
    as_declared = threaded.enqueue()
    assert (in_child.isolation, in_worker.isolation, as_declared.isolation) == ("process", "thread", None)
    assert app.get_job(in_child.id).isolation == "process", "the choice is on the job's row"
    app.run_until_empty()
    assert app.get_job(in_child.id).result != os.getpid()
    assert app.get_job(in_worker.id).result == os.getpid() == app.get_job(as_declared.id).result
    from leased.cli.main import describe_job

    assert re.search(r"\n  isolation +process \(chosen at enqueue\)\n", describe_job(app.get_job(in_child.id)))
    [batched] = threaded.using(isolation="process").enqueue_many([()])
    app.run_until_empty()
    assert app.get_job(batched.id).result != os.getpid(), "enqueue_many carries it too"


def test_using_refuses_an_isolation_the_task_cannot_have(app):
    anonymous = app.task(name="anonymous")(lambda: None)
    with pytest.raises(ConfigurationError, match="imports its handler by name"):
        anonymous.using(isolation="process")
    with pytest.raises(ConfigurationError, match="isolation must be 'thread' or 'process', got 'fork'"):
        app.task(name="add")(handlers.add).using(isolation="fork")
    transactional = app.task(name="transactional", transactional=True, takes_context=True)(handlers.stops_when_told)
    with pytest.raises(ConfigurationError, match="cannot run in a child process"):
        transactional.using(isolation="process")


def test_the_workers_row_shows_its_children_recycles_memory_and_crashes(app):
    """What the dashboard's worker rows and /metrics show: children alive and their RSS, those
    started and recycled, and crashes by signal or exit code."""
    import prometheus_client
    from starlette.testclient import TestClient

    from leased.metrics import worker_registry
    from leased.web import dashboard

    crashing = app.task(name="crashing", isolation="process", max_attempts=1)(handlers.segfaults)
    exiting = app.task(name="exiting", isolation="process", max_attempts=1)(handlers.exits)
    add = app.task(name="add", isolation="process")(handlers.add)
    jobs = [crashing.enqueue(), exiting.enqueue(), add.enqueue(1, 2), add.enqueue(3, 4)]
    registry = worker_registry(app.events)
    with running_worker(app, concurrency=1, max_tasks_per_child=2):
        wait_for(lambda: all(app.get_job(job.id).is_finished for job in jobs), message="the jobs to end")

        def summary():
            (row,) = app.workers()
            children = row.children
            return children if children is not None and children.started >= 3 and children.recycled == 1 else None

        children = wait_for(summary, message="the worker's row to show its children")
        assert children.crashes == {"SIGSEGV": 1, "exit 3": 1}
        assert children.alive <= 1 and (children.rss_bytes > 0) == (children.alive == 1)
        scraped = prometheus_client.generate_latest(registry).decode()
        with TestClient(dashboard(app)) as client:
            page = client.get("/").text
    assert 'leased_child_crashes_total{how="SIGSEGV"} 1.0' in scraped
    assert 'leased_child_crashes_total{how="exit 3"} 1.0' in scraped
    assert "<th>Child processes</th>" in page and "1 × SIGSEGV" in page and "1 × exit 3" in page
    assert f"{children.started} started, 1 recycled" in page
