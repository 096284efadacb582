"""Progress on every backend: context.progress(done, total, note) rides on the lease renewals the
worker sends anyway and on the attempt's end, is kept with each attempt, and is shown by every
reader (app.get_job, leased show, leased jobs, leased why, the dashboard)."""

from __future__ import annotations

import json
import threading

import pytest

from leased import Progress, TaskContext
from leased.cli.main import describe_job
from leased.cli.output import jobs_table, progress_text
from leased.engine.context import checked_progress
from leased.jobs import JobStatus, Outcome, MAX_PROGRESS_NOTE
from leased.testing import advance

from conftest import running_worker, wait_for


def test_progress_shows_while_the_job_runs_and_its_last_report_when_it_ends(app):
    """Renewals every half second (a 1.5 s lease) carry the report; the end carries the last."""
    go_on = threading.Event()

    @app.task(name="copy_rows", takes_context=True, lease=1.5)
    def copy_rows(context: TaskContext, rows: int) -> int:
        context.progress(3, rows, "copying rows")
        go_on.wait(30)
        context.progress(rows, rows, "copied")  # just before the end: no renewal carries it
        return rows

    job = copy_rows.enqueue(10)
    with running_worker(app, concurrency=1) as worker:
        running = wait_for(lambda: (found := app.get_job(job.id)).progress is not None and found,
                           message="the report to ride on a renewal")
        assert running.status is JobStatus.RUNNING
        assert running.progress == Progress(3, 10, "copying rows", attempt=1)
        assert running.progress.fraction == 0.3 and str(running.progress) == "3/10 (30%) copying rows"
        assert running.history[-1].progress == running.progress, "the running attempt carries it"
        assert progress_text(running) == "3/10 (30%) copying rows"
        assert "progress" in describe_job(running) and "3/10 (30%) copying rows" in describe_job(running)
        assert "PROGRESS" in jobs_table([running]) and "3/10 (30%)" in jobs_table([running])
        reasons = {reason.code: reason for reason in app.why(job.id).reasons}
        assert reasons["progress"].message == "It has got to 3/10 (30%) copying rows, as its handler last reported."
        go_on.set()
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="the job to finish")
        worker.stop()

    done = app.get_job(job.id)
    assert done.progress == Progress(10, 10, "copied", attempt=1)
    assert [attempt.progress for attempt in done.history] == [Progress(10, 10, "copied", attempt=1)]


def test_a_retried_job_shows_where_its_last_attempt_got_to(app):
    @app.task(name="import_file", takes_context=True, max_attempts=3)
    def import_file(context: TaskContext) -> str:
        if context.attempt == 1:
            context.progress(40, 100, "line 40")
            raise ConnectionError("the file server went away")
        return "imported"  # attempt 2 reports nothing

    job = import_file.enqueue()
    app.run_until_empty()
    retrying = app.get_job(job.id)
    assert retrying.status is JobStatus.PENDING
    assert retrying.progress == Progress(40, 100, "line 40", attempt=1)
    assert progress_text(retrying) == "40/100 (40%) line 40 (attempt 1)"
    reasons = {reason.code: reason for reason in app.why(job.id).reasons}
    assert reasons["progress"].message == "Attempt 1 got to 40/100 (40%) line 40 before it ended."
    assert reasons["progress"].data["fraction"] == 0.4

    advance(app, 60)
    app.run_until_empty()
    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE
    assert [(attempt.outcome, attempt.progress) for attempt in done.history] == [
        (Outcome.ERROR, Progress(40, 100, "line 40", attempt=1)), (Outcome.DONE, None)]
    assert done.progress == Progress(40, 100, "line 40", attempt=1), "kept until an attempt reports its own"


def test_many_reports_cost_no_writes_of_their_own(app):
    """100,000 calls: the worker sends as many renewals as it would without them, and the
    database gets the latest report."""
    renewals: list[int] = []
    backend_renew = app.backend.renew

    def counted_renew(leases, wait_seconds=None, progress=None):
        renewals.append(len(progress or {}))
        return backend_renew(leases, wait_seconds, progress)

    app.backend.renew = counted_renew  # the real renewal, counted
    seen = threading.Event()

    @app.task(name="count_up", takes_context=True, lease=1.5)
    def count_up(context: TaskContext, n: int) -> int:
        for done in range(1, n + 1):
            context.progress(done, n)
        seen.wait(30)
        return n

    job = count_up.enqueue(100_000)
    with running_worker(app, concurrency=1) as worker:
        wait_for(lambda: (found := app.get_job(job.id).progress) is not None and found.done == 100_000,
                 message="the latest report")
        seen.set()
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="the job to finish")
        worker.stop()
    assert 1 <= len(renewals) < 20 and sum(renewals) <= len(renewals), renewals


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize("arguments, error, words", [
    (("3",), TypeError, "context.progress(done='3'): done must be a number (an int or a float)"),
    ((True,), TypeError, "done must be a number"),
    ((-1,), ValueError, "context.progress(done=-1): done must be a finite number, 0 or more"),
    ((float("nan"),), ValueError, "done must be a finite number"),
    ((1, "10"), TypeError, "context.progress(total='10'): total must be a number (an int or a float), or None"),
    ((1, 10, 5), TypeError, "context.progress(note=5): note must be a str or None"),
    ((1, 10, "x" * (MAX_PROGRESS_NOTE + 1)), ValueError, f"the note has {MAX_PROGRESS_NOTE + 1} characters"),
    # a value whose repr() raises: the refusal is still said (the repr's own error escaped before)
    ((Unprintable(),), TypeError, "context.progress(done=<a Unprintable whose repr() failed>): done must be"),
    ((1, 10, Unprintable()), TypeError, "context.progress(note=<a Unprintable whose repr() failed>)"),
])
def test_bad_progress_is_refused_with_the_argument_named(arguments, error, words):
    with pytest.raises(error) as raised:
        checked_progress(*(list(arguments) + [None, None])[:3], attempt=1)
    assert words in str(raised.value)


def test_progress_reads_as_people_write_it():
    assert str(Progress(1_000_000, 4_000_000)) == "1000000/4000000 (25%)"
    assert str(Progress(2.5)) == "2.5" and Progress(2.5).fraction is None
    assert Progress(120, 100).fraction == 1.0, "a total that was an estimate"
    assert Progress(0, 0).fraction is None
    assert Progress.from_json(Progress(3, 9, "n", 2).to_json()) == Progress(3, 9, "n", 2)
    assert json.loads(Progress(3, None, None, 1).to_json()) == {"done": 3, "total": None, "note": None, "attempt": 1}
    for stored in ("{not json", "[1, 2]", '{"attempt": 1}', '{"done": "3"}', '{"done": 3, "attempt": "one"}'):
        assert Progress.from_json(stored) is None, stored  # another program's row: no report, not an error


def test_a_bad_report_fails_the_attempt_with_its_message(app):
    @app.task(name="bad_report", takes_context=True, max_attempts=1)
    def bad_report(context: TaskContext) -> None:
        context.progress("half")

    job = bad_report.enqueue()
    app.run_until_empty()
    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and failed.progress is None
    assert failed.last_error == "TypeError: context.progress(done='half'): done must be a number (an int or a float)"


def test_the_dashboard_shows_a_bar_on_the_job_page_and_a_column_in_lists(app):
    from starlette.testclient import TestClient

    from leased.web import dashboard

    @app.task(name="report_and_fail", takes_context=True, max_attempts=2)
    def report_and_fail(context: TaskContext) -> None:
        context.progress(1, 4, "first quarter")
        raise RuntimeError("stopped")

    job = report_and_fail.enqueue()
    plain = app.task(name="plain")(lambda: None).enqueue()
    app.run_until_empty()
    with TestClient(dashboard(app)) as client:
        page = client.get(f"/jobs/{job.id}").text
        assert "<h2>Progress</h2>" in page and 'width="25.00"' in page and "1/4 (25%) first quarter" in page
        assert "<th>Progress</th>" in page, "the attempts table gains the column"
        listed = client.get("/jobs").text
        assert "<th>Progress</th>" in listed and "(attempt 1)" in listed
        assert "<h2>Progress</h2>" not in client.get(f"/jobs/{plain.id}").text
