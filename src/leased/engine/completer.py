"""The completer: writes the attempts' ends behind the handlers, every end that arrived
meanwhile in one transaction (SQLite has one writer: one commit for many ends keeps up with
short jobs). Each end is fenced on its lease; the worker learns, a batch at a time, which held.

Ends arrive from handler threads and from the loop alike; the loop is woken once per batch of
them, not once per job. A transactional handler's end arrives written already (Written, in the
handler's own transaction: engine/transactional.py), and is only reported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable, Union

from leased.backends.ports import AttemptEnd, RuntimePort
from leased.engine.retrying import Outage, is_transient, one_line
from leased.engine.threads import LoopInbox
from leased.engine.transactional import Written
from leased.jobs import Lease

if TYPE_CHECKING:
    from leased.engine.claimed import ClaimedAttempt

log = logging.getLogger("leased.worker")

# Per attempt: True, its end is written; False, its lease was lost and nothing was written; None,
# it had no end to write (cancelled); an exception, the write failed for good.
Recorded = Union[bool, None, BaseException]


class Completer:
    def __init__(self, backend: RuntimePort, overdue: Callable[[float], Iterable[Lease]], worker_id: str,
                 recorded: Callable[[list[tuple[ClaimedAttempt, AttemptEnd | None]], list[Recorded]], None]):
        self._backend = backend
        self._overdue = overdue  # leases that may run out before the next renewal lands
        self._worker_id = worker_id
        self._recorded = recorded  # on the loop, once per batch
        self._inbox: LoopInbox[tuple[ClaimedAttempt, AttemptEnd | Written | None]] = LoopInbox(self._arrived)
        self._ends: list[tuple[ClaimedAttempt, AttemptEnd | Written | None]] = []
        self._ready = asyncio.Event()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._inbox.start(loop)

    def finish(self, attempt: ClaimedAttempt, end: AttemptEnd | Written | None) -> None:
        """From any thread: the attempt's handler is over; write its end, if it has one (with the
        attempt's latest progress report)."""
        if isinstance(end, AttemptEnd):
            end = attempt.context.with_reports(end)
        self._inbox.put((attempt, end))

    def _arrived(self, ends: list[tuple[ClaimedAttempt, AttemptEnd | Written | None]]) -> None:
        written = [(attempt, end) for attempt, end in ends if isinstance(end, Written)]
        if written:  # on the loop, as every report is
            self._recorded([(attempt, end.end) for attempt, end in written], [end.kept for _, end in written])
            ends = [(attempt, end) for attempt, end in ends if not isinstance(end, Written)]
        if ends:
            self._ends += ends
            self._ready.set()

    async def run(self) -> None:
        outage = Outage()  # ends wait behind it, and their leases may run out meanwhile
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self._ends = self._ends, []
            to_write = [end for _, end in batch if end is not None]
            if not to_write:
                self._recorded(batch, [None] * len(batch))
                continue
            try:
                kept = iter(await asyncio.to_thread(self._backend.finish, to_write))
            except Exception as error:
                # Through a brief outage, keep trying while the leases hold; past that the jobs
                # will be reclaimed and run again, which at-least-once allows.
                overdue = set(self._overdue(time.monotonic())) if is_transient(error) else None
                retry, given_up = [], []
                for attempt, end in batch:
                    kept_trying = end is not None and overdue is not None and end.lease not in overdue
                    (retry if kept_trying else given_up).append((attempt, end))
                self._recorded(given_up, [None if end is None else error for _, end in given_up])
                if retry:
                    log.warning("worker %s: could not record %d result(s) (%s); retrying", self._worker_id,
                                len(retry), one_line(error))
                    self._ends[:0] = retry
                    await asyncio.sleep(outage.failed())
                    self._ready.set()
                continue
            outage.ended()
            self._recorded(batch, [None if end is None else next(kept) for _, end in batch])
