"""Ends: each fenced on its own lease, an error retried after its backoff or failing the job."""

from __future__ import annotations

from datetime import timedelta

from leased.jobs import JobStatus, Lease, Outcome
from leased.testing.conformance.helpers import claim, done, enqueue, error, job, new_job
from leased.testing.conformance.suite import MakeBackend, check


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
    assert backend.finish([done(Lease(one.id, one.attempt + 1, "w1"))]) == [False], "nor another attempt's end"


@check
def an_end_in_another_workers_name_is_not_written_beside_the_holders_own(make: MakeBackend) -> None:
    # One batch holding the holder's end and an intruder's for the same job and attempt: each is
    # fenced on its whole lease, worker included. The shared sequence once counted the intruder's as
    # written (and the job finished twice in throughput); PostgreSQL's fused finish said so too.
    backend = make()
    enqueue(backend)
    (held,) = claim(backend)
    intruder = Lease(held.id, held.attempt, "intruder")
    assert backend.finish([done(held.lease, "1"), done(intruder, "2")]) == [True, False]
    assert job(backend, held.id).result == 1
    assert [(row.done, row.failed) for row in backend.throughput(3600.0)] == [(1, 0)]


@check
def an_error_with_a_retry_waits_for_its_backoff(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend)
    (first,) = claim(backend)
    assert backend.finish([error(first.lease, retry_in_seconds=60)]) == [True]
    waiting = job(backend, first.id)
    assert waiting.status is JobStatus.PENDING and waiting.last_error == "ValueError: kaboom"
    (record,) = waiting.history
    assert record.finished_at is not None and waiting.run_after - record.finished_at > timedelta(seconds=59), \
        "due again retry_in_seconds after the end"
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
