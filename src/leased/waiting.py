"""Waiting for a job to end: what `app.wait` and `app.wait_async` do.

A waiter re-reads the job until it is done, failed or cancelled. How it learns to look again:

- In this process, a worker that ends an attempt emits AttemptEnded on `app.events` once the end
  is written, and `app.cancel` says so too: the waiter is woken at once.
- From anywhere else (another process or host) nothing tells it, so it re-reads with a backoff:
  10 ms, doubling up to 500 ms. A short job is seen ending within a few ms of it; a long one costs
  two reads of one row by its key a second.

Why not a notification when a job ends: on PostgreSQL a NOTIFY in the finishing statement would
cost every job on the hot path (notifications queue through one server-wide lock at commit) to
serve the rare caller who waits; a LISTEN per waiting job would hold a connection per waiter. On
SQLite there is no channel to speak of. The backoff bounds the cost and the latency instead.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from leased.errors import ConfigurationError, WaitTimeout
from leased.events import AttemptEnded, Event, Events
from leased.jobs import Job

FIRST_DELAY = 0.01
MAX_DELAY = 0.5


class JobEndSignals:
    """Wakes this process's waiters of a job when something here may have ended it."""

    def __init__(self, events: Events):
        self._events = events
        self._waiting: dict[int, set[threading.Event]] = {}
        self._lock = threading.Lock()
        self._subscribed = False

    @contextmanager
    def watching(self, job_id: int) -> Iterator[threading.Event]:
        signal = threading.Event()
        with self._lock:
            if not self._subscribed:  # only once someone waits: workers pay nothing otherwise
                self._events.subscribe(self._on_event)
                self._subscribed = True
            self._waiting.setdefault(job_id, set()).add(signal)
        try:
            yield signal
        finally:
            with self._lock:
                waiting = self._waiting[job_id]
                waiting.discard(signal)
                if not waiting:
                    del self._waiting[job_id]

    def job_changed(self, job_id: int) -> None:
        if job_id not in self._waiting:  # the common case, without the lock
            return
        with self._lock:
            signals = list(self._waiting.get(job_id, ()))
        for signal in signals:
            signal.set()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, AttemptEnded):
            self.job_changed(event.job_id)


class JobWait:
    """One wait for one job; `abandon()` (from another thread) ends it early, for wait_async."""

    def __init__(self, read: Callable[[int], Job], signals: JobEndSignals, job_id: int, timeout: float | None):
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or timeout < 0):
            raise ConfigurationError(f"invalid timeout {timeout!r}: use a number of seconds >= 0, or None to wait "
                                     "as long as it takes")
        self._read, self._signals, self.job_id, self.timeout = read, signals, job_id, timeout
        self._abandoned = False
        self._signal: threading.Event | None = None

    def run(self) -> Job:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        delay = FIRST_DELAY
        with self._signals.watching(self.job_id) as signal:
            self._signal = signal
            while True:
                signal.clear()  # before the read: an end signalled during it is not lost
                job = self._read(self.job_id)
                if job.is_finished or self._abandoned:
                    return job
                pause = delay if deadline is None else min(delay, deadline - time.monotonic())
                if pause <= 0:
                    raise WaitTimeout(job, self.timeout)
                signal.wait(pause)
                delay = min(delay * 2, MAX_DELAY)

    def abandon(self) -> None:
        self._abandoned = True
        if self._signal is not None:
            self._signal.set()
