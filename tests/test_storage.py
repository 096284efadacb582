"""The storage conformance suite: claim, lease, fencing, expiry and admin verbs, on every backend."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from conftest import raw_sql, wait_for
from leased import InvalidTransition, JobNotFound, JobStatus, Outcome
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.jobs import Lease


@pytest.fixture
def tasks(app):
    @app.task(name="a", max_attempts=2)
    def a(n=0): ...

    @app.task(name="b")
    def b(n=0): ...

    return a, b


def claim(app, worker="w1", tasks=("a", "b"), queues=None, limit=10):
    return app.backend.claim(ClaimRequest(worker, tuple(tasks), queues, limit))


def test_claim_orders_by_priority_then_run_after_then_id(app, tasks):
    a, _ = tasks
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    low = a.enqueue(1)
    high = a.using(priority=5).enqueue(2)
    early = a.using(run_after=past).enqueue(3)
    low_twin = a.enqueue(4)
    assert [job.id for job in claim(app)] == [high.id, early.id, low.id, low_twin.id]


def test_claim_takes_only_registered_tasks_and_chosen_queues(app, tasks):
    a, b = tasks
    job_a, job_b = a.enqueue(), b.using(queue_name="mail").enqueue()
    assert claim(app, tasks=["zzz"]) == []
    assert [job.id for job in claim(app, queues=("mail",))] == [job_b.id]
    assert [job.id for job in claim(app, tasks=["a"])] == [job_a.id]


def test_claim_respects_limit_and_run_after(app, tasks):
    a, _ = tasks
    for n in range(3):
        a.enqueue(n)
    later = a.using(run_after=timedelta(hours=1)).enqueue()
    first = claim(app, limit=2)
    assert len(first) == 2
    (rest,) = claim(app)
    assert rest.id != later.id
    assert claim(app) == []


def test_claim_leases_counts_the_attempt_and_opens_history(app, tasks):
    a, _ = tasks
    a.enqueue()
    (job,) = claim(app, worker="worker-1")
    assert job.job.status is JobStatus.RUNNING and job.attempt == 1 and job.lease.worker_id == "worker-1"
    assert job.job.lease_expires_at > job.job.created_at
    (attempt,) = app.get_job(job.id).history
    assert (attempt.number, attempt.worker_id, attempt.outcome, attempt.finished_at) == (1, "worker-1", None, None)


def finish(app, end: AttemptEnd) -> bool:
    (written,) = app.backend.finish([end])
    return written


def test_finish_writes_a_batch_fenced_one_by_one(app, tasks):
    a, _ = tasks
    a.enqueue(), a.enqueue()
    one, two = claim(app)
    ends = [AttemptEnd(Lease(one.id, one.attempt, "intruder"), Outcome.DONE, result_json="1"),
            AttemptEnd(two.lease, Outcome.DONE, result_json="2")]
    assert app.backend.finish(ends) == [False, True]
    assert (app.get_job(one.id).status, app.get_job(two.id).result) == (JobStatus.RUNNING, 2)


def test_an_end_in_another_workers_name_is_not_written_beside_the_holders_own(app, tasks):
    # One batch with the holder's end and an intruder's for the same job and attempt: each is fenced
    # on its whole lease, worker too. The shared sequence once counted the intruder's as written (and
    # its job finished twice in throughput); the fused PostgreSQL finish said so too.
    a, _ = tasks
    a.enqueue()
    (held,) = claim(app)
    intruder = Lease(held.id, held.attempt, "intruder")
    ends = [AttemptEnd(held.lease, Outcome.DONE, result_json="1"), AttemptEnd(intruder, Outcome.DONE, result_json="2")]
    assert app.backend.finish(ends) == [True, False]
    assert [(row.done, row.failed) for row in app.backend.throughput(3600.0)] == [(1, 0)]


def test_concurrent_claimers_never_share_a_job(app, tasks):
    a, _ = tasks
    ids = {a.enqueue(n).id for n in range(60)}
    claimed: list[list[int]] = []

    def claimer(name):
        mine = []
        while batch := claim(app, worker=name, limit=3):
            mine.extend(job.id for job in batch)
        claimed.append(mine)

    threads = [threading.Thread(target=claimer, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [job_id for batch in claimed for job_id in batch]
    assert sorted(everything) == sorted(ids)


def test_renew_extends_only_leases_still_held(app, tasks):
    a, _ = tasks
    a.enqueue(), a.enqueue()
    one, two = claim(app, worker="w1")
    stale = Lease(one.id, one.attempt + 1, "w1")
    foreign = Lease(two.id, two.attempt, "w2")
    assert app.backend.renew([one.lease, stale]) == {one.lease}
    assert app.backend.renew([foreign]) == set()
    assert app.get_job(one.id).lease_expires_at >= one.job.lease_expires_at


def test_finish_is_fenced_on_owner_and_attempt(app, tasks):
    a, _ = tasks
    a.enqueue()
    (job,) = claim(app, worker="w1")
    for wrong in (Lease(job.id, job.attempt, "w2"), Lease(job.id, job.attempt + 1, "w1")):
        assert finish(app, AttemptEnd(wrong, Outcome.DONE, result_json="1")) is False
    assert app.get_job(job.id).status is JobStatus.RUNNING
    assert finish(app, AttemptEnd(job.lease, Outcome.DONE, result_json='{"ok": true}')) is True
    assert finish(app, AttemptEnd(job.lease, Outcome.DONE, result_json="2")) is False
    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == {"ok": True} and done.finished_at is not None
    assert done.lease_owner is None and done.history[0].outcome is Outcome.DONE


def test_error_schedules_a_retry_or_fails(app, tasks):
    a, _ = tasks
    a.enqueue()
    (job,) = claim(app)
    end = AttemptEnd(job.lease, Outcome.ERROR, error_type="ValueError", error_message="boom",
                     traceback="Traceback...", retry_in_seconds=3600)
    assert finish(app, end)
    waiting = app.get_job(job.id)
    assert waiting.status is JobStatus.PENDING and waiting.last_error == "ValueError: boom"
    assert waiting.run_after - waiting.history[0].finished_at > timedelta(minutes=59)
    assert waiting.history[0].traceback == "Traceback..."
    assert claim(app) == []  # not before run_after

    b_job = tasks[1].enqueue()
    (claimed,) = claim(app)
    assert claimed.id == b_job.id
    finish(app, AttemptEnd(claimed.lease, Outcome.ERROR, error_type="KeyError", error_message="'x'"))
    failed = app.get_job(b_job.id)
    assert failed.status is JobStatus.FAILED and failed.finished_at is not None


def test_expired_lease_returns_to_the_pool_and_history_says_so(app, tasks):
    a, _ = tasks
    a.using(lease=0.2).enqueue()
    (job,) = claim(app, worker="crashed")
    wait_for(lambda: app.backend.reclaim_expired() == 1, message="lease expiry")
    back = app.get_job(job.id)
    assert back.status is JobStatus.PENDING and back.lease_owner is None
    assert "lease expired" in back.last_error and "crashed" in back.last_error
    assert back.history[0].outcome is Outcome.EXPIRED
    assert finish(app, AttemptEnd(job.lease, Outcome.DONE)) is False  # the late result is fenced off

    (second,) = claim(app, worker="w2")
    assert second.attempt == 2
    wait_for(lambda: app.backend.reclaim_expired() == 1, message="second expiry")
    exhausted = app.get_job(job.id)
    assert exhausted.status is JobStatus.FAILED and [a.outcome for a in exhausted.history] == [Outcome.EXPIRED] * 2


def counted(app) -> dict[tuple[str, str], tuple[int, int]]:
    """What leased_throughput holds per (task, worker): (done, failed)."""
    from conftest import raw_rows
    return {(task, worker): (int(done), int(failed)) for task, worker, done, failed in raw_rows(
        app, "SELECT task_name, worker_id, sum(done), sum(failed) FROM leased_throughput GROUP BY task_name, worker_id")}


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


def test_an_attempt_is_recorded_once_as_it_ends_and_shown_running_until_then(app, tasks):
    # The claim writes only the job row; readers show the running attempt from it, and the record
    # written at the end keeps the start they showed.
    a, _ = tasks
    a.enqueue()
    (job,) = claim(app, worker="w1")
    (running,) = app.get_job(job.id).history
    assert (running.number, running.worker_id, running.outcome, running.finished_at) == (1, "w1", None, None)
    assert app.job_and_why(job.id)[0].history == (running,)  # `leased why` reads it in its own snapshot
    assert finish(app, AttemptEnd(job.lease, Outcome.DONE, result_json="1"))
    (ended,) = app.get_job(job.id).history
    assert (ended.number, ended.worker_id, ended.outcome, ended.started_at) == (1, "w1", Outcome.DONE, running.started_at)
    assert ended.finished_at >= ended.started_at


def test_a_stale_worker_writes_no_outcome_over_the_new_holders_attempt(app, tasks):
    a, _ = tasks
    a.using(lease=0.2).enqueue()
    (stale,) = claim(app, worker="w1")
    wait_for(lambda: app.backend.reclaim_expired() == 1, message="lease expiry")
    (current,) = claim(app, worker="w2")
    before = app.get_job(stale.id).history
    assert [(x.number, x.worker_id, x.outcome) for x in before] == [(1, "w1", Outcome.EXPIRED), (2, "w2", None)]
    # Every way the stale worker could end its attempt writes nothing: its lease is not the job's.
    assert finish(app, AttemptEnd(stale.lease, Outcome.ERROR, error_type="E", error_message="late")) is False
    app.backend.release([stale.lease], Outcome.LEASE_LOST, "the worker lost its lease")
    app.backend.release([Lease(stale.id, current.attempt, "w1")], Outcome.SHUTDOWN, "not mine")
    assert finish(app, AttemptEnd(Lease(stale.id, current.attempt, "w1"), Outcome.DONE)) is False
    after = app.get_job(stale.id)
    assert after.history == before and (after.status, after.lease_owner) == (JobStatus.RUNNING, "w2")
    assert finish(app, AttemptEnd(current.lease, Outcome.DONE, result_json="2"))
    done = app.get_job(stale.id)
    assert [(x.number, x.worker_id, x.outcome) for x in done.history] == [(1, "w1", Outcome.EXPIRED), (2, "w2", Outcome.DONE)]
    assert done.history[1].started_at == before[1].started_at and done.result == 2


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


def test_live_leases_are_not_reclaimed(app, tasks):
    a, _ = tasks
    a.enqueue()
    claim(app)
    assert app.backend.reclaim_expired() == 0


def test_release_gives_jobs_back_at_once(app, tasks):
    a, _ = tasks
    a.enqueue(), a.enqueue()
    jobs = claim(app, worker="w1")
    app.backend.release([job.lease for job in jobs], Outcome.SHUTDOWN, "released at shutdown")
    for job in jobs:
        released = app.get_job(job.id)
        assert released.status is JobStatus.PENDING and released.history[0].outcome is Outcome.SHUTDOWN
    assert len(claim(app, worker="w2")) == 2


def test_cancel_and_retry_transitions(app, tasks):
    a, _ = tasks
    pending = a.enqueue()
    assert app.cancel(pending.id).status is JobStatus.CANCELLED
    assert app.retry(pending.id).status is JobStatus.PENDING

    (running,) = claim(app)
    cancelled = app.cancel(running.id)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.history[-1].outcome is Outcome.CANCELLED
    assert app.backend.renew([running.lease]) == set()  # the worker learns at its next renewal
    assert finish(app, AttemptEnd(running.lease, Outcome.DONE)) is False

    with pytest.raises(InvalidTransition, match="cancelled"):
        app.cancel(running.id)
    retried = app.retry(running.id)
    assert retried.status is JobStatus.PENDING and retried.finished_at is None
    (again,) = claim(app)
    finish(app, AttemptEnd(again.lease, Outcome.DONE))
    with pytest.raises(InvalidTransition, match="it is done"):
        app.retry(again.id)
    with pytest.raises(JobNotFound):
        app.retry(10**9)


def test_retry_of_a_failed_job_grants_another_attempt(app, tasks):
    a, _ = tasks
    a.enqueue()
    for _ in range(2):
        (job,) = claim(app)
        finish(app, AttemptEnd(job.lease, Outcome.ERROR, error_type="E", error_message="x",
                                      retry_in_seconds=0 if job.attempt < 2 else None))
    assert app.get_job(job.id).status is JobStatus.FAILED
    retried = app.retry(job.id)
    assert retried.max_attempts == 3
    (third,) = claim(app)
    assert third.attempt == 3


def test_retry_refuses_to_duplicate_a_pending_idempotency_key(app, tasks):
    a, _ = tasks
    first = a.using(idempotency_key="k").enqueue()
    app.cancel(first.id)
    a.using(idempotency_key="k").enqueue()
    with pytest.raises(InvalidTransition, match="idempotency key"):
        app.retry(first.id)


def test_cancel_pending_cancels_every_pending_job_of_a_task_or_queue(app, tasks):
    a, b = tasks
    a.enqueue("runs")
    (running,) = claim(app, limit=1)
    of_a = [a.enqueue(n) for n in range(3)]
    in_other_queue = a.using(queue_name="other").enqueue()
    of_b = b.enqueue()
    assert app.count_jobs(status="pending", task_name="a") == 4
    assert app.count_jobs(status="pending", task_name="a", queue_name="default") == 3

    assert app.cancel_pending(task_name="a", queue_name="default") == 3
    assert [app.get_job(job.id).status for job in of_a] == [JobStatus.CANCELLED] * 3
    assert all(app.get_job(job.id).finished_at is not None for job in of_a)
    assert app.get_job(in_other_queue.id).status is JobStatus.PENDING
    assert app.cancel_pending(queue_name="other") == 1
    assert app.cancel_pending() == 1 and app.get_job(of_b.id).status is JobStatus.CANCELLED
    assert app.cancel_pending() == 0
    assert app.get_job(running.id).status is JobStatus.RUNNING  # cancel_pending leaves running jobs alone


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
