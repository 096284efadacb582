"""The claimer: claims due jobs into the worker's free slots, and while jobs are short a little
ahead of them; once a second the same claim first returns expired leases to the pool, unless the
reclaimer does that beside the claims (engine/reclaimer.py).

It sleeps until a wake-up (a job enqueued here or announced by the database, a slot freed while
it waits for one) or the poll interval, whichever comes first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Callable

from leased.backends.ports import ClaimRequest, RuntimePort
from leased.engine.reclaimer import RECLAIM_INTERVAL, Reclaimer
from leased.engine.retrying import Outage, is_transient, one_line
from leased.engine.slots import Slots
from leased.engine.threads import LoopInbox
from leased.jobs import ClaimedJob

log = logging.getLogger("leased.worker")

CLAIM_GATHER_SECONDS = 0.002


class Claimer:
    def __init__(self, backend: RuntimePort, request: ClaimRequest, slots: Slots, *, poll_interval: float,
                 start: Callable[[list[ClaimedJob], float], None], claimed: Callable[[], int],
                 held_by_stuck: Callable[[], int], stopping: Callable[[], bool], reclaimer: Reclaimer | None = None):
        self._backend = backend
        self._reclaimer = reclaimer  # reclaims beside the claims; None: the claims reclaim
        self._request = request
        self.slots = slots
        self._poll_interval = poll_interval
        self._start = start  # runs the jobs claimed at a monotonic time
        self._claimed = claimed  # attempts claimed whose end is not written yet
        self._held_by_stuck = held_by_stuck  # slots a stuck sync handler still holds past its time limit
        self._stopping = stopping
        self._wakeup = asyncio.Event()
        self._needs_slots = False  # waiting for a slot to free, not for a poll
        self._slots_freed: LoopInbox[None] = LoopInbox(lambda _: self._wakeup.set())

    def wake(self) -> None:
        """On the loop: look for work now instead of at the next poll."""
        self._wakeup.set()

    def slot_freed(self) -> None:
        """From any thread: a handler ended. If the claimer waits for a slot, it claims again (once
        for all the slots that free before it runs)."""
        if self._needs_slots:
            self._slots_freed.put(None)

    def attempt_closed(self) -> None:
        """An attempt's end is written (or given up): with nothing left, stop_when_idle looks again."""
        if self._needs_slots or not self._claimed():
            self._wakeup.set()

    def _wanted(self) -> int:
        unwritten = self._claimed() - self.slots.handling + self._held_by_stuck()
        return self.slots.wanted(unwritten)

    async def run(self, stop_when_idle: bool) -> None:
        self._slots_freed.start(asyncio.get_running_loop())
        outage = Outage()
        next_reclaim = 0.0
        reclaimed_while_idle = False
        concurrency = self.slots.concurrency
        while not self._stopping():
            wanted = self._wanted()
            self._needs_slots = wanted <= 0
            if wanted <= 0:
                await self._nap(None)
                continue
            if wanted < concurrency // 2:
                # Let a few more slots free up: one claim of many costs little more than a claim of one.
                await asyncio.sleep(CLAIM_GATHER_SECONDS)
                wanted = self._wanted()
                if wanted <= 0:
                    continue
            try:
                claimed_at = time.monotonic()
                reclaim = self._reclaimer is None and claimed_at >= next_reclaim
                # A limit may refuse jobs only because ours still run: if they end during the claim,
                # "nothing claimed, nothing running" does not mean the queue is empty.
                was_running = bool(self._claimed())
                jobs = await asyncio.to_thread(self._backend.claim,
                                               replace(self._request, limit=wanted, reclaim_expired=reclaim))
                self.slots.claim_took(time.monotonic() - claimed_at)
                if reclaim:
                    next_reclaim = claimed_at + RECLAIM_INTERVAL
            except Exception as error:
                if not is_transient(error):
                    raise
                delay = outage.failed()
                log.warning("worker %s: database unavailable (%s); retrying in %.1fs", self._request.worker_id,
                            one_line(error), delay)
                await self._nap(delay)
                continue
            if outage.ended():
                log.info("worker %s: database reachable again", self._request.worker_id)
            if jobs:
                reclaimed_while_idle = False
                # The lease runs from the claim statement; the call may have waited for a connection
                # first, for seconds through a failover, and that wait is not the handler's to lose.
                self._start(jobs, claimed_at if jobs[0].lease_from is None else jobs[0].lease_from)
            # A full claim means more may be due: claim again as soon as a slot frees. A short one
            # means the queue is drained, and only a wake-up or the poll brings the claimer back.
            self._needs_slots = len(jobs) == wanted
            if len(jobs) < wanted:
                if stop_when_idle and not jobs and not self._claimed():
                    if was_running:
                        continue  # ours ended during the claim: look again
                    if self._reclaimer is not None and not reclaimed_while_idle:
                        # Idle only once the leases that expired are back in the pool (a crashed
                        # worker's job is ours to run), by this reclaim or the loop's just before it.
                        await self._reclaimer.reclaim()
                        reclaimed_while_idle = True
                        continue
                    return
                await self._nap(None if stop_when_idle else self._poll_interval)

    async def _nap(self, timeout: float | None) -> None:
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            pass
        self._wakeup.clear()
