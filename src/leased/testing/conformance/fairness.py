"""Fairness by key: weights kept per queue, and (where the claim shares by key) starts shared by weight."""

from __future__ import annotations

from collections import Counter

from leased.fairness import QueueFairness
from leased.testing.conformance.helpers import claim, enqueue, ids, new_job
from leased.testing.conformance.suite import MakeBackend, check


@check
def fairness_weights_are_kept_per_queue_and_key(make: MakeBackend) -> None:
    backend = make()
    assert backend.queue_fairness("q", 10) == QueueFairness("q"), "no weights set: every key weighs 1"
    backend.set_fairness(QueueFairness("q", 2.0, {"big": 3.0}))
    backend.set_fairness(QueueFairness("q", 0.5, {"small": 1.5}))
    assert backend.queue_fairness("q", 10) == QueueFairness("q", 0.5, {"big": 3.0, "small": 1.5}), \
        "the default is replaced, and keys set before keep their weights"
    assert backend.queue_fairness("other", 10) == QueueFairness("other"), "weights are per queue"


@check
def a_late_key_is_served_beside_a_backlog_by_weight(make: MakeBackend) -> None:
    backend = make()
    if not backend.capabilities.fair_claims:
        return
    big = enqueue(backend, *[new_job()._replace(fairness_key="A") for _ in range(40)])
    small = enqueue(backend, *[new_job()._replace(fairness_key="B") for _ in range(3)])
    plain = enqueue(backend, new_job())
    first = claim(backend, "w1", limit=5)
    assert ids(first) == sorted([plain[0].id, big[0].id, big[1].id, small[0].id, small[1].id]), \
        "jobs without a key first, then the keys take turns, the late key at once"
    waiting = backend.queue_fairness("default", 10).waiting_keys
    assert [(key.fairness_key, key.waiting) for key in waiting] == [("A", 38), ("B", 1)]
    backend.set_fairness(QueueFairness("default", 1.0, {"A": 3.0}))
    more = enqueue(backend, *[new_job()._replace(fairness_key="B") for _ in range(20)])
    key_of = {job.id: job.fairness_key for job in big + small + more}
    taken = Counter(key_of[job.id] for job in claim(backend, "w1", limit=20))
    assert abs(taken["A"] - 15) <= 1 and abs(taken["B"] - 5) <= 1, f"3:1 by weight, got {taken}"
