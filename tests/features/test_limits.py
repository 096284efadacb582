"""Concurrency and rate limits, per queue and per key, enforced by the claim on every backend."""

from __future__ import annotations

import threading

import pytest

from conftest import raw_sql, seconds_before, wait_for
from leased import ConfigurationError, JobStatus, Outcome
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.limits import QueueLimit, Rate


@pytest.fixture
def tasks(app):
    @app.task(name="plain")
    def plain(n=0): ...

    @app.task(name="billing", queue_name="billing")
    def billing(n=0): ...

    @app.task(name="sync", concurrency=1, concurrency_key="customer:{customer_id}")
    def sync(customer_id, n=0): ...

    @app.task(name="pair", concurrency=2, concurrency_key=lambda customer_id, n=0: f"pair:{customer_id}")
    def pair(customer_id, n=0): ...

    @app.task(name="rated", concurrency_key="api:{host}", rate_limit="3/h")
    def rated(host, n=0): ...

    return plain, billing, sync, pair, rated


def claim(app, worker="w1", limit=10, queues=None, reclaim_expired=False):
    request = ClaimRequest(worker, tuple(sorted(app.tasks)), queues, limit, reclaim_expired)
    return app.backend.claim(request)


def done(app, jobs):
    assert app.backend.finish([AttemptEnd(job.lease, Outcome.DONE, "null") for job in jobs]) == [True] * len(jobs)


def test_a_queue_limit_caps_running_jobs_across_claims(app, tasks):
    _, billing, *_ = tasks
    billing.enqueue_many([(n,) for n in range(6)])
    app.limit("billing", concurrency=2)
    first = claim(app, "w1")
    assert len(first) == 2
    assert claim(app, "w2") == []  # another worker: the limit is the database's, not the worker's
    done(app, first[:1])
    assert len(claim(app, "w2")) == 1
    assert claim(app, "w3") == []


def test_a_waiting_job_burns_no_attempt_and_is_not_an_error(app, tasks):
    _, billing, *_ = tasks
    app.limit("billing", concurrency=1)
    held, waiting = billing.enqueue(1), billing.enqueue(2)
    assert [job.id for job in claim(app)] == [held.id]
    job = app.get_job(waiting.id)
    assert (job.status, job.attempt, job.last_error, job.history) == (JobStatus.PENDING, 0, None, ())


def test_limits_are_stored_listed_and_removed(app, tasks):
    assert app.limits() == {}
    app.limit("billing", concurrency=5, rate_limit="100/m")
    app.limit("mail", rate_limit="10/s")
    assert app.limits() == {"billing": QueueLimit("billing", 5, Rate(100, 60.0)),
                            "mail": QueueLimit("mail", None, Rate(10, 1.0))}
    app.limit("billing", concurrency=None)
    assert set(app.limits()) == {"mail"}
    assert str(app.limits()["mail"].rate_limit) == "10/s"


def test_removing_a_queue_limit_frees_its_jobs(app, tasks):
    _, billing, *_ = tasks
    billing.enqueue_many([(n,) for n in range(3)])
    app.limit("billing", concurrency=1)
    assert len(claim(app)) == 1
    app.limit("billing")
    assert len(claim(app)) == 2


def test_a_busy_key_holds_only_its_own_jobs(app, tasks):
    plain, _, sync, *_ = tasks
    a1, a2 = sync.enqueue("a", 1), sync.enqueue("a", 2)
    b1 = sync.enqueue(customer_id="b")
    other = plain.enqueue()
    assert (a1.concurrency_key, b1.concurrency_key, other.concurrency_key) == ("customer:a", "customer:b", None)
    assert {job.id for job in claim(app)} == {a1.id, b1.id, other.id}
    sync.enqueue("b", 2)
    later = plain.enqueue()
    assert [job.id for job in claim(app)] == [later.id]  # a and b are busy; the queue is not
    done(app, [app.get_job(a1.id)])
    assert [job.id for job in claim(app)] == [a2.id]


def test_a_key_with_room_for_two_gives_two_in_one_claim(app, tasks):
    *_, pair, _ = tasks
    jobs = pair.enqueue_many([("x", n) for n in range(5)])
    assert {job.concurrency_key for job in jobs} == {"pair:x"}
    assert [job.id for job in claim(app)] == [jobs[0].id, jobs[1].id]
    assert claim(app) == []


def test_using_overrides_the_key(app, tasks):
    _, _, sync, *_ = tasks
    first = sync.using(concurrency_key="shared").enqueue("a")
    second = sync.using(concurrency_key="shared").enqueue("b")
    assert app.get_job(second.id).concurrency_key == "shared"
    assert [job.id for job in claim(app)] == [first.id]


def test_a_limit_on_a_task_without_a_key_limits_the_task(app):
    @app.task(name="solo", concurrency=1)
    def solo(n): ...

    jobs = solo.enqueue_many([(n,) for n in range(3)])
    assert jobs[0].concurrency_key == "solo"
    assert len(claim(app)) == 1


def test_claim_order_holds_across_limited_and_unlimited_jobs(app, tasks):
    plain, billing, sync, *_ = tasks
    app.limit("billing", concurrency=10)
    low = plain.enqueue()
    keyed = sync.using(priority=3).enqueue("a")
    queued = billing.using(priority=2).enqueue()
    high = plain.using(priority=5).enqueue()
    assert [job.id for job in claim(app)] == [high.id, keyed.id, queued.id, low.id]


def test_a_claim_takes_no_more_than_its_limit_when_limits_are_in_use(app, tasks):
    plain, billing, sync, *_ = tasks
    app.limit("billing", concurrency=10)
    plain.enqueue_many([(n,) for n in range(3)])
    billing.enqueue_many([(n,) for n in range(3)])
    sync.enqueue_many([(f"c{n}",) for n in range(3)])
    assert len(claim(app, limit=4)) == 4
    assert len(claim(app, limit=10)) == 5


def test_a_keyed_job_in_a_limited_queue_meets_both_limits(app):
    @app.task(name="charge", queue_name="billing", concurrency=2, concurrency_key="{customer}")
    def charge(customer, n=0): ...

    app.limit("billing", concurrency=3)
    charge.enqueue_many([(customer, n) for customer in "ab" for n in range(3)])
    claimed = claim(app)
    assert len(claimed) == 3
    assert max(sum(job.job.concurrency_key == key for job in claimed) for key in "ab") == 2


def test_a_rate_limit_counts_starts_not_running_jobs(app, tasks):
    *_, rated = tasks
    rated.enqueue_many([("h", n) for n in range(5)])
    rated.enqueue("other")
    first = claim(app)
    assert sorted(job.kwargs.get("host") or job.args[0] for job in first) == ["h", "h", "h", "other"]
    done(app, first)
    assert claim(app) == []  # finished, but three of key h started within the hour


def test_a_queue_rate_limit_frees_a_start_when_the_window_slides(app, tasks):
    _, billing, *_ = tasks
    billing.enqueue_many([(n,) for n in range(3)])
    app.limit("billing", rate_limit="1/m")
    assert len(claim(app)) == 1
    assert claim(app) == []
    # Two minutes on: the start is out of the window (moved back rather than waited for).
    raw_sql(app, f"UPDATE leased_starts SET started_at = {seconds_before(app, 'started_at', 120)}")
    assert len(claim(app)) == 1
    assert claim(app) == []


def test_a_crashed_workers_job_counts_until_its_lease_is_reclaimed(app, tasks):
    _, _, sync, *_ = tasks
    job = sync.using(lease=0.5).enqueue("a")
    sync.enqueue("a", 2)
    (held,) = claim(app, "dead")
    wait_for(lambda: _expired(app, held.id), message="the lease to expire")
    assert claim(app, "w2") == []  # expired but not yet reclaimed: it still runs, as far as anyone knows
    assert len(claim(app, "w2", reclaim_expired=True)) == 1  # reclaimed: the key has room again
    assert app.get_job(job.id).history[0].outcome is Outcome.EXPIRED


def _expired(app, job_id) -> bool:
    from datetime import datetime, timezone

    lease = app.get_job(job_id).lease_expires_at
    return lease is not None and lease <= datetime.now(timezone.utc)


def test_concurrent_claimers_never_exceed_a_limit(app, tasks):
    _, billing, sync, *_ = tasks
    app.limit("billing", concurrency=3)
    billing.enqueue_many([(n,) for n in range(30)])
    sync.enqueue_many([(customer, n) for customer in "abc" for n in range(10)])
    claimed: list = []
    lock = threading.Lock()

    def claimer(name):
        for _ in range(5):
            jobs = claim(app, name, limit=4)
            with lock:
                claimed.extend(jobs)

    threads = [threading.Thread(target=claimer, args=(f"w{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(job.queue_name == "billing" for job in claimed) == 3
    for key in ("customer:a", "customer:b", "customer:c"):
        assert sum(job.job.concurrency_key == key for job in claimed) == 1
    assert len({job.id for job in claimed}) == len(claimed)


def test_a_worker_drains_keyed_jobs_one_at_a_time_per_key(app):
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()

    @app.task(name="step", concurrency=1, concurrency_key="{key}")
    def step(key, n):
        with lock:
            running[key] = running.get(key, 0) + 1
            most[key] = max(most.get(key, 0), running[key])
        with lock:
            running[key] -= 1

    step.enqueue_many([(key, n) for key in "ab" for n in range(4)])
    stats = app.worker(concurrency=4, poll_interval=0.05).run(stop_when_idle=True)
    assert app.counts()["default"]["done"] == 8, stats
    assert most == {"a": 1, "b": 1}


@pytest.mark.parametrize("call, message", [
    (lambda app: app.limit("q", concurrency=0), "invalid concurrency 0: use a whole number >= 1"),
    (lambda app: app.limit("q", concurrency=-1), "invalid concurrency -1"),
    (lambda app: app.limit("q", rate_limit="100/x"), "invalid rate_limit '100/x'"),
    (lambda app: app.limit("q", rate_limit="0/m"), "invalid rate_limit '0/m'"),
    (lambda app: app.limit("bad name!", concurrency=1), "invalid queue_name"),
])
def test_bad_queue_limits_are_one_line_errors(app, call, message):
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")) as error:
        call(app)
    assert "\n" not in str(error.value)


def test_bad_task_limits_are_one_line_errors(app):
    def handler(customer_id): ...

    cases = [
        (dict(concurrency_key="customer:{customer_id}"), "has a concurrency_key but no limit: add concurrency=N"),
        (dict(concurrency=1, concurrency_key="customer:{custmer_id}"), r"names \{custmer_id\}, which is not one"),
        (dict(concurrency=0), "invalid concurrency 0"),
        (dict(concurrency=1, rate_limit="5/day"), "invalid rate_limit '5/day'"),
        (dict(concurrency=1, concurrency_key=42), "invalid concurrency_key 42"),
    ]
    for number, (options, message) in enumerate(cases):
        with pytest.raises(ConfigurationError, match=message) as error:
            app.task(name=f"t{number}", **options)(handler)
        assert "\n" not in str(error.value)

    @app.task(name="unlimited")
    def unlimited(customer_id): ...

    with pytest.raises(ConfigurationError, match="has no limit per key"):
        unlimited.using(concurrency_key="x")

    @app.task(name="keyed", concurrency=1, concurrency_key=lambda customer_id: "")
    def keyed(customer_id): ...

    with pytest.raises(ConfigurationError, match="invalid concurrency_key ''"):
        keyed.enqueue("c")


def test_full_claims_find_a_keyed_job_that_waits_behind_plain_ones(app, tasks):
    """Claims that fill every slot with plain jobs never run short, the cue to look for limited
    ones. On PostgreSQL, whose worker reclaims beside its claims, they still look once a second;
    elsewhere the worker's claim looks with its once-a-second reclaim."""
    if not app.backend.reclaims_beside_claims:
        return
    plain, _, sync, *_ = tasks
    plain.enqueue_many([(n,) for n in range(3000)])
    assert len(claim(app, limit=1)) == 1  # the first claim looks, and finds no limit in use
    keyed = sync.using(priority=10).enqueue("c1")
    claimed: list[int] = []
    wait_for(lambda: claimed.extend(job.id for job in claim(app, limit=1)) or keyed.id in claimed,
             message="a full claim to take the keyed job")
