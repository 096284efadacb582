"""Jobs of two workers, for the tests of listing jobs by worker (test_inspection, test_web)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from conftest import running_worker, wait_for

from leased import Leased
from leased.engine.worker import Worker


@dataclass
class TwoWorkers:
    first: Worker  # ran `ran` to the end, and stopped
    second: Worker  # holds `held`, running
    ran: list[int]
    held: int


@contextmanager
def one_ran_jobs_another_holds_one(app: Leased, count: int = 2) -> Iterator[TwoWorkers]:
    """A first worker runs `count` quick jobs and stops; a second holds a job whose handler waits
    until the block ends."""
    started, release = threading.Event(), threading.Event()
    quick = app.task(name="quick")(lambda n: None)

    @app.task(name="block")
    def block() -> None:
        started.set()
        release.wait(30)

    ran = [quick.enqueue(n).id for n in range(count)]
    with running_worker(app) as first:
        wait_for(lambda: all(app.get_job(job_id).status == "done" for job_id in ran), message="the quick jobs")
    held = block.enqueue().id
    with running_worker(app) as second:
        assert started.wait(10)
        try:
            yield TwoWorkers(first, second, ran, held)
        finally:
            release.set()
