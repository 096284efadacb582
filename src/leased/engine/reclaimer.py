"""The reclaimer: once a second, returns the jobs whose lease expired to the pool, beside the
claims, for a backend that asks for it (RuntimePort.reclaims_beside_claims).

Elsewhere the claimer's claim does it once a second, in its own transaction, so that an idle
worker's poll is one transaction. PostgreSQL asks for it beside: its reclaim reads every job
claimed since the oldest transaction still open began (their dead entries in the running jobs'
index), and a claim that waited for it made every job enqueued meanwhile wait too. Here it runs on
the worker's main connection, which the completer and the heartbeat share, and no claim waits.

The workers of a database take turns (migration 0020 on PostgreSQL): a periodic reclaim that comes
less than TURN_SPACING seconds after another worker's reads nothing. A fleet of N workers reclaims
about once a second, not N times, and a lone worker every second as before: the spacing is a little
shorter than the interval, so that its own turns are never skipped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from leased.backends.ports import RuntimePort
from leased.engine.retrying import Outage, is_transient, one_line

log = logging.getLogger("leased.worker")

RECLAIM_INTERVAL = 1.0
TURN_SPACING = 0.8 * RECLAIM_INTERVAL


class Reclaimer:
    def __init__(self, backend: RuntimePort, worker_id: str, *, reclaimed: Callable[[], None],
                 stopping: Callable[[], bool]):
        self._backend = backend
        self._worker_id = worker_id
        self._reclaimed = reclaimed  # jobs went back to the pool: claim now, not at the next poll
        self._stopping = stopping
        self._lock = asyncio.Lock()  # one reclaim at a time: the loop's, or the claimer's when it is idle
        self._outage = Outage()  # paced by the interval, not by it: it tells an outage's first failure

    async def run(self) -> None:
        while not self._stopping():
            await self.reclaim(in_turn=True)
            await asyncio.sleep(RECLAIM_INTERVAL)

    async def reclaim(self, *, in_turn: bool = False) -> int:
        """Reclaim now, or `in_turn` unless another worker did moments ago; how many jobs went back
        to the pool (or failed). An outage reclaims nothing: the claimer says the database is
        unavailable, and the next pass tries again."""
        async with self._lock:
            try:
                reclaimed = await asyncio.to_thread(self._backend.reclaim_expired,
                                                    TURN_SPACING if in_turn else None)
            except Exception as error:
                if not is_transient(error):
                    raise
                self._outage.failed()
                if self._outage.failures == 1:
                    log.info("worker %s: could not reclaim expired leases (%s); trying again each second",
                             self._worker_id, one_line(error))
                return 0
            self._outage.ended()
            if reclaimed:
                self._reclaimed()
            return reclaimed
