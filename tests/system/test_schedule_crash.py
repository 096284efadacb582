"""Periodic jobs with real worker processes: three of them ticking one schedule, and one killed
between enqueueing a tick and running it."""

from __future__ import annotations

import signal
import statistics
from datetime import datetime, timedelta
from itertools import pairwise

import pytest

from conftest import wait_for
from leased import JobStatus

pytestmark = [pytest.mark.slow, pytest.mark.system]
# Ticks of the every-second schedule the three workers race for: enough for each to win some and
# to show none missed or doubled, few enough for the suite's budget (raise it for a longer soak).
TICKS = 8


@pytest.fixture
def spawn(worker_processes):
    return lambda worker_id, *arguments: worker_processes("schedule_app.py", worker_id, *arguments)


@pytest.fixture
def beat(app):
    """The producer's view of schedule_app's task; the workers run the real one."""

    @app.task(name="beat", takes_context=True)
    def beat(context, scheduled_at): ...

    app.counts()  # the schema in place before the processes race for it
    return beat


def ticks_of(app) -> list[tuple[datetime, object]]:
    jobs = app.list_jobs(task_name="beat", limit=10_000, order="oldest")
    return [(datetime.fromisoformat(job.kwargs["scheduled_at"]), job) for job in jobs]


def test_three_workers_ticking_one_schedule_write_exactly_one_job_per_tick(app, beat, spawn, tmp_path):
    workers = [spawn(f"worker-{n}") for n in range(3)]
    wait_for(lambda: sum(job.status is JobStatus.DONE for _, job in ticks_of(app)) >= TICKS, timeout=90,
             message=f"{TICKS} ticks done")
    for process in workers:
        process.terminate()
        assert process.wait(30) == 0
    ticks = ticks_of(app)
    times = [tick for tick, _ in ticks]
    assert len(times) == len(set(times)), "a tick enqueued twice"
    assert {b - a for a, b in pairwise(times)} == {timedelta(seconds=1)}, "a tick missed"
    runners = {job.result for _, job in ticks if job.result}
    lateness = [(job.created_at - tick).total_seconds() for tick, job in ticks]
    print(f"\n{len(ticks)} ticks, one job each; run by {sorted(runners)}; enqueued after the tick: "
          f"median {statistics.median(lateness) * 1000:.0f} ms, max {max(lateness) * 1000:.0f} ms")
    logs = "".join((tmp_path / f"worker-{n}.log").read_text() for n in range(3))
    assert "Traceback" not in logs and "locked" not in logs


def test_a_tick_enqueued_by_a_worker_killed_before_running_it_is_run_by_another(app, beat, spawn):
    ticker = spawn("ticker", "elsewhere")  # ticks the schedule, claims nothing from its queue
    first = wait_for(lambda: ticks_of(app), timeout=60, message="the first tick enqueued")[0]
    ticker.send_signal(signal.SIGKILL)
    ticker.wait()
    tick, job = first
    assert app.get_job(job.id).status is JobStatus.PENDING
    spawn("runner")
    wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, timeout=60, message="the tick's job run")
    done = app.get_job(job.id)
    assert done.result == "runner" and [attempt.worker_id for attempt in done.history] == ["runner"]
    wait_for(lambda: len(ticks_of(app)) >= 3, timeout=60, message="the runner ticking on")
    times = [tick for tick, _ in ticks_of(app)]
    assert len(times) == len(set(times)) and times[0] == tick
