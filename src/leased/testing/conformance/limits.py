"""Limits: a queue's and a key's concurrency and rate, held by the claim across workers."""

from __future__ import annotations

from leased.limits import QueueLimit, Rate
from leased.testing.conformance.helpers import claim, done, enqueue, ids, new_job
from leased.testing.conformance.suite import MakeBackend, check


@check
def a_queue_rate_limit_spaces_its_starts(make: MakeBackend) -> None:
    backend = make()
    written = enqueue(backend, *[new_job(queue_name="r") for _ in range(4)])
    backend.set_queue_limit(QueueLimit("r", rate_limit=Rate(2, 60)))
    assert backend.queue_limits() == [QueueLimit("r", rate_limit=Rate(2, 60))]
    first = claim(backend, "w1")
    assert ids(first) == ids(written[:2]), "two starts per minute"
    backend.finish([done(each.lease) for each in first])
    assert claim(backend, "w2") == [], "finished or not, the window's starts are spent"
    facts = backend.why_facts(written[2].id)
    assert facts is not None
    (limit,) = [each for each in facts.limits if each.scope == "queue"]
    assert limit.rate_full and limit.starts == 2 and limit.next_slot_at is not None
    backend.clock.advance(61)
    assert ids(claim(backend, "w2")) == ids(written[2:])


@check
def a_concurrency_key_caps_its_running_jobs_across_queues(make: MakeBackend) -> None:
    backend = make()
    keyed = new_job()._replace(concurrency_key="customer-7", key_concurrency=1)
    one, two = enqueue(backend, keyed, keyed._replace(queue_name="mail"))
    (free,) = enqueue(backend, new_job())
    first = claim(backend, "w1")
    assert ids(first) == [one.id, free.id], "one of the key at a time; other jobs pass it"
    assert claim(backend, "w2") == [], "the key's other job waits, though in another queue"
    facts = backend.why_facts(two.id)
    assert facts is not None
    (limit,) = [each for each in facts.limits if each.scope == "key"]
    assert (limit.name, limit.concurrency, limit.running) == ("customer-7", 1, 1) and limit.concurrency_full
    assert [job_id for job_id, _ in limit.running_jobs] == [one.id]
    backend.finish([done(first[0].lease)])
    assert ids(claim(backend, "w2")) == [two.id]
