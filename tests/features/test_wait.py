"""app.wait and app.wait_async: the job once it has ended, woken in-process, polled from elsewhere."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conftest import running_worker, wait_for
from leased import ConfigurationError, JobNotFound, JobStatus, Leased, WaitTimeout
from leased.waiting import JobWait


@pytest.fixture
def gate(app):
    """A task that runs until the test opens its gate, so the test decides when the job ends."""
    opened = threading.Event()

    @app.task(name="gated", max_attempts=1)
    def gated(fail: bool = False) -> str:
        opened.wait(60)
        if fail:
            raise ValueError("asked to fail")
        return "through"

    return gated, opened


def test_wait_returns_the_job_once_a_worker_here_ends_it(app, gate):
    gated, opened = gate
    done, failed = gated.enqueue(), gated.enqueue(fail=True)
    with running_worker(app, poll_interval=0.05):
        wait_for(lambda: app.get_job(done.id).status is JobStatus.RUNNING, message="the job to start")
        opened.set()
        assert app.wait(done.id, timeout=30).result == "through"
        ended = app.wait(failed.id, timeout=30)
    assert ended.status is JobStatus.FAILED and "asked to fail" in ended.last_error


def test_wait_returns_a_job_that_ended_before_it_was_asked(app, gate):
    gated, opened = gate
    opened.set()
    job = gated.enqueue()
    app.run_until_empty()
    assert app.wait(job.id, timeout=0).status is JobStatus.DONE


def test_wait_sees_a_cancel_and_a_job_ended_by_another_process(app, gate, database_url):
    gated, _ = gate
    job = gated.enqueue()
    cancel = threading.Timer(0.05, app.cancel, (job.id,))  # here: woken by app.cancel
    cancel.start()
    assert app.wait(job.id, timeout=30).status is JobStatus.CANCELLED
    cancel.join()  # app.cancel reads the job back after its commit, which the wait may beat
    elsewhere = Leased(database_url)  # another process's view: only the backoff's re-reads see it
    try:
        other = gated.enqueue()
        cancel = threading.Timer(0.05, elsewhere.cancel, (other.id,))
        cancel.start()
        assert app.wait(other.id, timeout=30).status is JobStatus.CANCELLED
        cancel.join()  # before the schema goes
    finally:
        elsewhere.close()


def test_wait_times_out_with_the_job_as_last_seen(app, gate):
    gated, _ = gate
    job = gated.enqueue()
    with pytest.raises(WaitTimeout,
                       match=rf"job {job.id} \(gated\) had not ended after 0.05 s: it is pending") as raised:
        app.wait(job.id, timeout=0.05)
    assert isinstance(raised.value, TimeoutError) and raised.value.job.id == job.id
    with pytest.raises(JobNotFound):
        app.wait(10**9, timeout=1)
    with pytest.raises(ConfigurationError, match="invalid timeout -1"):
        app.wait(job.id, timeout=-1)


def test_wait_async_returns_the_job_and_stops_waiting_when_cancelled(app, gate):
    gated, opened = gate
    job = gated.enqueue()

    async def scenario() -> None:
        waiting = asyncio.ensure_future(app.wait_async(job.id))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        with pytest.raises(WaitTimeout):
            await app.wait_async(job.id, timeout=0.01)
        with running_worker(app, poll_interval=0.05):
            opened.set()
            assert (await app.wait_async(job.id, timeout=30)).result == "through"

    asyncio.run(scenario())
    assert app._job_ends._waiting == {}  # every waiter, the cancelled one too, has signed off


def test_an_abandoned_wait_ends_at_once(app, gate):
    gated, _ = gate
    job = gated.enqueue()
    waiting = JobWait(app.get_job, app._job_ends, job.id, None)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(waiting.run()))
    thread.start()
    wait_for(lambda: job.id in app._job_ends._waiting, message="the waiter to start")
    waiting.abandon()
    thread.join(timeout=30)
    assert not thread.is_alive() and result[0].status is JobStatus.PENDING
