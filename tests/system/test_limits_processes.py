"""Limits hold across real worker processes, and a SIGKILLed worker's job counts until its lease ends.

Several worker processes drain keyed, queue-limited, rate-limited and plain jobs together. Each
handler records when it ran (tests/programs/limits_app.py); the checker sweeps those intervals for the
largest overlap per key and per queue, and counts the starts the database recorded per window.
"""

from __future__ import annotations

import pytest

import limits_app  # the same tasks the workers run (tests/programs)
from conftest import raw_rows, wait_for
from leased import JobStatus, Outcome
from leased.backends.ports import ClaimRequest

pytestmark = [pytest.mark.slow, pytest.mark.system]

@pytest.fixture
def workers(worker_processes):
    return lambda worker_id: worker_processes("limits_app.py", worker_id)


@pytest.fixture
def producer(database_url):
    """The producer's app: limits_app's tasks, on this test's database."""
    app = limits_app.make_app(database_url)
    raw_rows(app, limits_app.RUNS_SQL)
    yield app
    app.close()


def largest_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda event: (event[0], event[1]))  # an end before a start at the same instant
    most = running = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def most_starts_in_a_window(starts: list[float], window: float) -> int:
    """The largest number of starts within (t - window, t] for any start t: what the claim counts."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, start in enumerate(starts):
        while starts[first] <= start - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_limits_hold_across_worker_processes(producer, workers, capabilities):
    app = producer
    app.limit("billing", concurrency=limits_app.BILLING)
    tasks = app.tasks
    tasks["keyed"].enqueue_many([(customer, n) for n in range(20) for customer in "abcd"])
    tasks["billing"].enqueue_many([(n,) for n in range(60)])
    tasks["rated"].enqueue_many([(host, n) for n in range(40) for host in ("x", "y")])
    tasks["plain"].enqueue_many([(n,) for n in range(100)])
    total = 80 + 60 + 80 + 100
    for number in range(3):
        workers(f"limits-{number}")
    wait_for(lambda: _done(app) == total, timeout=120, message="every job to finish")

    runs = raw_rows(app, "SELECT concurrency_key, queue_name, started, ended FROM limit_runs")
    assert len(runs) == total
    by_key: dict[str, list] = {}
    for key, _queue, started, ended in runs:
        if key is not None:
            by_key.setdefault(key, []).append((started, ended))
    for customer in "abcd":
        assert largest_overlap(by_key[f"customer:{customer}"]) <= limits_app.PER_KEY
    assert largest_overlap([(s, e) for _, queue, s, e in runs if queue == "billing"]) <= limits_app.BILLING
    everything = largest_overlap([(s, e) for _, _, s, e in runs])
    print(f"\nlargest overlap: per key {max(largest_overlap(v) for k, v in by_key.items() if 'customer' in k)}, "
          f"billing {largest_overlap([(s, e) for _, q, s, e in runs if q == 'billing'])}, all jobs {everything}")
    assert everything > limits_app.BILLING  # the limits held back only their own jobs

    epoch = "extract(epoch FROM a.started_at)::float8" if capabilities.typed_times_and_json else "a.started_at"
    count, window = limits_app.RATE
    for host in ("x", "y"):
        starts = [row[0] for row in raw_rows(
            app, f"SELECT {epoch} FROM leased_attempts AS a JOIN leased_jobs AS j ON j.id = a.job_id "
                 "WHERE j.concurrency_key = ?", (f"api:{host}",))]
        assert len(starts) == 40 and most_starts_in_a_window(starts, window) <= count
        print(f"most starts of api:{host} within {window} s: {most_starts_in_a_window(starts, window)}")


def _done(app) -> int:
    return sum(queue["done"] for queue in app.counts().values())


def test_a_sigkilled_workers_job_holds_its_key_until_the_lease_expires(producer, workers):
    app = producer
    hold = app.tasks["hold"]
    first = hold.enqueue("k", True)
    second = hold.enqueue("k", False)
    other = hold.enqueue("other", False)
    victim = workers("victim")
    wait_for(lambda: app.get_job(first.id).status is JobStatus.RUNNING and app.get_job(other.id).status is
             JobStatus.DONE, message="the victim to hold key k")
    victim.kill()
    victim.wait()
    # Dead, but its job is running as far as the database knows: key k has no room, however many try.
    request = ClaimRequest("prober", ("hold",), None, 10)
    assert app.backend.claim(request) == []
    assert app.get_job(second.id).status is JobStatus.PENDING
    workers("survivor")
    wait_for(lambda: app.get_job(second.id).status is JobStatus.DONE, message="the survivor to run key k")
    expired = app.get_job(first.id).history[0]
    assert expired.outcome is Outcome.EXPIRED
    # The second job of key k started only after the first one's lease had run out.
    started = app.get_job(second.id).history[0].started_at
    assert started >= expired.finished_at
