"""The claimer: claims due jobs into the worker's free slots, and while jobs are short a little
ahead of them; once a second the same claim first returns expired leases to the pool.

It sleeps until a wake-up (a job enqueued here or announced by the database, a slot freed while
it waits for one) or the poll interval, whichever comes first.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import replace
from typing import Callable

from leased.backends.base import Backend, ClaimRequest
from leased.engine.retrying import Outage, is_transient, one_line
from leased.jobs import Job

log = logging.getLogger("leased.worker")

RECLAIM_INTERVAL = 1.0
CLAIM_GATHER_SECONDS = 0.002
PREFETCH_SECONDS = 0.05  # claim ahead only the jobs the slots will start within this
END_RATE_WINDOW = 0.25  # handler ends counted over this many seconds to tell how fast slots turn over
MAX_PREFETCH = 500
MAX_UNWRITTEN_ENDS = 1_000


class Slots:
    """The worker's concurrency: claimed jobs waiting for a slot or in their handler, and how fast
    slots turn over."""

    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self.handling = 0  # claimed jobs waiting for a slot or in their handler
        self._free = asyncio.Semaphore(concurrency)
        self._ends: collections.deque[float] = collections.deque()  # recent handler ends, monotonic

    def claimed(self, count: int) -> None:
        self.handling += count

    async def acquire(self) -> None:
        await self._free.acquire()

    def release(self) -> None:
        self._free.release()
        self.handling -= 1
        self._ends.append(time.monotonic())

    def wanted(self, unwritten: int) -> int:
        """How many jobs to claim now: enough to fill the free slots, and while jobs are short, as
        many more as the slots will start within PREFETCH_SECONDS, so that one claim serves many
        slots and a freed slot starts its next job without a round trip. Long jobs get no extra:
        a job must not wait here while another worker sits idle. A slot frees when its handler
        returns, before its end is written; a slow database holds claims back through the cap on
        `unwritten` ends."""
        now = time.monotonic()
        recent = self._ends
        while recent and recent[0] < now - END_RATE_WINDOW:
            recent.popleft()
        prefetch = min(MAX_PREFETCH, int(len(recent) * PREFETCH_SECONDS / END_RATE_WINDOW))
        return min(self.concurrency + prefetch - self.handling, MAX_UNWRITTEN_ENDS - unwritten)


class Claimer:
    def __init__(self, backend: Backend, request: ClaimRequest, slots: Slots, *, poll_interval: float,
                 start: Callable[[list[Job], float], None], claimed: Callable[[], int],
                 held_by_stuck: Callable[[], int], stopping: Callable[[], bool]):
        self._backend = backend
        self._request = request
        self.slots = slots
        self._poll_interval = poll_interval
        self._start = start  # runs the jobs claimed at a monotonic time
        self._claimed = claimed  # attempts claimed whose end is not written yet
        self._held_by_stuck = held_by_stuck  # slots a stuck sync handler still holds past its time limit
        self._stopping = stopping
        self._wakeup = asyncio.Event()
        self._needs_slots = False  # waiting for a slot to free, not for a poll

    def wake(self) -> None:
        """On the loop: look for work now instead of at the next poll."""
        self._wakeup.set()

    def slot_freed(self) -> None:
        self.slots.release()
        if self._needs_slots:
            self._wakeup.set()

    def attempt_closed(self) -> None:
        """An attempt's end is written (or given up): with nothing left, stop_when_idle looks again."""
        if self._needs_slots or not self._claimed():
            self._wakeup.set()

    def _wanted(self) -> int:
        unwritten = self._claimed() - self.slots.handling + self._held_by_stuck()
        return self.slots.wanted(unwritten)

    async def run(self, stop_when_idle: bool) -> None:
        outage = Outage()
        next_reclaim = 0.0
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
                reclaim = claimed_at >= next_reclaim
                # A limit may refuse jobs only because ours still run: if they end during the claim,
                # "nothing claimed, nothing running" does not mean the queue is empty.
                was_running = bool(self._claimed())
                jobs = await asyncio.to_thread(self._backend.claim,
                                               replace(self._request, limit=wanted, reclaim_expired=reclaim))
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
                self.slots.claimed(len(jobs))
                self._start(jobs, claimed_at)
            # A full claim means more may be due: claim again as soon as a slot frees. A short one
            # means the queue is drained, and only a wake-up or the poll brings the claimer back.
            self._needs_slots = len(jobs) == wanted
            if len(jobs) < wanted:
                if stop_when_idle and not jobs and not self._claimed():
                    if not was_running:
                        return
                    continue  # ours ended during the claim: look again
                await self._nap(None if stop_when_idle else self._poll_interval)

    async def _nap(self, timeout: float | None) -> None:
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            pass
        self._wakeup.clear()
