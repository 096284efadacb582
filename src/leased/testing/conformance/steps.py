"""Durable steps: each step of a handler recorded once by the attempt that ran it, fenced as a
transactional end is, and read back in the order they ran."""

from __future__ import annotations

from leased.jobs import Lease
from leased.testing.conformance.helpers import claim, enqueue, error, new_job
from leased.testing.conformance.suite import MakeBackend, check
from leased.testing.conformance.transactional import RolledBack


@check
def durable_steps_are_recorded_by_the_attempt_that_holds_the_lease(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(lease_seconds=30))
    (first,) = claim(backend)
    # Steps are read back by when they started: a second apart here (the clock moved between
    # them), so that no database's clock resolution ties two.
    assert backend.durable_steps(first.id) == []
    assert backend.record_step(first.lease, "fetch", '{"rows": 3}', 0.25) is True
    backend.clock.advance(1)
    assert backend.record_step(first.lease, "nothing", None, 0.0) is True
    assert backend.record_step(Lease(first.id, first.attempt, "intruder"), "stolen", "1", 0.1) is False
    try:
        with backend.attempt_transaction() as connection:
            assert backend.record_step(first.lease, "undone", "2", 0.1, connection) is True
            raise RolledBack
    except RolledBack:
        pass
    backend.clock.advance(1)
    with backend.attempt_transaction() as connection:
        assert backend.record_step(first.lease, "in-transaction", "3", 0.1, connection) is True
    assert backend.finish([error(first.lease, retry_in_seconds=0)]) == [True]
    assert backend.record_step(first.lease, "late", "4", 0.1) is False, "a finished attempt records nothing"
    (second,) = claim(backend)
    backend.clock.advance(1)
    assert backend.record_step(second.lease, "after-retry", "5", 0.1) is True
    recorded = backend.durable_steps(first.id)
    assert [(step.name, step.attempt, step.result) for step in recorded] == [
        ("fetch", 1, {"rows": 3}), ("nothing", 1, None), ("in-transaction", 1, 3), ("after-retry", 2, 5)]
    assert all(step.started_at <= step.finished_at and step.finished_at.tzinfo is not None for step in recorded)
    assert abs((recorded[0].finished_at - recorded[0].started_at).total_seconds() - 0.25) < 0.01, "it ran `seconds`"
    backend.clock.advance(31)
    assert backend.record_step(second.lease, "expired", "6", 0.1) is False, "fenced on the lease's expiry"
    assert len(backend.durable_steps(first.id)) == 4
