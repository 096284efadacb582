"""One bad row is that job's problem: rows written by something other than leased (a migration
script, a DBA, another version) beside healthy jobs, on every database. The healthy jobs run, the
worker stays up, and the bad job ends with a reason naming the column, or, where the database can
run it after all, simply runs; either way the job list, `leased why` and the dashboard show it.

Before: an attempt or lease_seconds out of range failed every claim on PostgreSQL and MariaDB, so
nothing in the database ran; arguments nested 50,000 deep stopped the worker at the claim on SQLite
and MariaDB, holding the healthy jobs claimed with it until their leases ran out.
"""

from __future__ import annotations

import pytest

from conftest import raw_sql, running_worker, wait_for
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
def test_a_bad_row_ends_its_job_and_the_worker_and_the_jobs_beside_it_go_on(app, column, value, reason):
    if column == "args" and backend_of(app) == "postgres":
        pytest.skip("PostgreSQL's json type refuses a document nested this deep: no such row can be written")
    ran: list[int] = []
    fine = app.task(name="fine")(ran.append)
    bad = fine.enqueue(0)
    healthy = fine.enqueue_many([(n,) for n in range(1, 11)])
    raw_sql(app, f"UPDATE leased_jobs SET {column} = {value} WHERE id = {bad.id}")

    with running_worker(app, concurrency=4) as worker:  # raises on exit if the worker stopped
        wait_for(lambda: sorted(n for n in ran if n) == list(range(1, 11)), message="the healthy jobs to run")
        wait_for(lambda: app.get_job(bad.id).status not in (JobStatus.PENDING, JobStatus.RUNNING),
                 message="the bad job to end")
        assert not worker._stopping

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
        assert not worker._stopping
    assert "nested too deeply" in app.get_job(job.id).last_error
