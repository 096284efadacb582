"""A claimed attempt as the engine holds it (ClaimedAttempt), and what it needs of the task it runs
(Handler). The value every service of the engine passes on: the slots, the executor, the time
limits, the completer and the claimed attempts (engine/attempts.py), none of which it imports.
Not leased.jobs.Attempt, the record of an attempt that the database keeps and inspection shows."""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager
from typing import Any, Callable, Protocol

from leased.backoff import Backoff
from leased.engine.context import TaskContext
from leased.jobs import ClaimedJob


class Handler(Protocol):
    """What the engine needs of a task (leased.tasks.Task is one): a function and how to call it."""

    func: Callable[..., Any]
    takes_context: bool
    is_async: bool
    backoff: Backoff
    transactional: bool  # runs in a transaction that commits with its end (engine/transactional.py)
    transaction: Callable[[], AbstractContextManager[Any]] | None  # a framework's opener of it; None: the backend's
    isolation: str  # "thread", or "process": it runs in a child process (engine/children.py)
    database_url: str | None  # its app's database, which a child process's context reaches on its own

    def check_arguments(self, args: tuple | list, kwargs: dict[str, Any]) -> None: ...

    def handler_arguments(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]: ...


class ClaimedAttempt:
    """One claimed attempt, from its claim until its end is written or its lease given back."""

    __slots__ = ("job", "lease", "context", "handler", "isolation", "is_async", "task", "started", "limit_from",
                 "thread_id", "time_limit", "lapse_cause", "closed", "stopped_child", "span")

    def __init__(self, job: ClaimedJob, context: TaskContext, handler: Handler):
        self.job = job
        self.lease = job.lease
        self.context = context
        self.handler = handler
        # "thread" or "process": where the handler runs, as its enqueue chose or else its task. A
        # transactional handler writes in the worker's transaction, so it stays (using() refuses it).
        self.isolation = "thread" if handler.transactional else job.isolation or handler.isolation
        # Runs on the loop; an isolated async handler's attempt waits for its child on a handler thread.
        self.is_async = handler.is_async and self.isolation != "process"
        self.task: asyncio.Task | None = None  # an async handler's, once started
        self.started = 0.0  # monotonic, when its handler was called
        # Monotonic, when its time limit counts from: its start, or for a handler in a child process,
        # when the child began it (a process's start and imports are not the handler's time).
        self.limit_from = 0.0
        self.thread_id: int | None = None  # a sync handler's thread, while the handler runs
        self.time_limit: asyncio.TimerHandle | None = None
        self.lapse_cause: str | None = None  # why this worker let the lease lapse, when it knows (e.g. a write lock)
        self.closed = False  # its end is recorded (or given up): a thread returning late changes nothing
        self.stopped_child: str | None = None  # a process-isolated handler stopped: how its child was
        self.span: Any = None  # its OpenTelemetry span, when its enqueue was traced (leased.tracing)
