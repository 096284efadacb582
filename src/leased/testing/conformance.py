"""The storage conformance suite: what every backend must do, checked through the ports alone.

Each check takes a factory of backends on one fresh database with leased's schema, and drives the
ports directly (`NewJob`, `ClaimRequest`, `AttemptEnd`, ...): no `Leased`, no task, no worker. Time
moves through the backend's clock seam (`backend.clock.advance`), never by sleeping, and "now" is
the database's. leased's own suite runs every check on SQLite, PostgreSQL and MariaDB
(tests/test_storage_conformance.py); a backend of your own is done when it passes them too:

    from leased.testing.conformance import CHECKS, exercise

    @pytest.mark.parametrize("check", CHECKS)
    def test_my_backend(check, tmp_path):
        exercise(lambda: MyBackend(tmp_path / "db"), only=[check])

A check raises AssertionError (or the backend's own error) naming what broke. pytest is not needed
here: `exercise()` runs the checks in any harness.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable

from leased.backends.ports import AttemptEnd, Backend, ClaimRequest, JobFilter, PruneRule, WorkerRecord
from leased.errors import InvalidTransition, JobNotFound
from leased.jobs import ClaimedJob, Job, JobStatus, Lease, NewJob, Outcome
from leased.limits import QueueLimit

MakeBackend = Callable[[], Backend]
Check = Callable[[MakeBackend], None]
TASKS = ("a", "b")
CHECKS: dict[str, Check] = {}


def check(function: Check) -> Check:
    CHECKS[function.__name__] = function
    return function


def exercise(make_backend: MakeBackend, only: Iterable[str] | None = None) -> None:
    """Run the checks (all, or those named in `only`) against backends from `make_backend`, each
    check on the database as the previous one left it: give a fresh database per call to isolate
    them. The backend's schema is created first."""
    for name in only if only is not None else CHECKS:
        backend = make_backend()
        try:
            backend.migrate()
            CHECKS[name](lambda: backend)  # noqa: B023 - called in this iteration, before backend is rebound
        finally:
            backend.close()


# Helpers: a job to write, a claim, an end.
def new_job(task_name: str = "a", *, queue_name: str = "default", priority: int = 0, max_attempts: int = 3,
            lease_seconds: float = 30.0, delay_seconds: float = 0.0, run_at: datetime | None = None,
            idempotency_key: str | None = None, args_json: str = "[]", max_crashes: int = 2) -> NewJob:
    return NewJob(task_name, queue_name, args_json, "{}", priority, max_attempts, lease_seconds, run_at=run_at,
                  delay_seconds=delay_seconds, idempotency_key=idempotency_key, max_crashes=max_crashes)


def enqueue(backend: Backend, *jobs: NewJob) -> list[Job]:
    return [job for job, _ in backend.enqueue(list(jobs) or [new_job()])]


def claim(backend: Backend, worker_id: str = "w1", *, limit: int = 10, tasks: tuple[str, ...] = TASKS,
          queues: tuple[str, ...] | None = None, reclaim_expired: bool = False) -> list[ClaimedJob]:
    return backend.claim(ClaimRequest(worker_id, tasks, queues, limit, reclaim_expired))


def done(lease: Lease, result_json: str = "null") -> AttemptEnd:
    return AttemptEnd(lease, Outcome.DONE, result_json=result_json)


def error(lease: Lease, retry_in_seconds: float | None) -> AttemptEnd:
    return AttemptEnd(lease, Outcome.ERROR, error_type="ValueError", error_message="kaboom",
                      traceback="Traceback ...\nValueError: kaboom", retry_in_seconds=retry_in_seconds)


def job(backend: Backend, job_id: int) -> Job:
    found = backend.get_job(job_id)
    assert found is not None, f"job {job_id} is gone"
    return found


def refused(kind: type[Exception], call: Callable[[int], object], job_id: int, rule: str) -> str:
    """The message of the `kind` error that call(job_id) must raise, by `rule`."""
    try:
        call(job_id)
    except kind as error:
        return str(error)
    raise AssertionError(rule)


def _ids(jobs: Iterable[Job | ClaimedJob]) -> list[int]:
    return [each.id for each in jobs]


# Enqueue and idempotency.
@check
def enqueue_writes_pending_jobs_as_given(make: MakeBackend) -> None:
    backend = make()
    (written, created), (other, _) = backend.enqueue([
        new_job("a", queue_name="mail", priority=5, max_attempts=4, lease_seconds=12.5, args_json='[1, "x"]'),
        new_job("b")])
    assert created and written.id != other.id
    read = job(backend, written.id)
    assert read == written, (read, written)
    assert (read.task_name, read.queue_name, read.status, read.args, read.kwargs, read.priority, read.attempt,
            read.max_attempts, read.lease_seconds) == ("a", "mail", JobStatus.PENDING, [1, "x"], {}, 5, 0, 4, 12.5)
    assert read.run_after.tzinfo is not None and read.history == ()


@check
def an_idempotency_key_holds_while_its_job_waits(make: MakeBackend) -> None:
    backend = make()
    (first, created), = backend.enqueue([new_job(idempotency_key="k")])
    (again, created_again), = backend.enqueue([new_job(idempotency_key="k")])
    assert created and not created_again and again == first, "a duplicate of a waiting job writes nothing"
    (claimed,) = claim(backend)
    (while_running, created_running), = backend.enqueue([new_job(idempotency_key="k")])
    assert created_running and while_running.id != first.id, "the key is held by pending jobs only"
    assert backend.finish([done(claimed.lease)]) == [True]
    assert job(backend, first.id).idempotency_key == "k", "finished jobs keep their key as history"


# Claims.
@check
def claims_come_by_priority_then_due_time_then_id(make: MakeBackend) -> None:
    backend = make()
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    low, high, early, low_twin = enqueue(backend, new_job(), new_job(priority=5), new_job(run_at=past), new_job())
    assert _ids(claim(backend)) == [high.id, early.id, low.id, low_twin.id]


@check
def claims_in_a_row_keep_claim_order(make: MakeBackend) -> None:
    """Claim after claim, each takes the first due jobs in claim order, so no job is claimed after
    one that comes after it: across enqueue calls, and jobs falling due between claims."""
    backend = make()
    now = datetime.now(timezone.utc)
    jobs = enqueue(backend, *(new_job(priority=n % 3, run_at=now - timedelta(seconds=n % 7)) for n in range(30)))
    for n in range(10):
        jobs += enqueue(backend, new_job(priority=n % 2))
    later = enqueue(backend, *(new_job(priority=n % 4, delay_seconds=60) for n in range(10)))
    pending = sorted(jobs, key=_claim_order)
    for limit in (3, 7, 3, 7):
        assert _ids(claim(backend, limit=limit)) == _ids(pending[:limit]), "the first due jobs in claim order"
        del pending[:limit]
    backend.clock.advance(61)
    pending = sorted(pending + later, key=_claim_order)
    while pending:
        assert _ids(claim(backend, limit=4)) == _ids(pending[:4]), "jobs fallen due take their place in the order"
        del pending[:4]
    assert claim(backend) == []


def _claim_order(written: Job) -> tuple[int, datetime, int]:
    return -written.priority, written.run_after, written.id


@check
def a_claim_takes_only_its_tasks_and_queues_up_to_its_limit(make: MakeBackend) -> None:
    backend = make()
    a, b, later = enqueue(backend, new_job("a"), new_job("b", queue_name="mail"), new_job("a", delay_seconds=3600))
    enqueue(backend, new_job("c"))
    assert claim(backend, tasks=("zzz",)) == []
    assert _ids(claim(backend, queues=("mail",))) == [b.id]
    assert _ids(claim(backend, limit=1)) == [a.id]
    assert claim(backend) == [], "a job due later, and a task no worker runs, are not claimed"
    backend.clock.advance(3601)
    assert _ids(claim(backend)) == [later.id]


@check
def a_claim_leases_the_job_and_counts_the_attempt(make: MakeBackend) -> None:
    backend = make()
    (written,) = enqueue(backend, new_job(lease_seconds=20))
    (claimed,) = claim(backend, "worker-1")
    assert claimed.lease == Lease(written.id, 1, "worker-1") and claimed.attempt == 1
    read = job(backend, written.id)
    assert read.status is JobStatus.RUNNING and read.lease_owner == "worker-1" and read.attempt == 1
    assert timedelta(seconds=15) < read.lease_expires_at - read.created_at < timedelta(seconds=25), \
        "the lease runs lease_seconds from the claim, by the database's clock"
    (attempt,) = read.history
    assert (attempt.number, attempt.worker_id, attempt.outcome, attempt.finished_at) == (1, "worker-1", None, None)


@check
def concurrent_claims_never_share_a_job(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, *[new_job() for _ in range(60)])
    taken: dict[str, list[int]] = {"w1": [], "w2": [], "w3": []}

    def take(worker_id: str) -> None:
        while batch := claim(backend, worker_id, limit=4):
            taken[worker_id] += _ids(batch)

    threads = [threading.Thread(target=take, args=(worker_id,)) for worker_id in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every = [job_id for ids in taken.values() for job_id in ids]
    assert len(every) == len(set(every)) == 60, "each job claimed exactly once"


# Leases: renewal, fencing, expiry, release.
@check
def renewal_extends_held_leases_and_reports_the_lost(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(lease_seconds=10), new_job(lease_seconds=10))
    one, two = claim(backend)
    before = job(backend, one.id).lease_expires_at
    backend.clock.advance(5)
    assert backend.renew([one.lease, two.lease]) == {one.lease, two.lease}
    assert job(backend, one.id).lease_expires_at > before
    stranger = Lease(one.id, one.attempt, "w-other")
    assert backend.renew([stranger]) == set(), "a lease another worker holds is not renewed"
    assert backend.renew([Lease(one.id, one.attempt + 1, "w1")]) == set(), "nor another attempt's"


@check
def every_end_is_fenced_on_its_own_lease(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(), new_job())
    one, two = claim(backend)
    written = backend.finish([done(Lease(one.id, one.attempt, "intruder"), "1"), done(two.lease, '{"ok": true}')])
    assert written == [False, True]
    assert job(backend, one.id).status is JobStatus.RUNNING and job(backend, one.id).result is None
    finished = job(backend, two.id)
    assert (finished.status, finished.result, finished.lease_owner) == (JobStatus.DONE, {"ok": True}, None)
    assert finished.finished_at is not None and finished.history[-1].outcome is Outcome.DONE
    assert backend.finish([done(two.lease)]) == [False], "an end is written once"


@check
def an_error_with_a_retry_waits_for_its_backoff(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend)
    (first,) = claim(backend)
    assert backend.finish([error(first.lease, retry_in_seconds=60)]) == [True]
    waiting = job(backend, first.id)
    assert waiting.status is JobStatus.PENDING and waiting.last_error == "ValueError: kaboom"
    (record,) = waiting.history
    assert (record.outcome, record.error_type, record.error_message) == (Outcome.ERROR, "ValueError", "kaboom")
    assert "ValueError: kaboom" in (record.traceback or "")
    assert claim(backend) == [], "not before its backoff"
    backend.clock.advance(61)
    (second,) = claim(backend)
    assert second.id == first.id and second.attempt == 2


@check
def an_error_without_a_retry_fails_the_job(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend)
    (claimed,) = claim(backend)
    assert backend.finish([error(claimed.lease, retry_in_seconds=None)]) == [True]
    failed = job(backend, claimed.id)
    assert failed.status is JobStatus.FAILED and failed.finished_at is not None
    assert failed.last_error == "ValueError: kaboom"


@check
def an_expired_lease_returns_the_job_and_fences_its_holder(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(lease_seconds=5))
    (claimed,) = claim(backend, "w1")
    assert backend.reclaim_expired() == 0, "a lease in force is not reclaimed"
    backend.clock.advance(6)
    assert backend.reclaim_expired() == 1
    back = job(backend, claimed.id)
    assert back.status is JobStatus.PENDING and back.lease_owner is None
    assert back.history[-1].outcome is Outcome.EXPIRED
    assert backend.finish([done(claimed.lease)]) == [False], "the late holder writes nothing"
    assert backend.renew([claimed.lease]) == set()
    (again,) = claim(backend, "w2")
    assert again.attempt == 2 and again.lease.worker_id == "w2"


def _worker(backend: Backend, worker_id: str) -> None:
    backend.register_worker(WorkerRecord(worker_id, "host-1", 4242, 8, None, TASKS))


@check
def an_attempt_whose_worker_died_is_a_crash_and_max_crashes_quarantine_the_job(make: MakeBackend) -> None:
    """Poison jobs: a lease that expires while its worker still beats is no crash (it stalled); one
    whose worker is silent past WORKER_GONE_AFTER, or that its supervisor buried, is. The crash
    that reaches max_crashes fails the job, before its attempts run out; a retry allows one more."""
    backend = make()
    (written,) = enqueue(backend, new_job(lease_seconds=5, max_attempts=10, max_crashes=2))
    assert (written.crashes, written.max_crashes) == (0, 2)
    _worker(backend, "w1")
    claim(backend, "w1")
    backend.clock.advance(6)  # the lease lapsed, but w1 was seen 6 s ago: stalled, not dead
    assert backend.reclaim_expired() == 1
    stalled = job(backend, written.id)
    assert (stalled.history[-1].outcome, stalled.crashes, stalled.status) == (Outcome.EXPIRED, 0, JobStatus.PENDING)
    _worker(backend, "w2")
    claim(backend, "w2")
    backend.clock.advance(65)  # w2 silent past WORKER_GONE_AFTER (60 s): its process died
    assert backend.reclaim_expired() == 1
    crashed = job(backend, written.id)
    assert (crashed.history[-1].outcome, crashed.crashes, crashed.status) == (Outcome.CRASHED, 1, JobStatus.PENDING)
    assert "worker w2 is gone" in crashed.history[-1].error_message and not crashed.quarantined
    _worker(backend, "w3")
    claim(backend, "w3")
    assert backend.bury_workers("w3", "killed by SIGKILL") == 1, "ended at once, not a lease later"
    poison = job(backend, written.id)
    assert poison.status is JobStatus.FAILED and poison.quarantined and poison.crashes == 2
    assert poison.last_error == "quarantined after 2 crashes: worker w3 died: killed by SIGKILL (seen by its supervisor)"
    assert [a.outcome for a in poison.history] == [Outcome.EXPIRED, Outcome.CRASHED, Outcome.CRASHED]
    assert not [each for each in backend.list_workers(silent_after=15) if each.id == "w3" and each.alive]
    backend.retry(written.id)
    assert (job(backend, written.id).crashes, job(backend, written.id).quarantined) == (1, False)
    (again,) = claim(backend, "w4")
    assert backend.finish([AttemptEnd(again.lease, Outcome.CRASHED, error_type="ChildProcessDied",
                                      error_message="the handler's child process was killed by SIGSEGV")]) == [True]
    assert job(backend, written.id).quarantined and job(backend, written.id).crashes == 2, "a finish's crash counts"


@check
def an_expired_lease_nobody_took_still_finishes_but_no_longer_renews(make: MakeBackend) -> None:
    """A lease is lost when another claim, a reclaim or a cancel takes the job: until then the
    late holder's end is the only one there can be, and it is written; renewing is refused at once."""
    backend = make()
    enqueue(backend, new_job(lease_seconds=5), new_job(lease_seconds=5))
    one, two = claim(backend, "w1")
    backend.clock.advance(6)
    assert backend.renew([one.lease]) == set(), "an expired lease is not renewed"
    assert backend.finish([done(one.lease, "1"), error(two.lease, retry_in_seconds=None)]) == [True, True]
    assert (job(backend, one.id).status, job(backend, one.id).result) == (JobStatus.DONE, 1)
    assert job(backend, two.id).status is JobStatus.FAILED
    assert [record.outcome for record in job(backend, one.id).history] == [Outcome.DONE]
    assert backend.reclaim_expired() == 0, "nothing left to reclaim"


@check
def an_expiry_at_the_attempt_cap_fails_the_job(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(max_attempts=1, lease_seconds=5))
    (claimed,) = claim(backend)
    backend.clock.advance(6)
    assert _ids(claim(backend, "w2", reclaim_expired=True)) == [], "reclaimed in the claim, and not retried"
    failed = job(backend, claimed.id)
    assert failed.status is JobStatus.FAILED and failed.history[-1].outcome is Outcome.EXPIRED


@check
def a_claim_can_reclaim_expired_leases_first(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(lease_seconds=5))
    (claimed,) = claim(backend, "w1")
    backend.clock.advance(6)
    (again,) = claim(backend, "w2", reclaim_expired=True)
    assert again.id == claimed.id and again.attempt == 2


@check
def a_released_job_is_due_again_at_once(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend)
    (claimed,) = claim(backend)
    backend.release([claimed.lease], Outcome.SHUTDOWN, "the worker shut down")
    back = job(backend, claimed.id)
    assert back.status is JobStatus.PENDING and back.lease_owner is None
    record = back.history[-1]
    assert (record.outcome, record.error_message) == (Outcome.SHUTDOWN, "the worker shut down")
    (again,) = claim(backend)
    assert again.attempt == 2
    backend.release([claimed.lease], Outcome.SHUTDOWN, "late")  # an old lease: nothing happens
    assert job(backend, claimed.id).lease_owner == "w1" and job(backend, claimed.id).attempt == 2


# What people do: cancel, retry, pause.
@check
def cancel_ends_a_waiting_or_running_job_and_fences_its_holder(make: MakeBackend) -> None:
    backend = make()
    waiting, running = enqueue(backend, new_job("b"), new_job("a"))
    (claimed,) = claim(backend, tasks=("a",))
    assert backend.cancel(waiting.id).status is JobStatus.CANCELLED
    cancelled = backend.cancel(running.id)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.history[-1].outcome is Outcome.CANCELLED
    assert backend.finish([done(claimed.lease)]) == [False]
    assert "cancelled" in refused(InvalidTransition, backend.cancel, running.id,
                                  "a cancelled job cannot be cancelled again")
    refused(JobNotFound, backend.cancel, 10**9, "cancelling no job is JobNotFound")


@check
def retry_brings_a_failed_or_cancelled_job_back(make: MakeBackend) -> None:
    backend = make()
    failing, other = enqueue(backend, new_job(max_attempts=1), new_job())
    (claimed,) = claim(backend, limit=1)
    backend.finish([error(claimed.lease, None)])
    retried = backend.retry(failing.id)
    assert retried.status is JobStatus.PENDING and retried.attempt == 1, "due now; its attempts are kept"
    again = {claimed.id: claimed for claimed in claim(backend)}
    assert again[failing.id].attempt == 2 and other.id in again
    refused(InvalidTransition, backend.retry, other.id, "a running job cannot be retried")


@check
def bulk_retry_and_cancel_take_one_task_or_queue(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job("a", max_attempts=1), new_job("a", max_attempts=1), new_job("b", max_attempts=1))
    for claimed in claim(backend):
        backend.finish([error(claimed.lease, None)])
    assert backend.retry_failed("a", None) == 2
    assert backend.count_jobs(JobStatus.FAILED, None, None) == 1
    assert backend.cancel_pending(None, "default") == 2
    assert backend.count_jobs(JobStatus.CANCELLED, "a", None) == 2


@check
def a_paused_queue_is_not_claimed_until_resumed(make: MakeBackend) -> None:
    backend = make()
    (mail,) = enqueue(backend, new_job(queue_name="mail"))
    assert backend.pause_queue("mail") is True and backend.pause_queue("mail") is False
    assert "mail" in backend.paused_queues()
    assert claim(backend) == []
    assert backend.resume_queue("mail") is True and backend.resume_queue("mail") is False
    assert _ids(claim(backend)) == [mail.id]


@check
def a_queue_limit_caps_its_running_jobs(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, *[new_job(queue_name="q") for _ in range(3)])
    backend.set_queue_limit(QueueLimit("q", concurrency=1))
    assert [limit.queue_name for limit in backend.queue_limits()] == ["q"]
    (first,) = claim(backend)
    assert claim(backend) == [], "one runs at a time"
    backend.finish([done(first.lease)])
    assert len(claim(backend)) == 1
    backend.set_queue_limit(QueueLimit("q"))
    assert backend.queue_limits() == [] and len(claim(backend)) == 1


# Reads.
@check
def counts_and_listings_agree_with_what_was_written(make: MakeBackend) -> None:
    backend = make()
    written = enqueue(backend, new_job("a"), new_job("a", queue_name="mail"), new_job("b", idempotency_key="key-7"))
    (claimed,) = claim(backend, limit=1)
    backend.finish([done(claimed.lease)])
    assert backend.counts() == {("default", JobStatus.DONE): 1, ("default", JobStatus.PENDING): 1,
                                ("mail", JobStatus.PENDING): 1}
    counts = backend.job_counts()
    assert counts.by_queue["default"]["done"] == 1 and counts.by_queue["mail"]["pending"] == 1
    assert _ids(backend.list_jobs(JobFilter())) == _ids(reversed(written))
    assert _ids(backend.list_jobs(JobFilter(newest_first=False, limit=2))) == _ids(written[:2])
    assert _ids(backend.list_jobs(JobFilter(before_id=written[2].id))) == [written[1].id, written[0].id]
    assert _ids(backend.list_jobs(JobFilter(status=JobStatus.PENDING, queue_name="mail"))) == [written[1].id]
    assert _ids(backend.list_jobs(JobFilter(search="key-7"))) == [written[2].id]
    assert _ids(backend.list_jobs(JobFilter(search=str(written[0].id)))) == [written[0].id]
    assert sorted(backend.task_names()) == ["a", "b"] and sorted(backend.queue_names()) == ["default", "mail"]
    assert backend.get_job(10**9) is None
    # A pending job with a concurrency key is pending like the others (PostgreSQL finds keyed and
    # unkeyed pending jobs in different places).
    (keyed,) = enqueue(backend, new_job("b", queue_name="mail")._replace(concurrency_key="k", key_concurrency=1))
    assert _ids(backend.list_jobs(JobFilter(status=JobStatus.PENDING))) == [keyed.id, written[2].id, written[1].id]
    assert _ids(backend.list_jobs(JobFilter(status=JobStatus.PENDING, newest_first=False, after_id=written[1].id))) \
        == [written[2].id, keyed.id]
    assert backend.count_jobs(JobStatus.PENDING, None, None) == 3
    assert backend.count_jobs(JobStatus.PENDING, "b", "mail") == 1
    assert backend.count_jobs(JobStatus.PENDING, None, "mail") == 2


@check
def workers_announce_themselves(make: MakeBackend) -> None:
    backend = make()
    backend.register_worker(WorkerRecord("w1", "host-1", 4242, 8, ("default",), ("a",)))
    (worker,) = [each for each in backend.list_workers(silent_after=60) if each.id == "w1"]
    assert (worker.host, worker.pid, worker.concurrency) == ("host-1", 4242, 8)
    backend.unregister_worker("w1")
    assert [each for each in backend.list_workers(silent_after=60) if each.id == "w1"] == []


# Retention and schema.
@check
def pruning_deletes_only_finished_jobs_past_their_age(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(), new_job())
    (finished,) = claim(backend, limit=1)
    backend.finish([done(finished.lease)])
    rule = PruneRule(JobStatus.DONE, older_than_seconds=1800)
    with backend.pruning() as allowed:
        assert allowed
        assert backend.count_prunable(rule) == 0 and backend.prune_batch(rule, 100) == 0
        backend.clock.advance(3600)
        assert backend.count_prunable(rule) == 1 and backend.prune_batch(rule, 100) == 1
    assert backend.get_job(finished.id) is None
    assert backend.counts() == {("default", JobStatus.PENDING): 1}
    assert sum(row.done for row in backend.throughput(7200)) == 1, "a pruned job's finish stays counted"


@check
def the_schema_is_current_once_migrated(make: MakeBackend) -> None:
    backend = make()
    backend.check_schema()
    assert backend.migrate() == [], "a second migrate has nothing to do"
    assert "leased_jobs" in backend.migration_sql()
