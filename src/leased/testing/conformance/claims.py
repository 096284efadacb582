"""Claims: which due jobs a claim takes, in what order, and that no two claims share one."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

from leased.jobs import Job, JobStatus, Lease
from leased.testing.conformance.helpers import claim, enqueue, ids, job, new_job
from leased.testing.conformance.suite import MakeBackend, check


@check
def claims_come_by_priority_then_due_time_then_id(make: MakeBackend) -> None:
    backend = make()
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    low, high, early, low_twin = enqueue(backend, new_job(), new_job(priority=5), new_job(run_at=past), new_job())
    assert ids(claim(backend)) == [high.id, early.id, low.id, low_twin.id]


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
        assert ids(claim(backend, limit=limit)) == ids(pending[:limit]), "the first due jobs in claim order"
        del pending[:limit]
    backend.clock.advance(61)
    pending = sorted(pending + later, key=_claim_order)
    while pending:
        assert ids(claim(backend, limit=4)) == ids(pending[:4]), "jobs fallen due take their place in the order"
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
    assert ids(claim(backend, queues=("mail",))) == [b.id]
    assert ids(claim(backend, limit=1)) == [a.id]
    assert claim(backend) == [], "a job due later, and a task no worker runs, are not claimed"
    backend.clock.advance(3601)
    assert ids(claim(backend)) == [later.id]


@check
def a_claim_leases_the_job_and_counts_the_attempt(make: MakeBackend) -> None:
    backend = make()
    (written,) = enqueue(backend, new_job(lease_seconds=20))
    (claimed,) = claim(backend, "worker-1")
    assert claimed.lease == Lease(written.id, 1, "worker-1") and claimed.attempt == 1
    read = job(backend, written.id)
    assert read.status is JobStatus.RUNNING and read.lease_owner == "worker-1" and read.attempt == 1
    assert read.lease_expires_at is not None
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
            taken[worker_id] += ids(batch)

    threads = [threading.Thread(target=take, args=(worker_id,)) for worker_id in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every = [job_id for ids in taken.values() for job_id in ids]
    assert len(every) == len(set(every)) == 60, "each job claimed exactly once"
