"""Which calls are a worker's own: its claims, renewals, ends, beats, schedules and pruning, made on
its loop and its threads, as against a handler's own calls (an enqueue from a handler, say) and
the rest of the process (a web app a worker runs beside).

A backend may serve a worker's own calls on connections of their own, sized for the workers in
the process: PostgreSQL does, so that a worker process holds the same few connections at any
concurrency, whatever its handlers do (docs/reliability.md, "Many hosts").
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

_WORKER_CALLS: ContextVar[bool] = ContextVar("leased_worker_calls", default=False)


def are_worker_calls() -> bool:
    return _WORKER_CALLS.get()


def mark_worker_thread() -> None:
    """At the start of a thread of the worker's own: its calls are the worker's (a new thread
    starts with an empty context, so it inherits nothing)."""
    _WORKER_CALLS.set(True)


@contextmanager
def worker_calls(mine: bool = True) -> Iterator[None]:
    """The calls in this block (and in the tasks and to_thread calls started from it) are the
    worker's own; with mine=False, a handler's own, on a thread or task of the worker."""
    token = _WORKER_CALLS.set(mine)
    try:
        yield
    finally:
        _WORKER_CALLS.reset(token)
