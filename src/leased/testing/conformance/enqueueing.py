"""Enqueue: jobs written as given, and an idempotency key held while its job waits."""

from __future__ import annotations

from leased.jobs import JobStatus
from leased.testing.conformance.helpers import claim, done, job, new_job
from leased.testing.conformance.suite import MakeBackend, check


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
