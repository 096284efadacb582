"""PostgreSQL's fork, kept from drifting. Its backend does 14 write verbs in one statement each
(backends/postgres/fused.py) where the shared body does them as several statements of one
transaction (backends/sql/). Both must keep the same promises: the shared sequence passes the
whole conformance suite on PostgreSQL (the fused verbs pass it in test_storage_conformance.py),
and the same write verbs through each leave the same rows behind."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import postgres_schema
from leased.backends.ports import AttemptEnd, ClaimRequest, PruneRule
from leased.jobs import JobStatus, Lease, Outcome
from leased.testing.conformance import CHECKS, enqueue, exercise, new_job

pytestmark = pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)


def _sequence(url: str) -> Any:
    from leased.backends.postgres import PostgresBackend

    return PostgresBackend(url, fused=False)


def _fused(url: str) -> Any:
    from leased.backends.postgres import PostgresBackend

    return PostgresBackend(url)


@pytest.mark.parametrize("check", CHECKS)
def test_the_shared_sequence_keeps_every_promise_on_postgres(check, database_url):
    exercise(lambda: _sequence(database_url), only=[check])


def _end(lease: Lease, outcome: Outcome, retry_in_seconds: float | None = None) -> AttemptEnd:
    if outcome is Outcome.DONE:
        return AttemptEnd(lease, outcome, '{"n": 1}')
    return AttemptEnd(lease, outcome, None, "ValueError", "no", "Traceback: ...", retry_in_seconds)


def _drive(backend: Any) -> dict[str, Any]:
    """The write verbs that have a fused form, on one scenario; what each returned, and the rows left."""
    said: dict[str, Any] = {}
    jobs = enqueue(backend, *(new_job("t", queue_name=queue, max_attempts=2, lease_seconds=10)
                              for queue in ["q1"] * 6 + ["q2"] * 3))
    claimed = backend.claim(ClaimRequest(worker_id="w1", task_names=("t",), queue_names=("q1",), limit=6))
    leases = [job.lease for job in sorted(claimed, key=lambda job: job.id)]
    stranger = Lease(leases[0].job_id, leases[0].attempt, "w-other")
    said["renew"] = sorted(lease.job_id for lease in backend.renew(
        leases + [stranger], progress={leases[1]: '{"done": 1, "total": 2, "attempt": 1}'}))
    said["finish"] = backend.finish([
        _end(leases[0], Outcome.DONE), _end(leases[1], Outcome.ERROR, 60.0), _end(leases[2], Outcome.ERROR),
        _end(stranger, Outcome.DONE)])
    backend.release([leases[3]], Outcome.SHUTDOWN, "shutting down")
    said["cancel"] = backend.cancel(leases[4].job_id).status
    backend.clock.advance(11)  # the last lease (leases[5]) expires
    said["reclaim_expired"] = backend.reclaim_expired()
    said["late finish"] = backend.finish([_end(leases[5], Outcome.DONE)])
    said["retry"] = backend.retry(leases[2].job_id).status
    said["cancel_pending"] = backend.cancel_pending(None, "q2")
    said["retry_failed"] = backend.retry_failed("t", None)
    said["pause_queue"] = [backend.pause_queue("q1"), backend.pause_queue("q1")]
    said["resume_queue"] = [backend.resume_queue("q1"), backend.resume_queue("q1")]
    backend.clock.advance(7200)
    said["prune_batch"] = backend.prune_batch(PruneRule(JobStatus.CANCELLED, 3600.0), 100)
    said["fold_throughput"] = backend.fold_throughput(60.0)
    first = jobs[0].id
    said["jobs"] = [(job.id - first, job.status, job.attempt, job.max_attempts, job.last_error, job.result,
                     job.lease_owner, job.progress, job.crashes,
                     [(a.number, a.worker_id, a.outcome, a.error_type, a.error_message, a.progress)
                      for a in job.history])
                    for job in (backend.get_job(job.id) for job in jobs) if job is not None]
    said["throughput"] = sorted((row.queue_name, row.task_name, row.done, row.failed)
                                for row in backend.throughput(86400.0))
    said["paused"] = backend.paused_queues()
    return said


def _through(make: Any, url: str) -> dict[str, Any]:
    backend = make(url)
    try:
        backend.migrate()
        return _drive(backend)
    finally:
        backend.close()


def test_the_fused_verbs_and_the_shared_sequence_leave_the_same_rows(database_url):
    through_fused = _through(_fused, database_url)
    with postgres_schema() as other_url:
        through_sequence = _through(_sequence, other_url)
    assert through_fused["jobs"], "the scenario wrote jobs"
    for what in through_fused:
        assert through_sequence[what] == through_fused[what], what
