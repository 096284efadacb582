"""Retention: pruning finished jobs and their per-minute counts."""

from __future__ import annotations

from leased.backends.ports import PruneRule
from leased.jobs import JobStatus
from leased.testing.conformance.helpers import claim, done, enqueue, error, new_job
from leased.testing.conformance.suite import MakeBackend, check


@check
def pruning_deletes_only_finished_jobs_past_their_age(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(), new_job())
    (finished,) = claim(backend, limit=1)
    backend.finish([done(finished.lease)])
    rule = PruneRule(JobStatus.DONE, older_than_seconds=1800)
    with backend.pruning() as allowed:
        assert allowed
        assert backend.count_prunable(rule) == 0 and backend.prune_batch(rule, 100) == 0
        backend.clock.advance(3600)
        assert backend.count_prunable(rule) == 1 and backend.prune_batch(rule, 100) == 1
    assert backend.get_job(finished.id) is None
    assert backend.counts() == {("default", JobStatus.PENDING): 1}
    assert sum(row.done for row in backend.throughput(7200)) == 1, "a pruned job's finish stays counted"


@check
def per_minute_counts_fold_into_one_row_and_are_forgotten_past_their_age(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, *[new_job() for _ in range(4)])
    for worker_id in ("w1", "w2"):  # two workers: each counts in rows of its own
        for claimed in claim(backend, worker_id, limit=2):
            assert backend.finish([done(claimed.lease)]) == [True]
    before = [(row.minute, row.queue_name, row.task_name, row.done, row.failed) for row in backend.throughput(600)]
    assert sum(row[3] for row in before) == 4
    assert backend.fold_throughput(3600) == 0, "rows younger than asked stay as they are"
    backend.clock.advance(1800)
    assert backend.fold_throughput(60) >= 2, "both workers' rows were folded"
    after = [(row.minute, row.queue_name, row.task_name, row.done, row.failed) for row in backend.throughput(3600)]
    assert after == before, "the sums read are unchanged"
    assert backend.fold_throughput(60) == 0, "a folded row is not folded again"
    assert backend.prune_throughput(7200) == 0
    assert backend.prune_throughput(600) >= 1
    assert backend.throughput(3600) == [] and backend.finished_since(3600) == {}


@check
def a_prune_rule_takes_its_status_and_tasks_up_to_its_limit(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job("a"), new_job("a"), new_job("b"), new_job("b", max_attempts=1))
    *finished, failing = claim(backend)
    backend.finish([done(each.lease) for each in finished] + [error(failing.lease, retry_in_seconds=None)])
    backend.clock.advance(120)
    only_a = PruneRule(JobStatus.DONE, 60, task_names=("a",))
    but_a = PruneRule(JobStatus.DONE, 60, except_task_names=("a",))
    assert (backend.count_prunable(only_a), backend.count_prunable(but_a)) == (2, 1)
    assert backend.count_prunable(PruneRule(JobStatus.FAILED, 60)) == 1
    assert backend.count_prunable(PruneRule(JobStatus.DONE, 600)) == 0, "not yet that old"
    with backend.pruning() as allowed:
        assert allowed
        assert backend.prune_batch(only_a, 1) == 1, "no more than its limit"
        assert backend.prune_batch(only_a, 10) == 1 and backend.prune_batch(only_a, 10) == 0
    assert backend.counts() == {("default", JobStatus.DONE): 1, ("default", JobStatus.FAILED): 1}
