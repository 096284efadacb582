"""The worker's slots: how many handlers run at once, sync ones on threads and async ones on the
loop alike, and the claimed attempts waiting for one, in claim order; and how fast slots turn over,
which tells the claimer how far ahead to claim.

Thread-safe: a handler thread whose job ended takes the next waiting sync job itself, in the slot
it holds, without a round trip through the loop. A slot is held until its handler returns, even
past the attempt's time limit: a sync handler that ignores its limit keeps its thread busy.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from leased.engine.executor import Attempt

PREFETCH_SECONDS = 0.05  # claim ahead only the jobs the slots will start within this
END_RATE_WINDOW = 0.25  # handler ends counted over this many seconds to tell how fast slots turn over
MAX_PREFETCH = 500
MAX_UNWRITTEN_ENDS = 1_000


class Slots:
    def __init__(self, concurrency: int, *, run_on_thread: Callable[[Attempt], None],
                 run_on_loop: Callable[[Attempt], None], freed: Callable[[], None]):
        self.concurrency = concurrency
        self._run_on_thread = run_on_thread  # a sync attempt, to a handler thread (from any thread)
        self._run_on_loop = run_on_loop  # an async attempt, to the loop (from any thread)
        self._freed = freed  # a handler ended: the claimer may want to claim more (from any thread)
        self._lock = threading.Lock()
        self._waiting: collections.deque[Attempt] = collections.deque()
        self.running = 0  # slots whose handler has not returned
        self._ends: collections.deque[tuple[float, float]] = collections.deque()  # recent ends: when, how long it ran
        self._ran = 0.0  # the seconds of those runs, summed

    @property
    def handling(self) -> int:
        """Claimed attempts waiting for a slot or in their handler."""
        return self.running + len(self._waiting)

    def add(self, attempts: Iterable[Attempt]) -> None:
        """Claimed attempts wait in line; as many start as slots are free."""
        with self._lock:
            self._waiting.extend(attempts)
            starting = self._take_free()
        self._start(starting)

    def ended(self, on_thread: bool, started: float) -> Attempt | None:
        """A handler that started at `started` (monotonic; 0: it never ran) returned. On its thread:
        the next waiting attempt, if it is sync, for that thread to run in the same slot; otherwise
        None, and the slot goes to whoever is next in line."""
        now = time.monotonic()
        seconds = now - started if started else 0.0
        with self._lock:
            self._ends.append((now, seconds))
            self._ran += seconds
            if on_thread and self._waiting and not self._waiting[0].is_async:
                following, starting = self._waiting.popleft(), ()
            else:
                following = None
                self.running -= 1
                starting = self._take_free()
        self._start(starting)
        self._freed()
        return following

    def withdraw(self, attempt: Attempt) -> bool:
        """Take an attempt out of the line before it starts; False if it has started."""
        with self._lock:
            try:
                self._waiting.remove(attempt)
            except ValueError:
                return False
        return True

    def withdraw_all(self) -> list[Attempt]:
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        return waiting

    def _take_free(self) -> list[Attempt]:
        starting = []
        while self.running < self.concurrency and self._waiting:
            self.running += 1
            starting.append(self._waiting.popleft())
        return starting

    def _start(self, attempts: Iterable[Attempt]) -> None:
        for attempt in attempts:
            (self._run_on_loop if attempt.is_async else self._run_on_thread)(attempt)

    def wanted(self, unwritten: int) -> int:
        """How many jobs to claim now: enough to fill the free slots, and while jobs are short, as
        many more as the slots will start within PREFETCH_SECONDS, so that one claim serves many
        slots and a freed slot starts its next job without a round trip. Long jobs get no extra:
        a job must not wait here while another worker sits idle. A slot frees when its handler
        returns, before its end is written; a slow database holds claims back through the cap on
        `unwritten` ends."""
        return min(self.concurrency + self._prefetch() - self.handling, MAX_UNWRITTEN_ENDS - unwritten)

    def _prefetch(self) -> int:
        """The jobs the slots will start within PREFETCH_SECONDS: at the rate they ended lately, or,
        from how long handlers ran lately, as many of the running ones as will end by then, which is
        known as soon as the first jobs end (500 slots of 50 ms jobs turn over all at once). Never
        more than ended lately, so that a few quick failures do not make long jobs look short."""
        since = time.monotonic() - END_RATE_WINDOW
        recent = self._ends
        with self._lock:
            while recent and recent[0][0] < since:
                self._ran -= recent.popleft()[1]
            ended, ran = len(recent), self._ran
        if not ended:
            return 0
        by_rate = ended * PREFETCH_SECONDS / END_RATE_WINDOW
        mean_run = max(0.0, ran) / ended
        by_duration = min(ended, self.running * PREFETCH_SECONDS / mean_run if mean_run > 0 else ended)
        return min(MAX_PREFETCH, int(max(by_rate, by_duration)))
