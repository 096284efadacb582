"""Batches: every verb that takes many things does nothing, and writes nothing, when given none."""

from __future__ import annotations

from leased.jobs import JobStatus, Outcome
from leased.testing.conformance.helpers import claim, enqueue, job
from leased.testing.conformance.suite import MakeBackend, check


@check
def an_empty_batch_is_answered_empty_and_changes_nothing(make: MakeBackend) -> None:
    backend = make()
    (waiting,) = enqueue(backend)
    assert backend.enqueue([]) == []
    (claimed,) = claim(backend)
    assert backend.renew([]) == set() and backend.renew([], progress={}) == set()
    assert backend.finish([]) == []
    backend.release([], Outcome.SHUTDOWN, "nothing to give back")
    assert backend.run_schedules([]) == []
    assert backend.bury_workers("nobody-", "killed by SIGKILL") == 0
    held = job(backend, waiting.id)
    assert (held.status, held.lease_owner, held.attempt) == (JobStatus.RUNNING, claimed.lease.worker_id, 1)
