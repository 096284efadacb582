"""The sleepers' waker: once a second, sleeping jobs whose wait has ended (a sleep's end, a signal's
timeout) are made pending (RuntimePort.wake_sleepers), and the claimer looks for them at once.

It reads the waits whose end has come through their index on it, not the sleepers: a hundred
thousand jobs asleep cost a pass nothing. Every worker runs one; two that meet on the same waits
wake each job once (a woken job is no longer sleeping, and PostgreSQL's and MariaDB's skip the waits
the other holds). A signal wakes its job in the sender's own transaction, not here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from leased.backends.ports import RuntimePort
from leased.engine.retrying import Outage, is_transient, one_line

log = logging.getLogger("leased.worker")

WAKE_INTERVAL = 1.0


class SleepersWaker:
    def __init__(self, backend: RuntimePort, worker_id: str, *, woke: Callable[[], None],
                 stopping: Callable[[], bool]):
        self._backend = backend
        self._worker_id = worker_id
        self._woke = woke  # jobs became pending: claim now, not at the next poll
        self._stopping = stopping
        self._outage = Outage()

    async def run(self) -> None:
        while not self._stopping():
            await self.wake()
            await asyncio.sleep(WAKE_INTERVAL)

    async def wake(self) -> int:
        """One pass: how many sleeping jobs it made pending. An outage wakes none: the claimer says
        the database is unavailable, and the next pass tries again."""
        try:
            woken = await asyncio.to_thread(self._backend.wake_sleepers)
        except Exception as error:
            if not is_transient(error):
                raise
            self._outage.failed()
            if self._outage.failures == 1:
                log.info("worker %s: could not wake sleeping jobs (%s); trying again each second",
                         self._worker_id, one_line(error))
            return 0
        self._outage.ended()
        if woken:
            self._woke()
        return woken
