"""Transactional ends: a handler's writes and its job's end in one transaction of the backend's
own (attempt_transaction), committed together or not at all, and jobs enqueued on that connection."""

from __future__ import annotations

from leased.jobs import JobStatus, Lease
from leased.testing.conformance.helpers import claim, done, enqueue, job, new_job
from leased.testing.conformance.suite import MakeBackend, check


class RolledBack(Exception):
    """Raised inside a transaction to roll it back."""


@check
def a_transactional_end_commits_with_its_transaction(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(), new_job())
    one, two = claim(backend)
    with backend.attempt_transaction() as connection:
        assert backend.finish_in(connection, done(one.lease, '{"kept": true}')) == (True, set())
    ended = job(backend, one.id)
    assert (ended.status, ended.result, ended.lease_owner) == (JobStatus.DONE, {"kept": True}, None)
    assert ended.history[-1].outcome is not None, "the attempt's record is closed with the end"
    try:
        with backend.attempt_transaction() as connection:
            assert backend.finish_in(connection, done(two.lease))[0]
            raise RolledBack
    except RolledBack:
        pass
    assert job(backend, two.id).status is JobStatus.RUNNING, "an end rolled back with its transaction is not written"
    assert backend.finish([done(two.lease)]) == [True], "and its lease still holds"
    assert sum(row.done for row in backend.throughput(3600)) == 2, "a transactional end is counted as it commits"


@check
def a_transactional_end_is_fenced_on_its_lease_and_its_expiry(make: MakeBackend) -> None:
    """Unlike finish(), whose late end is the only one there can be, finish_in() commits a
    handler's own writes too: it refuses a lease that ran out by the database's clock, taken or not."""
    backend = make()
    enqueue(backend, new_job(lease_seconds=5), new_job(lease_seconds=60))
    expiring, held = claim(backend)
    with backend.attempt_transaction() as connection:
        assert backend.finish_in(connection, done(Lease(held.id, held.attempt, "intruder"))) == (False, set()), \
            "another worker's lease"
    backend.clock.advance(6)
    with backend.attempt_transaction() as connection:
        assert backend.finish_in(connection, done(expiring.lease)) == (False, set()), "an expired lease"
        assert backend.finish_in(connection, done(held.lease)) == (True, set())
    assert job(backend, expiring.id).status is JobStatus.RUNNING and job(backend, held.id).status is JobStatus.DONE


@check
def jobs_enqueued_on_a_callers_connection_commit_with_it(make: MakeBackend) -> None:
    backend = make()
    try:
        with backend.attempt_transaction() as connection:
            (lost, created), = backend.enqueue([new_job(idempotency_key="k")], connection)
            assert created and lost.id > 0
            raise RolledBack
    except RolledBack:
        pass
    assert backend.get_job(lost.id) is None, "rolled back with the caller's transaction"
    with backend.attempt_transaction() as connection:
        (kept, created), (again, created_again) = backend.enqueue(
            [new_job(idempotency_key="k"), new_job(idempotency_key="k")], connection)
    assert created and not created_again and again.id == kept.id, "a key holds within one call too"
    assert job(backend, kept.id).status is JobStatus.PENDING
