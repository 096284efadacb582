"""What a running handler can see of its job, and how it learns that it should stop."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum

from leased.jobs import Job


class CancelReason(StrEnum):
    LEASE_LOST = "lease lost"
    CANCELLED = "cancelled by a user"
    SHUTDOWN = "worker shutting down"


class JobCancelled(Exception):
    """Raised by TaskContext.raise_if_cancelled(); the worker records the attempt by its reason."""


@dataclass
class TaskContext:
    """Passed first to handlers of tasks declared with takes_context=True.

    Async handlers are also cancelled (asyncio.CancelledError) when the job must stop. A sync
    handler runs in a thread that cannot be interrupted, so it should check `is_cancelled` (or call
    `raise_if_cancelled()`) between steps; whatever it returns after a cancellation is discarded.
    """

    job: Job
    worker_id: str
    cancelled: threading.Event = field(default_factory=threading.Event)
    cancel_reason: CancelReason | None = None

    @property
    def job_id(self) -> int:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelled(str(self.cancel_reason))

    def cancel(self, reason: CancelReason) -> bool:
        """Mark the job cancelled; the first reason wins. Returns False if it already was."""
        if self.cancelled.is_set():
            return False
        self.cancel_reason = reason
        self.cancelled.set()
        return True
