"""Storage on every backend where the ports alone cannot show it: the per-worker rows that count
finished jobs, and rows as an older version or a person left them (written with raw SQL). What
a backend promises through its ports is the conformance suite's (leased.testing.conformance, run
by tests/conformance/test_storage_conformance.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from conftest import raw_sql, wait_for
from leased import JobStatus, Outcome
from leased.backends.ports import AttemptEnd, ClaimRequest


@pytest.fixture
def tasks(app):
    @app.task(name="a", max_attempts=2)
    def a(n=0): ...

    @app.task(name="b")
    def b(n=0): ...

    return a, b


def claim(app, worker="w1", tasks=("a", "b"), queues=None, limit=10):
    return app.backend.claim(ClaimRequest(worker, tuple(tasks), queues, limit))


def finish(app, end: AttemptEnd) -> bool:
    (written,) = app.backend.finish([end])
    return written


def counted(app) -> dict[tuple[str, str], tuple[int, int]]:
    """What leased_throughput holds per (task, worker): (done, failed)."""
    from conftest import raw_rows
    return {(task, worker): (int(done), int(failed)) for task, worker, done, failed in raw_rows(
        app, "SELECT task_name, worker_id, sum(done), sum(failed) FROM leased_throughput "
             "GROUP BY task_name, worker_id")}


def test_finished_jobs_are_counted_as_they_finish_in_their_workers_rows(app, tasks):
    a, b = tasks
    for _ in range(3):
        b.enqueue()
    a.enqueue(), a.using(lease=0.2).enqueue()
    first = claim(app, worker="w1", tasks=("b",), limit=2)
    (other,) = claim(app, worker="w2", tasks=("b",))
    ends = [AttemptEnd(first[0].lease, Outcome.DONE, result_json="1"),
            AttemptEnd(first[1].lease, Outcome.ERROR, error_type="KeyError", error_message="x")]
    assert app.backend.finish(ends) == [True, True]
    assert finish(app, AttemptEnd(other.lease, Outcome.DONE))
    assert finish(app, AttemptEnd(other.lease, Outcome.DONE)) is False  # fenced: counted once
    assert counted(app) == {("b", "w1"): (1, 1), ("b", "w2"): (1, 0)}

    retried, expiring = claim(app, worker="w1", tasks=("a",), limit=2)
    finish(app, AttemptEnd(retried.lease, Outcome.ERROR, error_type="E", error_message="again", retry_in_seconds=0))
    assert counted(app) == {("b", "w1"): (1, 1), ("b", "w2"): (1, 0)}  # a retry is not a finish
    wait_for(lambda: app.backend.reclaim_expired() == 1, message="lease expiry")
    (second,) = [job for job in claim(app, worker="w3", tasks=("a",)) if job.id == expiring.id]
    wait_for(lambda: app.backend.reclaim_expired() == 1, message="second expiry")
    assert app.get_job(expiring.id).status is JobStatus.FAILED  # out of attempts: counted for w3
    assert counted(app) == {("b", "w1"): (1, 1), ("b", "w2"): (1, 0), ("a", "w3"): (0, 1)}
    minutes = {row.minute for row in app.throughput(timedelta(minutes=5))}  # one, or two across a minute's end
    assert all(minute.second == 0 and datetime.now(timezone.utc) - minute < timedelta(minutes=2) for minute in minutes)
    assert app.overview(timedelta(minutes=5)).queues[0].done_recently == 2
    assert app.overview(timedelta(minutes=5)).queues[0].failed_recently == 2


def test_an_attempt_record_opened_at_claim_by_an_older_version_is_closed_in_place(app, tasks):
    # Before migration 9 the claim inserted the record, open, and the end closed it; a job claimed
    # so and ended after the upgrade has its record closed, not a second one written.
    a, _ = tasks
    a.enqueue(), a.enqueue(), a.enqueue()
    jobs = claim(app, worker="old")
    ids = ", ".join(str(job.id) for job in jobs)
    raw_sql(app, f"UPDATE leased_jobs SET attempt_started_at = NULL WHERE id IN ({ids})")
    raw_sql(app, "INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at) "
                 f"SELECT id, attempt, lease_owner, created_at FROM leased_jobs WHERE id IN ({ids})")
    opened = {job.id: app.get_job(job.id).history for job in jobs}
    assert all([(x.worker_id, x.outcome) for x in history] == [("old", None)] for history in opened.values())
    first, second, third = jobs
    assert finish(app, AttemptEnd(first.lease, Outcome.DONE))
    app.backend.release([second.lease], Outcome.SHUTDOWN, "released at shutdown")
    app.cancel(third.id)
    for job, outcome in ((first, Outcome.DONE), (second, Outcome.SHUTDOWN), (third, Outcome.CANCELLED)):
        (record,) = app.get_job(job.id).history
        assert (record.worker_id, record.outcome, record.started_at) == ("old", outcome, opened[job.id][0].started_at)


def test_a_job_set_back_to_pending_by_hand_shows_no_running_attempt(app, tasks):
    # An attempt's record is written when it ends; while it runs the job row stands for it. A row
    # edited by hand out of 'running' takes that running attempt with it: the history never shows
    # an attempt still running for a job that is not, before or after a bulk cancel.
    a, _ = tasks
    a.enqueue()
    (job,) = claim(app)
    assert [attempt.outcome for attempt in app.get_job(job.id).history] == [None]
    raw_sql(app, f"UPDATE leased_jobs SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL "
                 f"WHERE id = {job.id}")
    assert app.get_job(job.id).history == ()
    assert app.cancel_pending(task_name="a") == 1
    cancelled = app.get_job(job.id)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.history == ()
