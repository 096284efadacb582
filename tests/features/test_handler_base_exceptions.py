"""A handler that raises KeyboardInterrupt, SystemExit or another BaseException fails its attempt,
like any exception: the worker goes on, and the job ends by its max_attempts.

The operator's Ctrl-C does not arrive this way: it is a signal, which the worker handles with a flag
(a graceful stop). What a handler raises is the task's own doing, and a poison job must end.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from conftest import running_worker, wait_for
from leased import Backoff, JobStatus, Outcome

AT_ONCE = Backoff(base=0, jitter=0)


class Abort(BaseException):
    """A BaseException of the user's own, neither an Exception nor one of Python's."""


RAISED = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit, "Abort": Abort}


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("raised", list(RAISED))
def test_a_base_exception_fails_the_attempt_and_the_job_ends_by_max_attempts(app, kind, raised):
    error = RAISED[raised]

    if kind == "sync":
        @app.task(name="poison", max_attempts=2, backoff=AT_ONCE)
        def poison():
            raise error("raised by the handler")
    else:
        @app.task(name="poison", max_attempts=2, backoff=AT_ONCE)
        async def poison():
            await asyncio.sleep(0)
            raise error("raised by the handler")

    @app.task(name="healthy")
    def healthy():
        return "still working"

    job, after = poison.enqueue(), healthy.enqueue()
    stats = app.run_until_empty(concurrency=1)  # raises if the worker died of it

    assert (stats.failed, stats.retried, stats.done) == (1, 1, 1)
    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and failed.attempt == 2
    assert [(a.outcome, a.error_type) for a in failed.history] == [(Outcome.ERROR, raised)] * 2
    assert failed.history[-1].error_message == "raised by the handler"
    assert 'raise error("raised by the handler")' in failed.history[-1].traceback
    assert app.get_job(after.id).result == "still working"


@pytest.mark.parametrize("raised", list(RAISED))
def test_a_running_worker_survives_a_handler_that_raises_a_base_exception(app, raised):
    error, ran = RAISED[raised], threading.Event()

    @app.task(name="poison", max_attempts=1)
    def poison():
        raise error("raised by the handler")

    @app.task(name="after")
    def after():
        ran.set()

    with running_worker(app, concurrency=2) as worker:
        job = poison.enqueue()
        wait_for(lambda: app.get_job(job.id).is_finished, message="the poison job to end")
        after.enqueue()
        assert ran.wait(30), "the worker stopped after the poison job"
        assert not worker.stopping
    assert app.get_job(job.id).status is JobStatus.FAILED
