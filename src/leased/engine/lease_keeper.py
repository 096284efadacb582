"""The lease keeper: the heartbeat renews every held lease on a thread of its own
(engine/heartbeat.py), and a watchdog on the loop stops a handler whose lease could run out
before a renewal lands, or that another worker or a user took from it. A renewal that landed late
is told to the attempt holding the lease, on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from leased.backends.ports import RuntimePort
from leased.engine.context import CancelReason
from leased.engine.heartbeat import Heartbeat, LateRenewal
from leased.engine.retrying import is_transient
from leased.engine.threads import call_soon_threadsafe
from leased.jobs import Lease

log = logging.getLogger("leased.worker")

WATCHDOG_INTERVAL = 0.25


class LeaseKeeper:
    def __init__(self, backend: RuntimePort, cancel: Callable[[Lease, CancelReason, str | None], None], *,
                 heartbeat_died: Callable[[], None], stopping: Callable[[], bool],
                 renewed_late: Callable[[Lease, LateRenewal], None] = lambda lease, late: None):
        self._backend = backend
        self._cancel = cancel  # on the loop: cancel the attempt holding the lease, for this reason
        self._renewed_late = renewed_late  # on the loop: the attempt holding the lease was renewed late
        self._heartbeat_died = heartbeat_died
        self._stopping = stopping
        self.heartbeat = Heartbeat(backend, self._on_lost, is_transient,
                                   renewed_late=lambda lease, late: call_soon_threadsafe(
                                       self._loop, self._renewed_late, lease, late))
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.heartbeat.start()

    def stop(self) -> None:
        self.heartbeat.stop()
        self._loop = None

    async def watch(self) -> None:
        """The watchdog: runs until cancelled, through the shutdown, while running jobs finish."""
        while True:
            await asyncio.sleep(min(WATCHDOG_INTERVAL, self.heartbeat.shortest_lease() / 12))
            if not self.heartbeat.is_alive and not self._stopping():
                self._heartbeat_died()
            for lease in self.heartbeat.overdue(time.monotonic()):
                self._cancel(lease, CancelReason.LEASE_LOST, self.heartbeat.lapse_cause())

    def _on_lost(self, lease: Lease) -> None:
        """Called on the heartbeat thread when a renewal did not match: find out why, then cancel."""
        try:
            job = self._backend.get_job(lease.job_id)
        except Exception:
            job = None
        reason = CancelReason.CANCELLED if job is not None and job.status == "cancelled" else CancelReason.LEASE_LOST
        call_soon_threadsafe(self._loop, self._cancel, lease, reason)
