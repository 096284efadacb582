"""Helpers for your own test suite: run jobs in this process (also redelivered, to test that
handlers are idempotent), assert what was enqueued, move the clock. The pytest plugin
(leased.testing.plugin, registered through the pytest11 entry point) offers them as fixtures,
with a throwaway `leased_app`.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator

from leased.app import Leased
from leased.backends import connect
from leased.engine.children import Children
from leased.engine.scheduler import Scheduler
from leased.engine.worker import Worker, WorkerStats
from leased.errors import ConfigurationError
from leased.jobs import Job
from leased.tasks import Task
from leased.testing.redelivery import MODES, DroppedAcks, redelivering

__all__ = ["RunSummary", "advance", "arun_jobs", "assert_enqueued", "assert_not_enqueued", "enqueued", "run_jobs",
           "use_database"]


@dataclass(frozen=True)
class RunSummary:
    """What run_jobs did: attempts that ended done, failed for good, and failed to be retried later."""

    done: int = 0
    failed: int = 0
    retried: int = 0

    def __add__(self, other: WorkerStats) -> RunSummary:
        return RunSummary(self.done + other.done, self.failed + other.failed, self.retried + other.retried)


def run_jobs(app: Leased, *, redeliver: str | None = None, queues: list[str] | None = None,
             concurrency: int = 1) -> RunSummary:
    """Run every job that is due now, and any they enqueue, in this process with the real worker; return
    what happened. Jobs retried with a backoff are not due yet: advance() the clock and run again.

    `redeliver`: "twice", "concurrently" or "lost_ack" deliver each job more than once, as
    at-least-once allows (see leased.testing.redelivery), so a test can assert that a handler is
    idempotent. "lost_ack" moves the app's clock past the dropped attempts' leases."""
    return asyncio.run(arun_jobs(app, redeliver=redeliver, queues=queues, concurrency=concurrency))


async def arun_jobs(app: Leased, *, redeliver: str | None = None, queues: list[str] | None = None,
                    concurrency: int = 1) -> RunSummary:
    """run_jobs() for tests that run in an event loop."""
    if redeliver is not None and redeliver not in MODES:
        raise ConfigurationError(f"invalid redeliver {redeliver!r}: use one of {', '.join(map(repr, MODES))}, or None")
    if not app.tasks:
        raise ConfigurationError("no tasks registered on this app: nothing could run its jobs")
    tasks = redelivering(app.tasks, redeliver) if redeliver in ("twice", "concurrently") else app.tasks
    backend = DroppedAcks(app.backend) if redeliver == "lost_ack" else app.backend
    summary = RunSummary() + await _drain(app, backend, tasks, queues, concurrency)
    if isinstance(backend, DroppedAcks) and backend.dropped:
        # The worker "died": its leases run out (the clock moves past them) and the jobs are reclaimed.
        advance(app, max(backend.dropped.values()) + 1)
        summary += await _drain(app, app.backend, tasks, queues, concurrency)
    return summary


async def _drain(app: Leased, backend: Any, tasks: dict[str, Task], queues: list[str] | None,
                 concurrency: int) -> WorkerStats:
    if app.schedules:  # periodic tasks: enqueue the ticks due by the (possibly advanced) clock first
        await asyncio.to_thread(Scheduler(app.backend, list(app.schedules.values()), wake_claimer=lambda: None,
                                          poll_interval=1.0, worker_id="leased.testing").run_once)
    worker = Worker(backend, tasks, concurrency=concurrency, queues=queues, events=app.events, push=False,
                    max_payload_bytes=app.max_payload_bytes, poll_interval=0.05,
                    children=Children(open_backend=connect))
    return await worker.run_async(stop_when_idle=True)


def advance(app: Leased, by: timedelta | float) -> None:
    """Move "now" forward for this app's queries in this process: run_after, backoffs, leases (a
    running job's lease expires), schedules' ticks and rate windows. See leased.clock for what it
    does not move."""
    seconds = by.total_seconds() if isinstance(by, timedelta) else float(by)
    app.backend.clock.advance(seconds)
    app._wake_own_workers()  # its own workers look again now: the clock moved for this process alone


def enqueued(task: Task) -> list[Job]:
    """The task's jobs waiting to run (pending), oldest first."""
    app = task.app  # a Producer to the task: these helpers read jobs through a whole Leased
    if not isinstance(app, Leased):
        raise ConfigurationError(f"enqueued() reads the jobs of a task of a leased.Leased app; task {task.name!r} "
                                 f"belongs to {type(app).__name__}")
    return list(reversed(app.list_jobs(task_name=task.name, status="pending", limit=10_000)))


def _call(task: Task, args: tuple | list, kwargs: dict[str, Any]) -> dict[str, Any] | tuple:
    """A call as stored (typed arguments as JSON), by parameter name where the signature allows."""
    new = task.defaults.new_job(tuple(args), dict(kwargs))
    args, kwargs = json.loads(new.args_json), json.loads(new.kwargs_json)
    try:
        bound = task.signature.bind(*((None,) if task.takes_context else ()), *args, **kwargs)
    except TypeError:
        return (args, kwargs)
    bound.apply_defaults()
    return dict(list(bound.arguments.items())[1 if task.takes_context else 0:])


def _matching(task: Task, args: tuple, kwargs: dict[str, Any]) -> tuple[list[Job], list[Job]]:
    jobs = enqueued(task)
    if not args and not kwargs:
        return jobs, jobs
    wanted = _call(task, args, kwargs)
    return [job for job in jobs if _call(task, job.args, job.kwargs) == wanted], jobs


def _shown(jobs: list[Job]) -> str:
    return "; ".join(f"job {job.id}: args {job.args}, kwargs {job.kwargs}" for job in jobs[:10]) or "none"


def assert_enqueued(task: Task, *args: Any, **kwargs: Any) -> Job:
    """A pending job of `task` with these arguments exists (any arguments, if none are given); returns it."""
    found, jobs = _matching(task, args, kwargs)
    if not found:
        raise AssertionError(f"no pending {task.name} job with args {list(args)} kwargs {kwargs}; "
                             f"pending {task.name} jobs: {_shown(jobs)}")
    return found[0]


def assert_not_enqueued(task: Task, *args: Any, **kwargs: Any) -> None:
    """No pending job of `task` with these arguments (with none given: no pending job of it at all)."""
    found, _ = _matching(task, args, kwargs)
    if found:
        raise AssertionError(f"expected no pending {task.name} job with args {list(args)} kwargs {kwargs}; "
                             f"found {_shown(found)}")


@contextmanager
def use_database(app: Leased, database_url: str) -> Iterator[Leased]:
    """Point an app of yours (its tasks registered at import) at another database for a while,
    e.g. the `leased_database_url` fixture's throwaway one."""
    previous = app.database_url
    app.close()
    app.database_url = database_url
    try:
        yield app
    finally:
        app.close()
        app.database_url = previous
