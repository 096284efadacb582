"""A handler's exception that cannot be printed (its __str__, its __repr__ or both raise) is its
job's failure like any other: the attempt fails with a message that says so, the job is retried by
its max_attempts, and the worker goes on with the jobs claimed beside it (issue 41).

Were the worker's own text-building to raise, the worker would stop with "a service failed" and
give the attempt back uncounted, and every worker that claimed the job next would stop in turn.
"""

from __future__ import annotations

import asyncio

import pytest

from leased import Backoff, JobStatus, Outcome, TaskContext
from leased.engine.error_text import message_of

import isolated_handlers as handlers
from conftest import running_worker, wait_for
from isolated_handlers import Unprintable

AT_ONCE = Backoff(base=0, jitter=0)
REFUSES = {"str": ["__str__"], "repr": ["__repr__"], "both": ["__str__", "__repr__"]}
NOT_PRINTED = "<unprintable Unprintable: its __str__ raised RuntimeError('__str__ refuses')>"


def declare_poison(app, kind: str):
    """The task whose handler raises Unprintable(refuses), run the way `kind` says."""
    options = dict(name="poison", max_attempts=2, backoff=AT_ONCE)
    if kind == "process":  # a child imports its handler by name
        return app.task(isolation="process", **options)(handlers.raises_unprintable)
    if kind == "transactional":
        @app.task(transactional=True, takes_context=True, **options)
        def poison_in_transaction(context: TaskContext, refuses):
            raise Unprintable(refuses)
        return poison_in_transaction
    if kind == "async":
        @app.task(**options)
        async def poison_async(refuses):
            await asyncio.sleep(0)
            raise Unprintable(refuses)
        return poison_async

    @app.task(**options)
    def poison(refuses):
        raise Unprintable(refuses)
    return poison


@pytest.mark.parametrize("kind", ["sync", "async", "transactional", "process"])
@pytest.mark.parametrize("refuses", list(REFUSES))
def test_an_unprintable_exception_fails_its_attempt_and_the_worker_goes_on(app, kind, refuses):
    poison = declare_poison(app, kind)

    @app.task(name="healthy")
    def healthy():
        return "still working"

    with running_worker(app, concurrency=2) as worker:
        job, beside = poison.enqueue(REFUSES[refuses]), healthy.enqueue()
        wait_for(lambda: app.get_job(job.id).is_finished or worker.stopping, message="the poison job to end")
        assert not worker.stopping, "the worker stopped over a job's exception"
        wait_for(lambda: app.get_job(beside.id).is_finished, message="the healthy job to end")

    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and failed.attempt == 2, "an ordinary failure, retried once"
    assert [(a.outcome, a.error_type) for a in failed.history] == [(Outcome.ERROR, "Unprintable")] * 2
    expected = NOT_PRINTED if "__str__" in REFUSES[refuses] else "the handler failed"
    assert failed.history[-1].error_message == expected
    assert "raise Unprintable(refuses)" in failed.history[-1].traceback
    done = app.get_job(beside.id)
    assert done.status is JobStatus.DONE and done.result == "still working"


class _Refusal(RuntimeError):
    def __repr__(self):
        raise RuntimeError("the refusal refuses too")


class _RefusesWithAnUnprintableError(Exception):
    def __str__(self):
        raise _Refusal()


def test_the_message_names_the_exception_even_when_its_refusal_cannot_be_printed():
    assert message_of(_RefusesWithAnUnprintableError()) == \
        "<unprintable _RefusesWithAnUnprintableError: its __str__ raised _Refusal>"
