"""The worker's slots: how many handlers run at once, sync ones on threads and async ones on the
loop alike, and the claimed attempts waiting for one, in claim order; and how soon slots will free,
which tells the claimer how far ahead to claim.

Thread-safe: a handler thread whose job ended takes the next waiting sync job itself, in the slot
it holds, without a round trip through the loop, unless jobs given to the handler threads before it
still wait for one: then it takes the first of those (engine/threads.py), so that handlers take
their jobs in claim order. A slot is held until its handler returns, even
past the attempt's time limit: a sync handler that ignores its limit keeps its thread busy.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from leased.engine.claimed import ClaimedAttempt

PREFETCH_SECONDS = 0.05  # claim ahead the jobs the slots will start within this, or within two claims' time
CLAIM_TIME_WEIGHT = 0.3  # how much the latest claim counts in the running mean of how long claims take
END_WINDOW = 0.25  # handler ends remembered this many seconds, to tell how long handlers run lately
MAX_PREFETCH = 500
MAX_UNWRITTEN_ENDS = 1_000


class Slots:
    def __init__(self, concurrency: int, *, run_on_thread: Callable[[ClaimedAttempt], None],
                 run_on_loop: Callable[[ClaimedAttempt], None], freed: Callable[[], None],
                 threads_behind: Callable[[], bool] = lambda: False, clock: Callable[[], float] = time.monotonic):
        self.concurrency = concurrency
        self._run_on_thread = run_on_thread  # a sync attempt, to a handler thread (from any thread)
        self._run_on_loop = run_on_loop  # an async attempt, to the loop (from any thread)
        self._freed = freed  # a handler ended: the claimer may want to claim more (from any thread)
        self._threads_behind = threads_behind  # whether sync attempts given to threads wait for one to take them
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: collections.deque[ClaimedAttempt] = collections.deque()
        self._holding: set[ClaimedAttempt] = set()  # attempts given a slot whose handler has not returned
        self._ends: collections.deque[tuple[float, float]] = collections.deque()  # recent ends: when, how long it ran
        self._claim_seconds = 0.0  # how long a claim takes lately (a running mean)

    @property
    def running(self) -> int:
        """Slots whose handler has not returned."""
        return len(self._holding)

    @property
    def handling(self) -> int:
        """Claimed attempts waiting for a slot or in their handler."""
        return len(self._holding) + len(self._waiting)

    def add(self, attempts: Iterable[ClaimedAttempt]) -> None:
        """Claimed attempts wait in line; as many start as slots are free."""
        with self._lock:
            self._waiting.extend(attempts)
            starting = self._take_free()
        self._start_on_loop(starting)

    def ended(self, attempt: ClaimedAttempt, on_thread: bool) -> ClaimedAttempt | None:
        """The attempt's handler returned (`attempt.started` is 0 if it never ran). On its thread: the
        next waiting attempt, if it is sync and no attempt given to the threads before it waits for
        one, for that thread to run in the same slot; otherwise None, and the slot goes to whoever
        is next in line (the thread then takes the first attempt waiting for a thread)."""
        now = self._clock()
        with self._lock:
            self._ends.append((now, now - attempt.started if attempt.started else 0.0))
            self._holding.discard(attempt)
            if on_thread and self._waiting and not self._waiting[0].is_async and not self._threads_behind():
                following, starting = self._waiting.popleft(), []
                self._holding.add(following)
            else:
                following = None
                starting = self._take_free()
        self._start_on_loop(starting)
        self._freed()
        return following

    def withdraw(self, attempt: ClaimedAttempt) -> bool:
        """Take an attempt out of the line before it starts; False if it has started."""
        with self._lock:
            try:
                self._waiting.remove(attempt)
            except ValueError:
                return False
        return True

    def _take_free(self) -> list[ClaimedAttempt]:
        """Under the lock: free slots to the attempts first in line. Sync ones go to the handler
        threads here, still under the lock, so that no thread asking ended() for its next attempt
        can take one from the line while an earlier one is between the line and the threads; the
        async ones are returned, for _start_on_loop once the lock is released."""
        on_loop = []
        while len(self._holding) < self.concurrency and self._waiting:
            attempt = self._waiting.popleft()
            self._holding.add(attempt)
            if attempt.is_async:
                on_loop.append(attempt)
            else:
                self._run_on_thread(attempt)
        return on_loop

    def _start_on_loop(self, attempts: Iterable[ClaimedAttempt]) -> None:
        for attempt in attempts:
            self._run_on_loop(attempt)

    def claim_took(self, seconds: float) -> None:
        """A claim took this long (monotonic seconds, from the request to its rows)."""
        self._claim_seconds += CLAIM_TIME_WEIGHT * (seconds - self._claim_seconds)

    def wanted(self, unwritten: int) -> int:
        """How many jobs to claim now: enough to fill the free slots, and while jobs are short, as
        many more as will be needed before the claim after this one brings its jobs, so that one
        claim serves many slots and a freed slot starts its next job without a round trip. Long
        jobs get no extra: a job must not wait here while another worker sits idle. A slot frees
        when its handler returns, before its end is written; a slow database holds claims back
        through the cap on `unwritten` ends."""
        return min(self.concurrency + self._prefetch() - self.handling, MAX_UNWRITTEN_ENDS - unwritten)

    def _prefetch(self) -> int:
        """The jobs the slots will start within PREFETCH_SECONDS, or within two claims' time when
        claims take longer (a busy database, or a process whose threads crowd the claim's): at the
        rate handlers returned lately, or, if more, the running ones that will have returned by
        then: those whose time so far, plus that, reaches how long handlers ran lately, but not
        those already running longer than twice the longest of them, which are not like the recent
        ones. So 500 slots of 50 ms jobs started together are refilled a wave ahead as soon as the
        first of them returns, while long jobs among a few quick failures get nothing extra."""
        now = self._clock()
        ahead = max(PREFETCH_SECONDS, 2 * self._claim_seconds)
        with self._lock:
            while self._ends and self._ends[0][0] < now - END_WINDOW:
                self._ends.popleft()
            by_rate = len(self._ends) * ahead / END_WINDOW
            if not self._ends or by_rate >= len(self._holding):
                # The rate alone covers every running handler (short jobs, or none ended lately):
                # no need to sort thousands of recent runs, on every claim of a fast drain.
                return min(MAX_PREFETCH, int(by_rate))
            runs = sorted(seconds for _, seconds in self._ends)
            starts = [attempt.started for attempt in self._holding]
        typical, longest = runs[len(runs) // 2], runs[-1]
        ending = sum(1 for started in starts if started and typical - ahead <= now - started <= 2 * longest)
        return min(MAX_PREFETCH, int(max(by_rate, ending)))
