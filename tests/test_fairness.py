"""Fairness by key (docs/howto/fairness.md): a queue's starts shared between keys by weight, on
every database whose claim shares by key (capability fair_claims); the others refuse a key."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from conftest import running_worker, wait_for
from leased import ConfigurationError, JobStatus, Outcome
from leased.backends.ports import AttemptEnd, ClaimRequest

fair = pytest.mark.needs("fair_claims")


@pytest.fixture
def work(app):
    @app.task(name="work", fairness_key="tenant-{tenant}")
    def work(tenant, n=0): ...

    return work


def claim(app, limit=10, worker="w1"):
    return app.backend.claim(ClaimRequest(worker, tuple(sorted(app.tasks)), None, limit))


def tenants(app, claimed):
    return [app.get_job(job.id).fairness_key for job in claimed]


@fair
def test_a_small_key_is_served_at_once_beside_a_big_backlog(app, work):
    work.enqueue_many([("A", n) for n in range(2000)])
    work.enqueue_many([("B", n) for n in range(20)])
    starts: list[str] = []
    while starts.count("tenant-B") < 20:
        batch = tenants(app, claim(app, limit=2))
        assert sorted(batch) == ["tenant-A", "tenant-B"], "one each: B is served from its first claim"
        starts += batch
    # Equal weights, B joining at A's pass: the two alternate, so B's 20 jobs are all among the 40
    # starts after its enqueue (the bound: 2 x its jobs), not behind A's 2,000.
    assert len(starts) == 40, starts
    assert all(key == "tenant-A" for key in tenants(app, claim(app, limit=10))), "then A has every slot"


@fair
def test_weights_split_the_starts_of_backlogged_keys(app, work):
    app.fairness("default", weights={"tenant-A": 3})
    work.enqueue_many([("A", n) for n in range(600)])
    work.enqueue_many([("B", n) for n in range(600)])
    starts = Counter()
    for _ in range(50):  # 400 starts, in batches of 8
        starts.update(tenants(app, claim(app, limit=8)))
    assert abs(starts["tenant-A"] / 400 - 0.75) <= 0.02, starts


@fair
def test_a_weight_changed_applies_from_the_next_claim(app, work):
    work.enqueue_many([("A", n) for n in range(100)])
    work.enqueue_many([("B", n) for n in range(100)])
    assert Counter(tenants(app, claim(app, limit=20))) == {"tenant-A": 10, "tenant-B": 10}
    app.fairness("default", weights={"tenant-B": 4})
    assert Counter(tenants(app, claim(app, limit=20))) == {"tenant-A": 4, "tenant-B": 16}


@fair
def test_an_idle_key_leaves_every_slot_to_the_others_and_banks_no_credit(app, work):
    work.enqueue_many([("A", n) for n in range(50)])
    assert tenants(app, claim(app, limit=10)) == ["tenant-A"] * 10, "no other key waits: A takes every slot"
    work.enqueue_many([("B", n) for n in range(30)])
    # B was idle while A ran 10: it starts level with A, not 10 ahead.
    assert Counter(tenants(app, claim(app, limit=10))) == {"tenant-A": 5, "tenant-B": 5}


@fair
def test_within_a_key_priority_then_due_order_hold(app, work):
    now = datetime.now(timezone.utc)
    later = work.using(run_after=now - timedelta(seconds=30)).enqueue("A", 1)
    low = work.enqueue("A", 2)
    high = work.using(priority=5).enqueue("A", 3)
    earliest = work.using(run_after=now - timedelta(seconds=60)).enqueue("A", 4)
    work.using(run_after=timedelta(hours=1)).enqueue("A", 5)  # not due: not claimed
    work.enqueue_many([("B", n) for n in range(10)])
    # One at a time (a batch comes back sorted): A's turns take A's jobs in claim order.
    claimed = [claim(app, limit=1) for _ in range(14)]
    assert [job.id for batch in claimed for job in batch if job.kwargs == {} and job.args[0] == "A"] == [
        high.id, earliest.id, later.id, low.id]
    assert claim(app) == [], "the job due in an hour waits"



@fair
def test_jobs_without_a_key_go_first_and_keys_fill_the_room(app, work):
    @app.task(name="plain")
    def plain(n=0): ...

    work.enqueue_many([("A", n) for n in range(5)])
    plain_jobs = plain.enqueue_many([(n,) for n in range(3)])
    claimed = claim(app, limit=5)
    assert {job.id for job in plain_jobs} < {job.id for job in claimed}
    assert tenants(app, claimed).count("tenant-A") == 2


@fair
def test_queue_limits_pause_and_cancel_hold_for_fair_jobs(app, work):
    jobs = work.enqueue_many([("A", n) for n in range(4)] + [("B", n) for n in range(4)])
    app.pause("default")
    assert claim(app) == [], "a paused queue's fair jobs wait"
    app.resume("default")
    app.limit("default", concurrency=2)
    first = claim(app)
    assert len(first) == 2 and claim(app, worker="w2") == [], "the queue's limit holds"
    app.limit("default")
    (cancelled,) = [job for job in jobs[4:] if job.id not in {each.id for each in first}][-1:]
    app.cancel(cancelled.id)
    waiting = {key.fairness_key: key.waiting for key in app.fairness_of("default").waiting_keys}
    assert waiting == {"tenant-A": 3, "tenant-B": 2}, "a cancelled job leaves its key's count"
    rest = claim(app)
    assert len(rest) == 5 and cancelled.id not in [job.id for job in rest]
    assert app.fairness_of("default").waiting_keys == (), "a key with nothing waiting has no row"
    # A retried job waits again, under its key.
    assert app.backend.finish([AttemptEnd(rest[0].lease, Outcome.ERROR, error_type="E", error_message="x",
                                          traceback="", retry_in_seconds=0)]) == [True]
    assert [key.fairness_key for key in app.fairness_of("default").waiting_keys] == [app.get_job(rest[0].id).fairness_key]


@fair
def test_a_worker_runs_fair_jobs_to_the_end(app, work):
    jobs = work.enqueue_many([("A", n) for n in range(30)] + [("B", n) for n in range(3)])
    with running_worker(app, concurrency=2):
        wait_for(lambda: app.counts()["default"]["done"] == 33, message="all done")
    assert {app.get_job(job.id).status for job in jobs} == {JobStatus.DONE}
    assert app.fairness_of("default").waiting_keys == ()


def test_bad_fairness_input_is_refused_naming_the_field_before_anything_is_written(app, capabilities):
    @app.task(name="plain")
    def plain(n=0): ...

    if not capabilities.fair_claims:
        with pytest.raises(ConfigurationError, match="fairness_key is not supported on this database"):
            plain.using(fairness_key="tenant-1")
        return
    for bad, field in [(42, "fairness_key"), ("", "fairness_key"), ("x" * 256, "fairness_key")]:
        with pytest.raises(ConfigurationError, match=f"invalid {field}"):
            plain.using(fairness_key=bad)
    for weights, default, field in [({"a": 0}, 1, "weight of 'a'"), ({"a": -1}, 1, "weight of 'a'"),
                                    ({"a": 1}, 0, "default weight"), ({1: 2}, 1, "fairness_key"),
                                    ({"a": "3"}, 1, "weight of 'a'"), ([("a", 1)], 1, "weights")]:
        with pytest.raises(ConfigurationError, match=f"invalid {field}"):
            app.fairness("default", weights=weights, default=default)
    assert app.fairness_of("default").weights == {}, "nothing written"
    with pytest.raises(ConfigurationError, match="names {tenant}, which is not one of its arguments"):
        app.task(name="typo", fairness_key="{tenant}")(lambda customer: None)
    with pytest.raises(ConfigurationError, match="has a limit per key"):
        app.task(name="both", concurrency=1, fairness_key="{customer}")(lambda customer: None)
    with pytest.raises(ConfigurationError, match="invalid fairness_key 7 from the fairness_key of task"):
        app.task(name="computed", fairness_key=lambda n: 7)(lambda n: None).enqueue(1)


@fair
def test_why_says_a_fair_job_waits_for_its_keys_turn(app, work):
    app.fairness("default", weights={"tenant-A": 3})
    work.enqueue_many([("A", n) for n in range(10)])
    waiting = work.enqueue_many([("B", n) for n in range(10)])[-1]
    claim(app, limit=4)  # three of A, one of B running
    reasons = {reason.code: reason for reason in app.why(waiting.id).reasons}
    assert "jobs_ahead" not in reasons, "plain claim order does not apply to a fair job"
    fair_turn = reasons["fair_turn"]
    assert fair_turn.data["weight"] == 1 and fair_turn.data["total_weight"] == 4 and fair_turn.data["share"] == 0.25
    assert (fair_turn.data["running_with_key"], fair_turn.data["running_in_queue"]) == (1, 4)
    assert fair_turn.message.startswith("It waits for its fairness key's turn: tenant-B has weight 1 of 4 among 2 keys "
                                        "waiting in queue default (25% of its starts while they all wait); 1 of queue "
                                        "default's 4 running jobs are its key's;"), fair_turn.message


@fair
def test_batches_share_as_claims_of_one_would_with_more_keys_than_a_batch(app, work):
    # Stride scheduling one job at a time, in exact arithmetic: the key of least pass goes next and
    # moves on by 1/weight. Claims of 4 from 6 keys must start as many of each key's jobs, give or
    # take one (the order of keys level with each other), after every claim.
    weights = {"tenant-0": 3, "tenant-1": 2, "tenant-2": 1.5}
    app.fairness("default", weights=weights)
    work.enqueue_many([(str(key), n) for n in range(12) for key in range(6)])
    passes = {f"tenant-{key}": Fraction(0) for key in range(6)}
    expected, started = Counter(), Counter()
    for _ in range(15):  # 60 of the 72 jobs: tenant-0's run out first
        for _ in range(4):
            key = min((key for key in passes if expected[key] < 12), key=lambda key: (passes[key], key))
            expected[key] += 1
            passes[key] += 1 / Fraction(weights.get(key, 1))
        started.update(tenants(app, claim(app, limit=4)))
        assert all(abs(started[key] - expected[key]) <= 1 for key in passes), (started, expected)
    assert started["tenant-0"] == 12, "weight 3: its jobs all started, while each weight-1 key waits"

