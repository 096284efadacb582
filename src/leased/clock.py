"""The clock seam: the time leased's queries read is the database's clock plus an offset.

Every query that decides time (claims, leases, run_after, backoff, reclaims, schedules, rate
windows, retention) reads leased_now(): on SQLite a Python function registered on each
connection, on PostgreSQL a SQL function over now() and the session's `leased.clock_offset`
(migration 0007). Moving the offset (leased.testing.advance) moves "now" for this app's
connections in this process, so leases expire, backoffs end and ticks fall due without sleeping.
What it does not move: the worker's own timers (poll interval, lease renewal, time limits), which
are real time, and other processes.
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0  # seconds added to the database's clock

    def now(self) -> float:
        """Epoch seconds: SQLite's leased_now()."""
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"time only moves forward here; got {seconds} seconds")
        self.offset += seconds

    def interval(self) -> str:
        """The offset as PostgreSQL's leased.clock_offset reads it ('' is none)."""
        return f"{self.offset!r} seconds" if self.offset else ""
