"""Leases: renewal, expiry and its reclaim, crashes, and giving attempts back."""

from __future__ import annotations

from leased.backends.ports import AttemptEnd
from leased.jobs import JobStatus, Lease, Outcome, Progress
from leased.testing.conformance.helpers import claim, done, enqueue, error, ids, job, new_job, register
from leased.testing.conformance.suite import MakeBackend, check


@check
def renewal_extends_held_leases_and_reports_the_lost(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(lease_seconds=10), new_job(lease_seconds=10))
    one, two = claim(backend)
    before = job(backend, one.id).lease_expires_at
    backend.clock.advance(5)
    assert backend.renew([one.lease, two.lease]) == {one.lease, two.lease}
    after = job(backend, one.id).lease_expires_at
    assert before is not None and after is not None and after > before
    stranger = Lease(one.id, one.attempt, "w-other")
    assert backend.renew([stranger]) == set(), "a lease another worker holds is not renewed"
    assert backend.renew([Lease(one.id, one.attempt + 1, "w1")]) == set(), "nor another attempt's"
    report = Progress(3, 10, "copying", attempt=one.attempt)
    other_attempt = Lease(two.id, two.attempt + 1, "w1")
    assert backend.renew([one.lease, two.lease], progress={one.lease: report.to_json(),
                                                           other_attempt: Progress(9).to_json()}) \
        == {one.lease, two.lease}
    assert job(backend, one.id).progress == report, "a report is written with the renewal"
    assert job(backend, two.id).progress is None, "only to attempts still held"
    assert job(backend, one.id).history[-1].progress == report




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
    assert "lease expired" in (back.last_error or "") and "w1" in (back.last_error or ""), back.last_error
    assert backend.finish([done(claimed.lease)]) == [False], "the late holder writes nothing"
    assert backend.renew([claimed.lease]) == set()
    (again,) = claim(backend, "w2")
    assert again.attempt == 2 and again.lease.worker_id == "w2"


@check
def an_attempt_whose_worker_died_is_a_crash_and_max_crashes_quarantine_the_job(make: MakeBackend) -> None:
    """Poison jobs: a lease that expires while its worker still beats is no crash (it stalled); one
    whose worker is silent past WORKER_GONE_AFTER, or that its supervisor buried, is. The crash
    that reaches max_crashes fails the job, before its attempts run out; a retry allows one more."""
    backend = make()
    (written,) = enqueue(backend, new_job(lease_seconds=5, max_attempts=10, max_crashes=2))
    assert (written.crashes, written.max_crashes) == (0, 2)
    register(backend, "w1")
    claim(backend, "w1")
    backend.clock.advance(6)  # the lease lapsed, but w1 was seen 6 s ago: stalled, not dead
    assert backend.reclaim_expired() == 1
    stalled = job(backend, written.id)
    assert (stalled.history[-1].outcome, stalled.crashes, stalled.status) == (Outcome.EXPIRED, 0, JobStatus.PENDING)
    register(backend, "w2")
    claim(backend, "w2")
    backend.clock.advance(65)  # w2 silent past WORKER_GONE_AFTER (60 s): its process died
    assert backend.reclaim_expired() == 1
    crashed = job(backend, written.id)
    assert (crashed.history[-1].outcome, crashed.crashes, crashed.status) == (Outcome.CRASHED, 1, JobStatus.PENDING)
    assert "worker w2 is gone" in (crashed.history[-1].error_message or "") and not crashed.quarantined
    register(backend, "w3")
    claim(backend, "w3")
    assert backend.bury_workers("w3", "killed by SIGKILL") == 1, "ended at once, not a lease later"
    poison = job(backend, written.id)
    assert poison.status is JobStatus.FAILED and poison.quarantined and poison.crashes == 2
    assert poison.last_error == ("quarantined after 2 crashes: worker w3 died: killed by SIGKILL "
                                 "(seen by its supervisor)")
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
    assert ids(claim(backend, "w2", reclaim_expired=True)) == [], "reclaimed in the claim, and not retried"
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


@check
def an_attempt_is_recorded_once_as_it_ends_and_shown_running_until_then(make: MakeBackend) -> None:
    """The claim writes only the job row; reads show the running attempt from it, and the record
    written at the end keeps the start they showed."""
    backend = make()
    enqueue(backend)
    (claimed,) = claim(backend, "w1")
    (running,) = job(backend, claimed.id).history
    assert (running.number, running.worker_id, running.outcome, running.finished_at) == (1, "w1", None, None)
    facts = backend.why_facts(claimed.id)
    assert facts is not None and facts.job.history == (running,), "the same in why_facts' own snapshot"
    assert backend.finish([done(claimed.lease, "1")]) == [True]
    (ended,) = job(backend, claimed.id).history
    assert (ended.number, ended.worker_id, ended.outcome, ended.started_at) == (1, "w1", Outcome.DONE,
                                                                                running.started_at)
    assert ended.finished_at is not None and ended.finished_at >= ended.started_at


@check
def a_stale_worker_writes_nothing_over_the_new_holders_attempt(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(lease_seconds=5))
    (stale,) = claim(backend, "w1")
    backend.clock.advance(6)
    assert backend.reclaim_expired() == 1
    (current,) = claim(backend, "w2")
    before = job(backend, stale.id).history
    assert [(each.number, each.worker_id, each.outcome) for each in before] == [
        (1, "w1", Outcome.EXPIRED), (2, "w2", None)]
    # Every way the stale worker could end its attempt writes nothing: its lease is not the job's.
    assert backend.finish([error(stale.lease, retry_in_seconds=None)]) == [False]
    backend.release([stale.lease], Outcome.LEASE_LOST, "the worker lost its lease")
    backend.release([Lease(stale.id, current.attempt, "w1")], Outcome.SHUTDOWN, "not mine")
    assert backend.finish([done(Lease(stale.id, current.attempt, "w1"))]) == [False]
    after = job(backend, stale.id)
    assert after.history == before and (after.status, after.lease_owner) == (JobStatus.RUNNING, "w2")
    assert backend.finish([done(current.lease, "2")]) == [True]
    ended = job(backend, stale.id)
    assert [(each.number, each.worker_id, each.outcome) for each in ended.history] == [
        (1, "w1", Outcome.EXPIRED), (2, "w2", Outcome.DONE)]
    assert ended.history[1].started_at == before[1].started_at and ended.result == 2


@check
def a_release_after_expiry_explains_it_in_the_workers_words(make: MakeBackend) -> None:
    """A worker that let its lease lapse (a handler stuck past it) says why as it gives the
    attempt up: its account replaces the reclaimer's guess on the record expiry closed first."""
    backend = make()
    enqueue(backend, new_job(lease_seconds=5))
    (claimed,) = claim(backend, "w1")
    backend.clock.advance(6)
    assert backend.reclaim_expired() == 1
    guessed = job(backend, claimed.id).history[-1]
    assert guessed.outcome is Outcome.EXPIRED
    account = "the handler held the GIL past its lease"
    backend.release([claimed.lease], Outcome.LEASE_LOST, account, explains_expiry=True)
    explained = job(backend, claimed.id)
    (record,) = explained.history
    assert (record.outcome, record.error_message) == (Outcome.EXPIRED, account), record
    assert explained.status is JobStatus.PENDING and account in (explained.last_error or "")
    backend.release([claimed.lease], Outcome.SHUTDOWN, "without explains_expiry", explains_expiry=False)
    assert job(backend, claimed.id).history == (record,), "an attempt closed already is not closed again"
