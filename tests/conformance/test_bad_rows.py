"""One bad row is that job's problem: rows written by something other than leased (a migration
script, a DBA, another version) beside healthy jobs, on every database. The healthy jobs run, the
worker stays up, and the bad job ends with a reason naming the column, or, where the database can
run it after all, simply runs; either way the job list, `leased why` and the dashboard show it.

Before: an attempt or lease_seconds out of range failed every claim on PostgreSQL and MariaDB, so
nothing in the database ran; arguments nested 50,000 deep stopped the worker at the claim on SQLite
and MariaDB, holding the healthy jobs claimed with it until their leases ran out; progress that was
not JSON stopped PostgreSQL's reclaim (it cast progress::json) for every job, and a result or
progress that was not JSON failed the job list, `leased show` and the dashboard's pages.

The second half is a table of column x bad value, each run through a claim, a finish and a reclaim
by a live worker, and through every read: list_jobs, get_job, why, `leased jobs`, `leased show`,
`leased why`, the dashboard's overview, jobs list and job page, and /metrics. A value a database's
column type refuses cannot be in a row there, and that case is skipped.
"""

from __future__ import annotations

import threading
import warnings

import pytest

from conftest import raw_sql, running_worker, seconds_before, wait_for
from leased import JobStatus

DEEP = "[" * 50_000 + "]" * 50_000


def backend_of(app) -> str:
    return app.database_url.split(":", 1)[0].replace("postgresql", "postgres")


# (column, value as SQL, what the failure names where the database cannot run the row)
BAD_ROWS = [
    ("attempt", "2147483647", "attempt 2147483647 is out of range"),
    ("lease_seconds", "1e308", "lease_seconds"),
    ("lease_seconds", "-5", "lease_seconds -5"),
    ("args", f"'{DEEP}'", "arguments cannot be read"),
    ("kwargs", "'[1, 2]'", "kwargs"),
]


@pytest.mark.parametrize("column, value, reason", BAD_ROWS, ids=[f"{c}={v[:12]}" for c, v, _ in BAD_ROWS])
def test_a_bad_row_ends_its_job_and_the_worker_and_the_jobs_beside_it_go_on(app, capabilities, column, value, reason):
    if column == "args" and capabilities.typed_times_and_json:
        pytest.skip("a json type (PostgreSQL's) refuses a document nested this deep: no such row can be written")
    ran: list[int] = []
    fine = app.task(name="fine")(ran.append)
    bad = fine.enqueue(0)
    healthy = fine.enqueue_many([(n,) for n in range(1, 11)])
    raw_sql(app, f"UPDATE leased_jobs SET {column} = {value} WHERE id = {bad.id}")

    with running_worker(app, concurrency=4) as worker:  # raises on exit if the worker stopped
        wait_for(lambda: sorted(n for n in ran if n) == list(range(1, 11)), message="the healthy jobs to run")
        wait_for(lambda: app.get_job(bad.id).status not in (JobStatus.PENDING, JobStatus.RUNNING),
                 message="the bad job to end")
        assert not worker.stopping

    ended = app.get_job(bad.id)
    if ended.status is JobStatus.FAILED:
        assert reason in ended.last_error, ended.last_error
    else:  # this database could run the row after all (SQLite counts and times past 32 bits)
        assert ended.status is JobStatus.DONE and backend_of(app) == "sqlite" and column != "args"
    assert all(app.get_job(job.id).status is JobStatus.DONE for job in healthy)
    assert bad.id in {job.id for job in app.list_jobs()}
    assert app.why(bad.id) is not None


def test_arguments_and_results_nested_too_deep_are_refused_in_one_line(app):
    """Nesting 10,000 deep was a raw RecursionError at enqueue, and a result nested so deep stopped
    the worker; both are the caller's or the job's error now."""
    from leased import PayloadError

    deep: list = []
    for _ in range(20_000):
        deep = [deep]
    echo = app.task(name="echo")(lambda value: value)
    with pytest.raises(PayloadError, match="argument 0 .* is nested too deeply"):
        echo.enqueue(deep)
    nest = app.task(name="nest")(lambda: deep)
    job, healthy = nest.enqueue(), echo.enqueue(1)
    with running_worker(app) as worker:
        wait_for(lambda: app.get_job(job.id).status is JobStatus.FAILED and app.get_job(healthy.id).result == 1,
                 message="the nested result to fail its job and the other job to run")
        assert not worker.stopping
    assert "nested too deeply" in app.get_job(job.id).last_error


# (table.column, value as SQL): values no code of leased writes, each in a column that holds JSON.
NOT_JSON = "'{not json'"
BAD_VALUES = [
    ("progress", NOT_JSON),
    ("progress", "'[1, 2]'"),  # JSON, but not the object TaskContext.progress writes
    ("progress", "'{\"attempt\": \"one\"}'"),
    ("args", NOT_JSON),
    ("kwargs", NOT_JSON),
    ("result", NOT_JSON),
]
BAD_IDS = [f"{column}={value[1:9]}" for column, value in BAD_VALUES]


def spoil(app, column: str, value: str, job_id: int) -> None:
    """Write the bad value into the job's row (and, for progress, into its attempts' rows too, which
    `why` and the job page read); skip where the column's type refuses it."""
    try:
        raw_sql(app, f"UPDATE leased_jobs SET {column} = {value} WHERE id = {job_id}")
        if column == "progress":
            raw_sql(app, f"UPDATE leased_attempts SET progress = {value} WHERE job_id = {job_id}")
    except Exception as refused:  # the database's own error: its column type checks the value
        if "json" not in str(refused).lower():
            raise
        pytest.skip(f"this database's {column} column refuses {value}: no such row can exist")


@pytest.mark.parametrize("stage", ["claim", "finish", "reclaim"])
@pytest.mark.parametrize("column, value", BAD_VALUES, ids=BAD_IDS)
def test_a_row_whose_json_cannot_be_read_is_claimed_finished_and_reclaimed(app, column, value, stage):
    """The bad value is in the row when a claim reads it (pending), when its attempt ends (running),
    or when the reclaim meets its expired lease; beside it, healthy jobs at the same stage. The worker
    stays up, the healthy jobs are done, the bad job ends (or runs, where the value is not needed)."""
    from leased.testing.conformance import claim

    ran: list[int] = []
    proceed = threading.Event()

    def fine(number: int) -> int:
        if number == 0 and stage == "finish":
            proceed.wait(30)
        ran.append(number)
        return number

    app.task(name="fine")(fine)
    task = app.tasks["fine"]
    bad, healthy = task.enqueue(0), task.enqueue_many([(n,) for n in range(1, 6)])
    if stage == "reclaim":  # a worker that is gone held them all, and their leases ran out
        claim(app.backend, "gone", tasks=("fine",))
        raw_sql(app, f"UPDATE leased_jobs SET lease_expires_at = {seconds_before(app, 'lease_expires_at', 3600)}")
    if stage != "finish":
        spoil(app, column, value, bad.id)

    with running_worker(app, concurrency=4) as worker:
        if stage == "finish":
            wait_for(lambda: app.get_job(bad.id).status is JobStatus.RUNNING, message="the job to start")
            try:
                spoil(app, column, value, bad.id)
            finally:  # a database that refuses the value skips the test: the held handler goes on at once
                proceed.set()
        wait_for(lambda: sorted(n for n in ran if n) == list(range(1, 6)), message="the healthy jobs to run")
        wait_for(lambda: app.get_job(bad.id).status not in (JobStatus.PENDING, JobStatus.RUNNING),
                 message="the bad job to end")
        assert not worker.stopping
    assert all(app.get_job(job.id).status is JobStatus.DONE for job in healthy)
    ended = app.get_job(bad.id)
    if ended.status is JobStatus.FAILED:
        assert column in ended.last_error or "cannot be read" in ended.last_error, ended.last_error


@pytest.mark.parametrize("column, value", BAD_VALUES, ids=BAD_IDS)
def test_every_read_shows_a_row_whose_json_cannot_be_read(app, column, value, database_url):
    """A pending, a done and a failed job, each with the bad value, read by every reader."""
    from click.testing import CliRunner

    from leased.cli.main import cli

    pytest.importorskip("starlette", reason="the dashboard needs the web extra")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from leased.web import dashboard

    app.task(name="fine")(lambda: 1)
    app.task(name="boom", max_attempts=1)(lambda: 1 / 0)
    done, failed = app.tasks["fine"].enqueue(), app.tasks["boom"].enqueue()
    app.run_until_empty()
    pending = app.tasks["fine"].enqueue()
    for job in (pending, done, failed):
        spoil(app, column, value, job.id)

    listed = {job.id for job in app.list_jobs()}
    assert {pending.id, done.id, failed.id} <= listed
    client = TestClient(dashboard(app))
    for path in ("/", "/jobs", "/metrics"):
        assert client.get(path).status_code == 200, path
    runner = CliRunner()
    table = runner.invoke(cli, ["jobs", "--database", database_url])
    assert table.exit_code == 0, table.output
    for job in (pending, done, failed):
        app.get_job(job.id)
        assert app.why(job.id) is not None
        page = client.get(f"/jobs/{job.id}")
        assert page.status_code == 200, page.text[-2000:]
        for command in ("show", "why"):
            printed = runner.invoke(cli, [command, str(job.id), "--database", database_url])
            assert printed.exit_code == 0, (command, printed.output)
