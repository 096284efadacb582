"""The completer: writes the attempts' ends behind the handlers, every end that arrived
meanwhile in one transaction (SQLite has one writer: one commit for many ends keeps up with
short jobs). Each end is fenced on its lease; the caller learns whether it held.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Iterable

from leased.backends.base import AttemptEnd, Backend
from leased.engine.retrying import Outage, is_transient, one_line
from leased.jobs import Lease

log = logging.getLogger("leased.worker")

LONGEST_RETRY = 2.0  # ends wait behind the completer, and their leases may run out meanwhile


class Completer:
    def __init__(self, backend: Backend, overdue: Callable[[float], Iterable[Lease]], worker_id: str):
        self._backend = backend
        self._overdue = overdue  # leases that may run out before the next renewal lands
        self._worker_id = worker_id
        self._ends: list[tuple[AttemptEnd, asyncio.Future]] = []
        self._ready = asyncio.Event()

    async def finish(self, end: AttemptEnd) -> bool:
        """Hand the attempt's end to the completer; True once written, False if the lease was lost."""
        written = asyncio.get_running_loop().create_future()
        self._ends.append((end, written))
        self._ready.set()
        return await written

    async def run(self) -> None:
        outage = Outage(LONGEST_RETRY)
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._ends = self._ends, []
            if not batch:
                continue
            try:
                kept = await asyncio.to_thread(self._backend.finish, [end for end, _ in batch])
            except Exception as error:
                # Through a brief outage, keep trying while the leases hold; past that the jobs
                # will be reclaimed and run again, which at-least-once allows.
                overdue = set(self._overdue(time.monotonic()))
                retry = [(end, written) for end, written in batch
                         if is_transient(error) and end.lease not in overdue]
                for end, written in batch:
                    if (end, written) not in retry:
                        written.set_exception(error)
                if retry:
                    log.warning("worker %s: could not record %d result(s) (%s); retrying", self._worker_id,
                                len(retry), one_line(error))
                    self._ends[:0] = retry
                    await asyncio.sleep(outage.failed())
                    self._ready.set()
                continue
            outage.ended()
            for (_, written), flag in zip(batch, kept):
                written.set_result(flag)
