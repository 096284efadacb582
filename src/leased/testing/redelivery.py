"""At-least-once, on purpose: the ways a queue delivers a job more than once, for run_jobs().

- "twice": the handler runs twice, one run after the other (a redelivery after a finished run);
- "concurrently": two runs overlap (a lease that expired mid-run, and another worker took the job);
- "lost_ack": the handler runs, its completion is dropped as if the worker died right after the
  side effect, the lease runs out (the clock moves past it) and the job is reclaimed and runs again
  as a new attempt, as in production: on its last attempt the job fails instead.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

from leased.backends.ports import AttemptEnd
from leased.jobs import Lease, Outcome

MODES = ("twice", "concurrently", "lost_ack")


def _twice(func: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    if is_async:
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            await func(*args, **kwargs)
            return await func(*args, **kwargs)
        return functools.wraps(func)(run_async)

    def run(*args: Any, **kwargs: Any) -> Any:
        func(*args, **kwargs)
        return func(*args, **kwargs)
    return functools.wraps(func)(run)


def _concurrently(func: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    if is_async:
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            # Both coroutines start before either finishes: they interleave at every await.
            return (await asyncio.gather(func(*args, **kwargs), func(*args, **kwargs)))[1]
        return functools.wraps(func)(run_async)

    def run(*args: Any, **kwargs: Any) -> Any:
        both_started = threading.Barrier(2)

        def one() -> Any:
            both_started.wait()  # neither run begins until both threads are there
            return func(*args, **kwargs)

        with ThreadPoolExecutor(2, thread_name_prefix="leased-redelivery") as pool:
            runs = [pool.submit(one), pool.submit(one)]
            return [run.result() for run in runs][1]
    return functools.wraps(func)(run)


def redelivering(tasks: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """Copies of the tasks whose handler runs as `mode` says ("twice" or "concurrently")."""
    wrap = _twice if mode == "twice" else _concurrently
    wrapped = {}
    for name, task in tasks.items():
        twin = copy.copy(task)
        twin.func = wrap(task.func, task.is_async)
        wrapped[name] = twin
    return wrapped


class DroppedAcks:
    """The real backend, except that the first end of each job is never written, and the worker
    that ran it gives back nothing: as a worker that died right after the handler returned."""

    def __init__(self, backend: Any):
        self._backend = backend
        self.dropped: dict[int, float] = {}  # job id -> its lease, in seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        kept = [end for end in ends if end.lease.job_id in self.dropped]
        for end in ends:
            if end.lease.job_id not in self.dropped:
                self.dropped[end.lease.job_id] = self._backend.get_job(end.lease.job_id).lease_seconds
        written = iter(self._backend.finish(kept))
        return [next(written) if end in kept else False for end in ends]

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False) -> None:
        alive = [lease for lease in leases if lease.job_id not in self.dropped]
        self._backend.release(alive, outcome, message, explains_expiry)
