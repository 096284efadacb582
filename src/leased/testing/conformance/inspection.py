"""Reads: counts, listings and lookups that agree with what was written."""

from __future__ import annotations

from leased.backends.ports import JobFilter
from leased.jobs import JobStatus
from leased.limits import QueueLimit
from leased.testing.conformance.helpers import claim, done, enqueue, error, ids, job, new_job, register
from leased.testing.conformance.suite import MakeBackend, check


@check
def counts_and_listings_agree_with_what_was_written(make: MakeBackend) -> None:
    backend = make()
    written = enqueue(backend, new_job("a"), new_job("a", queue_name="mail"), new_job("b", idempotency_key="key-7"))
    (claimed,) = claim(backend, limit=1)
    backend.finish([done(claimed.lease)])
    assert backend.counts() == {("default", JobStatus.DONE): 1, ("default", JobStatus.PENDING): 1,
                                ("mail", JobStatus.PENDING): 1}
    counts = backend.job_counts()
    assert counts.by_queue["default"]["done"] == 1 and counts.by_queue["mail"]["pending"] == 1
    assert ids(backend.list_jobs(JobFilter())) == ids(reversed(written))
    assert ids(backend.list_jobs(JobFilter(newest_first=False, limit=2))) == ids(written[:2])
    assert ids(backend.list_jobs(JobFilter(before_id=written[2].id))) == [written[1].id, written[0].id]
    assert ids(backend.list_jobs(JobFilter(status=JobStatus.PENDING, queue_name="mail"))) == [written[1].id]
    assert ids(backend.list_jobs(JobFilter(search="key-7"))) == [written[2].id]
    assert ids(backend.list_jobs(JobFilter(search=str(written[0].id)))) == [written[0].id]
    assert sorted(backend.task_names()) == ["a", "b"] and sorted(backend.queue_names()) == ["default", "mail"]
    assert backend.get_job(10**9) is None
    # A pending job with a concurrency key is pending like the others (PostgreSQL finds keyed and
    # unkeyed pending jobs in different places).
    (keyed,) = enqueue(backend, new_job("b", queue_name="mail")._replace(concurrency_key="k", key_concurrency=1))
    assert ids(backend.list_jobs(JobFilter(status=JobStatus.PENDING))) == [keyed.id, written[2].id, written[1].id]
    assert ids(backend.list_jobs(JobFilter(status=JobStatus.PENDING, newest_first=False, after_id=written[1].id))) \
        == [written[2].id, keyed.id]
    assert backend.count_jobs(JobStatus.PENDING, None, None) == 3
    assert backend.count_jobs(JobStatus.PENDING, "b", "mail") == 1
    assert backend.count_jobs(JobStatus.PENDING, None, "mail") == 2


@check
def jobs_are_listed_by_the_worker_that_ran_or_holds_them(make: MakeBackend) -> None:
    """A worker's jobs: those it ran an attempt of (whoever runs them now), and those it holds now."""
    backend = make()
    first, second, third, _ = enqueue(backend, new_job(), new_job(), new_job(), new_job("b"))
    ran_by_w1 = claim(backend, "w1", limit=2)
    backend.finish([done(ran_by_w1[0].lease), error(ran_by_w1[1].lease, retry_in_seconds=0)])
    assert ids(claim(backend, "w2", tasks=("a",))) == [third.id, second.id]  # the retry is due later
    assert ids(backend.list_jobs(JobFilter(worker_id="w1"))) == [second.id, first.id]
    assert ids(backend.list_jobs(JobFilter(worker_id="w2"))) == [third.id, second.id]
    assert ids(backend.list_jobs(JobFilter(worker_id="w2", status=JobStatus.RUNNING, newest_first=False))) \
        == [second.id, third.id]
    assert ids(backend.list_jobs(JobFilter(worker_id="w1", before_id=second.id))) == [first.id]
    assert backend.list_jobs(JobFilter(worker_id="w3")) == []


@check
def the_oldest_due_job_and_recent_finishes_are_read_per_queue(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(queue_name="mail"), new_job(queue_name="mail"), new_job("b", max_attempts=1))
    enqueue(backend, new_job(queue_name="later", delay_seconds=3600))
    backend.clock.advance(100)
    waited = backend.oldest_due()
    assert set(waited) == {"mail", "default"}, "a queue whose jobs are not due yet has none waiting"
    assert 100 <= waited["mail"] < 200 and 100 <= waited["default"] < 200, waited
    mail, _, failing = claim(backend)
    backend.finish([done(mail.lease), error(failing.lease, retry_in_seconds=None)])
    assert backend.finished_since(300) == {("mail", JobStatus.DONE): 1, ("default", JobStatus.FAILED): 1}
    backend.clock.advance(600)
    assert backend.finished_since(300) == {}, "only the window's minutes count"
    assert backend.finished_since(1200) == {("mail", JobStatus.DONE): 1, ("default", JobStatus.FAILED): 1}


@check
def throughput_counts_finishes_per_minute_queue_and_task(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job("a"), new_job("b", queue_name="mail", max_attempts=1), new_job("a", max_attempts=1))
    for claimed, end in zip(claim(backend), (done, lambda lease: error(lease, None), done), strict=True):
        assert backend.finish([end(claimed.lease)]) == [True]
    rows = backend.throughput(300)
    by_task: dict[tuple[str | None, str | None], tuple[int, int]] = {}
    for row in rows:  # one minute's rows, or two across a minute's end
        done_before, failed_before = by_task.get((row.queue_name, row.task_name), (0, 0))
        by_task[row.queue_name, row.task_name] = (done_before + row.done, failed_before + row.failed)
    assert by_task == {("default", "a"): (2, 0), ("mail", "b"): (0, 1)}, by_task
    assert all(row.minute.second == 0 and row.minute.tzinfo is not None for row in rows)
    assert [row.minute for row in rows] == sorted(row.minute for row in rows), "oldest minute first"
    overall = backend.throughput(300, by_task=False)
    assert all((row.queue_name, row.task_name) == (None, None) for row in overall)
    assert (sum(row.done for row in overall), sum(row.failed for row in overall)) == (2, 1)


@check
def why_facts_read_a_job_with_what_holds_it_back(make: MakeBackend) -> None:
    backend = make()
    first, second, third = enqueue(backend, *[new_job(queue_name="q") for _ in range(3)])
    register(backend, "w1")
    backend.pause_queue("q")
    backend.set_queue_limit(QueueLimit("q", concurrency=2))
    facts = backend.why_facts(third.id)
    assert facts is not None and facts.job.id == third.id and facts.job.status is JobStatus.PENDING
    assert facts.now.tzinfo is not None and abs((facts.now - third.created_at).total_seconds()) < 60
    assert facts.jobs_ahead == 2, "the due jobs of its queue a claim takes first"
    assert facts.queue_paused_at is not None and [worker.id for worker in facts.workers] == ["w1"]
    (limit,) = [each for each in facts.limits if each.scope == "queue"]
    assert (limit.name, limit.concurrency, limit.running) == ("q", 2, 0)
    assert facts.scheduled_by is None and backend.why_facts(10**9) is None
    backend.resume_queue("q")
    (running,) = claim(backend, limit=1)
    facts = backend.why_facts(running.id)
    assert facts is not None and facts.job.status is JobStatus.RUNNING and facts.job.history[-1].worker_id == "w1"


@check
def old_transactions_name_only_those_open_longer_than_asked(make: MakeBackend) -> None:
    """A backend that cannot see other sessions' transactions names none; whatever it names is
    open at least that long, and its statement is shown without its literals."""
    backend = make()
    assert backend.old_transactions(10**6) == (), "no transaction has been open eleven days"
    with backend.attempt_transaction() as connection:
        enqueue_on = backend.enqueue([new_job(args_json='["a secret literal"]')], connection)
        assert enqueue_on[0][1]
        named = backend.old_transactions(0)
    assert all(each.open_seconds >= 0 and "a secret literal" not in each.query for each in named), named


@check
def poison_jobs_are_counted_by_queue_among_the_recent_failures(make: MakeBackend) -> None:
    backend = make()
    enqueue(backend, new_job(queue_name="mail", max_crashes=1), new_job(max_attempts=1))
    register(backend, "w1")
    poison, failing = claim(backend, "w1")
    backend.finish([error(failing.lease, retry_in_seconds=None)])
    assert backend.bury_workers("w1", "killed by SIGKILL") == 1
    assert job(backend, poison.id).quarantined
    assert backend.recent_quarantined(10) == {"mail": 1}
    assert backend.recent_quarantined(1) == {}, "the newest failed job is no poison: one read, of `recent` jobs"


@check
def job_counts_are_exact_when_small_and_say_which_are_estimated(make: MakeBackend) -> None:
    """The counts every database gives for the same rows: active statuses always exact, failed
    exact up to `exact_up_to`, the rest from `sample_size` ids probed (all of them, here, first)."""
    backend = make()
    enqueue(backend, *[new_job(max_attempts=1) for _ in range(8)])
    enqueue(backend, new_job(queue_name="mail"), new_job("b", delay_seconds=60))
    ended = claim(backend, tasks=("a",), queues=("default",))
    backend.finish([done(each.lease) for each in ended[:3]] + [error(each.lease, None) for each in ended[3:]])
    exact = backend.job_counts(exact_up_to=2, sample_size=100)
    assert exact.estimated == frozenset()
    assert (exact.by_queue["default"]["done"], exact.by_queue["default"]["failed"],
            exact.by_queue["default"]["pending"], exact.by_queue["mail"]["pending"]) == (3, 5, 1, 1)
    assert exact.totals == {"pending": 2, "running": 0, "done": 3, "failed": 5, "cancelled": 0, "waiting": 0,
                            "sleeping": 0}
    sampled = backend.job_counts(exact_up_to=2, sample_size=3)
    assert sampled.estimated == {"done", "failed"}, "more failed jobs than exact_up_to: estimated as done is"
    assert (sampled.by_queue["default"]["pending"], sampled.by_queue["mail"]["pending"]) == (1, 1)
