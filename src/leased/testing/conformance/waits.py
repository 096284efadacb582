"""Jobs that wait: a handler's sleep or wait for a signal ends its attempt (uncounted) and puts the
job to sleep; a signal in the mailbox is taken once, oldest first; a sleep's end wakes the job."""

from __future__ import annotations

from leased.backends.ports import SignalRequest, WaitOutcome, WaitRequest
from leased.errors import InvalidTransition, JobNotFound
from leased.jobs import JobStatus, Lease, Outcome
from leased.testing.conformance.helpers import claim, done, enqueue, job, new_job, refused
from leased.testing.conformance.suite import MakeBackend, check
from leased.testing.conformance.transactional import RolledBack


@check
def a_sleep_ends_the_attempt_uncounted_and_its_end_wakes_the_job(make: MakeBackend) -> None:
    backend = make()
    (sleeper,) = enqueue(backend, new_job(max_attempts=1))
    (first,) = claim(backend)
    stranger = Lease(first.id, first.attempt, "intruder")
    assert backend.begin_wait(WaitRequest(stranger, "leased.sleep#1", seconds=60)).outcome is WaitOutcome.LOST
    answer = backend.begin_wait(WaitRequest(first.lease, "leased.sleep#1", seconds=60))
    assert answer.outcome is WaitOutcome.WAITING and answer.ends_at is not None
    slept = job(backend, sleeper.id)
    assert (slept.status, slept.max_attempts, slept.lease_owner) == (JobStatus.SLEEPING, 2, None), \
        "the attempt a wait ends does not count against max_attempts"
    assert slept.history[-1].outcome is Outcome.WAITED
    wait = backend.job_wait(sleeper.id)
    assert wait is not None and wait.signal_name is None and wait.wakes_at == answer.ends_at
    assert backend.finish([done(first.lease)]) == [False], "its lease ended with the attempt"
    assert claim(backend) == [] and backend.wake_sleepers() == 0, "nobody claims a sleeper before its end"
    backend.clock.advance(61)
    (rerun,) = claim(backend, reclaim_expired=True)  # a claim that reclaims wakes the sleeper first, and claims it
    assert backend.job_wait(sleeper.id) is None
    recorded = {step.name: step.result for step in backend.durable_steps(sleeper.id)}
    assert recorded["leased.sleep#1"] == answer.ends_at.timestamp(), "the end is recorded for the rerun"
    replayed = backend.begin_wait(WaitRequest(rerun.lease, "leased.sleep#1", until_epoch=recorded["leased.sleep#1"],
                                                  end_recorded=True))
    assert replayed.outcome is WaitOutcome.DUE, "the recorded end has come: the handler goes on"
    assert backend.finish([done(rerun.lease)]) == [True]


@check
def a_signal_is_taken_once_oldest_first_and_wakes_the_job_that_waits_for_it(make: MakeBackend) -> None:
    backend = make()
    (waiter,) = enqueue(backend, new_job(idempotency_key="order-7"))
    (first,) = claim(backend)
    sent = backend.send_signal(SignalRequest("approved", '{"by": "ann"}', idempotency_key="order-7"))
    backend.send_signal(SignalRequest("approved", '"second"', job_id=waiter.id))
    took = backend.begin_wait(WaitRequest(first.lease, "leased.signal:approved#1", "approved"))
    assert (took.outcome, took.payload) == (WaitOutcome.TOOK, {"by": "ann"}), "a signal sent before the wait"
    taken = backend.signals(waiter.id)
    assert [(each.id, each.taken_by_attempt) for each in taken] == [(sent.id, 1), (taken[1].id, None)]
    took = backend.begin_wait(WaitRequest(first.lease, "leased.signal:approved#2", "approved"))
    assert took.payload == "second", "the second of one name waits for the next wait"
    waiting = backend.begin_wait(WaitRequest(first.lease, "leased.signal:approved#3", "approved", seconds=30))
    assert waiting.outcome is WaitOutcome.WAITING and job(backend, waiter.id).status is JobStatus.SLEEPING
    backend.send_signal(SignalRequest("other", None, job_id=waiter.id))
    assert job(backend, waiter.id).status is JobStatus.SLEEPING, "a signal of another name wakes nothing"
    try:
        with backend.attempt_transaction() as connection:
            backend.send_signal(SignalRequest("approved", '"undone"', job_id=waiter.id), connection)
            raise RolledBack
    except RolledBack:
        pass
    assert job(backend, waiter.id).status is JobStatus.SLEEPING, "a rolled-back signal sends nothing"
    with backend.attempt_transaction() as connection:
        backend.send_signal(SignalRequest("approved", '"third"', job_id=waiter.id), connection)
    assert job(backend, waiter.id).status is JobStatus.PENDING and backend.job_wait(waiter.id) is None
    (rerun,) = claim(backend)
    steps = {step.name: step.result for step in backend.durable_steps(waiter.id)}
    assert steps["leased.signal:approved#1"] == {"payload": {"by": "ann"}}
    took = backend.begin_wait(WaitRequest(rerun.lease, "leased.signal:approved#3", "approved",
                                          until_epoch=steps["leased.signal:approved#3.end"], end_recorded=True))
    assert took.payload == "third"
    assert backend.finish([done(rerun.lease)]) == [True]
    assert "it is done" in refused(InvalidTransition, lambda job_id: backend.send_signal(
        SignalRequest("approved", None, job_id=job_id)), waiter.id, "an ended job takes no signal")
    refused(JobNotFound, lambda job_id: backend.send_signal(SignalRequest("approved", None, job_id=job_id)), 10**9,
            "signalling no job is JobNotFound")


@check
def a_signal_not_sent_before_its_timeout_times_the_wait_out(make: MakeBackend) -> None:
    backend = make()
    (waiter,) = enqueue(backend, new_job())
    (first,) = claim(backend)
    assert backend.begin_wait(WaitRequest(first.lease, "leased.signal:paid#1", "paid", seconds=5)).outcome \
        is WaitOutcome.WAITING
    backend.clock.advance(6)
    assert backend.reclaim_expired() == 1, "the periodic reclaim wakes the sleepers whose wait has ended"
    (rerun,) = claim(backend)
    end = {step.name: step.result for step in backend.durable_steps(waiter.id)}["leased.signal:paid#1.end"]
    timed_out = backend.begin_wait(WaitRequest(rerun.lease, "leased.signal:paid#1", "paid", until_epoch=end,
                                               end_recorded=True))
    assert timed_out.outcome is WaitOutcome.DUE
    steps = {step.name: step.result for step in backend.durable_steps(waiter.id)}
    assert steps["leased.signal:paid#1"] == {"timed_out": True}, "a retried attempt sees the same timeout"
    forever = backend.begin_wait(WaitRequest(rerun.lease, "leased.signal:never#1", "never"))
    assert forever.outcome is WaitOutcome.WAITING and forever.ends_at is None
    backend.clock.advance(10**6)
    assert backend.wake_sleepers() == 0, "a wait with no timeout ends at its signal only"
    assert backend.cancel(waiter.id).status is JobStatus.CANCELLED, "a sleeping job can be cancelled"
