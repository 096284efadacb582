"""What happens inside a worker, for whoever listens: the Prometheus exporter, logs, tests.

Subscribers get every event, of each type above, on the worker's event loop; they must be quick,
and one that raises is logged and never disturbs the worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from leased.jobs import Outcome

log = logging.getLogger("leased.events")


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    job_id: int
    task_name: str
    queue_name: str
    attempt: int
    outcome: Outcome
    seconds: float
    worker_id: str
    will_retry: bool = False


@dataclass(frozen=True, slots=True)
class ListenerLost:
    """The worker's wake-up listener failed: it polls until the listener reconnects."""

    worker_id: str
    error: str


@dataclass(frozen=True, slots=True)
class ListenerReconnected:
    worker_id: str


@dataclass(frozen=True, slots=True)
class HandlerStuck:
    """A sync handler's thread still runs past its job's time limit, holding a slot until it returns;
    then the event comes again with returned=True (its result discarded, its slot free)."""

    job_id: int
    task_name: str
    queue_name: str
    attempt: int
    worker_id: str
    seconds_past_limit: float
    returned: bool = False


@dataclass(frozen=True, slots=True)
class ChildProcessStarted:
    """A child process for process-isolated handlers (isolation="process") started."""

    worker_id: str
    pid: int


@dataclass(frozen=True, slots=True)
class ChildProcessEnded:
    """Such a child is gone: "recycled" (max_tasks_per_child or max_memory_per_child), "stopped"
    (its attempt was cancelled: time limit, lost lease, a user, shutdown), "crashed" (it died
    mid-job) or "closed" (with its worker)."""

    worker_id: str
    pid: int
    reason: str
    jobs_run: int
    rss_bytes: int  # as it last said, after its last job (0 before one)
    how: str | None = None  # a crashed one's signal ("SIGSEGV") or exit ("exit 3")


Event = AttemptEnded | ListenerLost | ListenerReconnected | HandlerStuck | ChildProcessStarted | ChildProcessEnded
Subscriber = Callable[[Event], None]


class Events:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber` with every event from now on; returns a function that unsubscribes."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def emit(self, event: Event) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("event subscriber %r failed", subscriber)
