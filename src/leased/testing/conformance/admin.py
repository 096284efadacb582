"""What people do to jobs and queues: cancel, retry, pause, limit."""

from __future__ import annotations

from leased.errors import InvalidTransition, JobNotFound
from leased.jobs import JobStatus, Outcome
from leased.limits import QueueLimit
from leased.testing.conformance.helpers import claim, done, enqueue, error, ids, job, new_job, refused
from leased.testing.conformance.suite import MakeBackend, check


@check
def cancel_ends_a_waiting_or_running_job_and_fences_its_holder(make: MakeBackend) -> None:
    backend = make()
    waiting, running = enqueue(backend, new_job("b"), new_job("a"))
    (claimed,) = claim(backend, tasks=("a",))
    assert backend.cancel(waiting.id).status is JobStatus.CANCELLED
    cancelled = backend.cancel(running.id)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.history[-1].outcome is Outcome.CANCELLED
    assert backend.renew([claimed.lease]) == set(), "its worker learns at its next renewal"
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
    assert backend.finish([done(again[other.id].lease)]) == [True]
    assert "it is done" in refused(InvalidTransition, backend.retry, other.id, "a done job cannot be retried")
    refused(JobNotFound, backend.retry, 10**9, "retrying no job is JobNotFound")
    cancelled = backend.cancel(failing.id)
    assert backend.retry(cancelled.id).finished_at is None, "a retried job is unfinished again"


@check
def a_retry_past_the_attempt_cap_grants_one_more_attempt(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(max_attempts=2))
    for _ in range(2):
        (claimed,) = claim(backend)
        backend.finish([error(claimed.lease, retry_in_seconds=0 if claimed.attempt < 2 else None)])
    assert job(backend, claimed.id).status is JobStatus.FAILED
    assert backend.retry(claimed.id).max_attempts == 3
    (third,) = claim(backend)
    assert third.attempt == 3


@check
def a_retry_never_duplicates_a_pending_idempotency_key(make: MakeBackend) -> None:
    backend = make()
    (first,) = enqueue(backend, new_job(idempotency_key="k"))
    backend.cancel(first.id)
    enqueue(backend, new_job(idempotency_key="k"))
    assert "idempotency key" in refused(InvalidTransition, backend.retry, first.id,
                                        "a retry would make a second pending job with one key")


@check
def cancel_pending_leaves_running_and_other_jobs_alone(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend)
    (running,) = claim(backend)
    of_a = enqueue(backend, new_job(), new_job(), new_job())
    (elsewhere,) = enqueue(backend, new_job(queue_name="other"))
    (of_b,) = enqueue(backend, new_job("b"))
    assert backend.count_jobs(JobStatus.PENDING, "a", None) == 4
    assert backend.cancel_pending("a", "default") == 3
    assert all(job(backend, each.id).status is JobStatus.CANCELLED and job(backend, each.id).finished_at is not None
               for each in of_a)
    assert job(backend, elsewhere.id).status is JobStatus.PENDING
    assert backend.cancel_pending(None, "other") == 1
    assert backend.cancel_pending(None, None) == 1 and job(backend, of_b.id).status is JobStatus.CANCELLED
    assert backend.cancel_pending(None, None) == 0
    assert job(backend, running.id).status is JobStatus.RUNNING


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
    assert ids(claim(backend)) == [mail.id]


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
