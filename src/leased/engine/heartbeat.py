"""Lease renewal on a thread of its own, so that it does not share the fate of the handlers.

A handler that blocks the event loop, or a thread that hogs the GIL between switches, must not
starve renewal: the heartbeat only needs the GIL for a moment every few seconds. One statement
renews every lease the worker holds, once the oldest renewal is a third of a lease old; an idle
worker's heartbeat sleeps until a job is claimed.

On SQLite another connection's long transaction holds the one write lock, and a renewal waits for
it. Each renewal waits at most a sixth of the lease, then tries again, until the lease runs out:
no single wait outlives the lease, and the heartbeat can say what kept it from renewing, and for
how long (lapse_cause), where the lease's history would otherwise blame the worker.

A renewal that lands late (after failing, or answered after more than a retry step) is told to
`renewed_late` for each lease it kept, with how long it took and how much of the lease was left:
the attempt's trace shows how close it came (leased.tracing).

A handler's progress reports (TaskContext.progress) wait here, the latest per lease, and go with
the next renewal: a handler may report as often as it likes and costs no write of its own.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from leased.backends.ports import RuntimePort
from leased.backends.worker_calls import mark_worker_thread
from leased.engine.retrying import one_line
from leased.errors import DatabaseLocked
from leased.jobs import Lease

log = logging.getLogger("leased.worker")

RENEWALS_PER_LEASE = 3  # renew at a third of the lease, so two renewals may fail before it runs out


@dataclass(frozen=True, slots=True)
class LateRenewal:
    """A renewal that kept a lease but landed late."""

    waited_seconds: float  # from its first try (or its sending, if it did not fail) to its answer
    lease_left_seconds: float  # how much of the lease was left when it landed (negative: none)
    cause: str  # what held it up: the last failure, or an answer that was slow to come


@dataclass
class _Held:
    lease_seconds: float
    deadline: float  # monotonic time before which the lease surely holds (measured from the request)

    def renew_in(self, now: float) -> float:
        return self.deadline - now - self.lease_seconds * (1 - 1 / RENEWALS_PER_LEASE)


class Heartbeat:
    def __init__(self, backend: RuntimePort, on_lost: Callable[[Lease], None],
                 is_transient: Callable[[BaseException], bool],
                 renewed_late: Callable[[Lease, LateRenewal], None] = lambda lease, late: None):
        self._backend = backend
        self._on_lost = on_lost
        self._renewed_late = renewed_late  # on this thread: a kept lease, and how late its renewal was
        self._is_transient = is_transient
        self._held: dict[Lease, _Held] = {}
        self._reports: dict[Lease, str] = {}  # progress reports for the next renewal, the latest per lease
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._retry_at = 0.0  # after a failed renewal, when to try again
        self._sleeping_until = math.inf  # when the thread next looks at the leases, monotonic
        self._failing_since: float | None = None  # when the renewals that keep failing began, monotonic
        self._failure: BaseException | None = None  # the latest of them
        # When the renewal under way was sent, monotonic: a network cut leaves it unanswered, not failed.
        self._sent: float | None = None
        self._thread = threading.Thread(target=self._run, name="leased-heartbeat", daemon=True)
        self.failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def track(self, leases: list[tuple[Lease, float]], claimed_at: float) -> None:
        """Hold these (lease, lease_seconds) pairs from `claimed_at` on."""
        with self._lock:
            earliest = math.inf
            for lease, lease_seconds in leases:
                held = self._held[lease] = _Held(lease_seconds, claimed_at + lease_seconds)
                earliest = min(earliest, held.deadline - lease_seconds * (1 - 1 / RENEWALS_PER_LEASE))
        if earliest < self._sleeping_until:  # only when the thread's nap would end too late
            self._wake.set()

    def untrack(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._held.pop(lease, None)
                self._reports.pop(lease, None)

    def report(self, lease: Lease, progress: str) -> None:
        """From a handler's thread: send this progress report with the next renewal (replacing an
        unsent one); none is sent for a lease no longer held."""
        with self._lock:
            if lease in self._held:
                self._reports[lease] = progress

    def shortest_lease(self, default: float = 3.0) -> float:
        with self._lock:
            return min((held.lease_seconds for held in self._held.values()), default=default)

    def overdue(self, now: float) -> list[Lease]:
        """Leases that may run out before the next renewal could land: their handlers must stop now.

        While another connection holds SQLite's write lock, no one can take a lease over, so the
        renewals go on until the lease itself runs out."""
        locked_out = isinstance(self._failure, DatabaseLocked)
        with self._lock:
            return [lease for lease, held in self._held.items()
                    if held.deadline - now < (0.0 if locked_out else held.lease_seconds / RENEWALS_PER_LEASE / 2)]

    def lapse_cause(self) -> str | None:
        """Why the renewals have been failing, and for how long; None while they succeed."""
        return self._lapse("its lease")

    def _lapse(self, what: str) -> str | None:
        since, failure, sent = self._failing_since, self._failure, self._sent
        if since is None or failure is None:
            # Across a network cut a renewal neither lands nor fails: its TCP segments are
            # retransmitted for minutes. Waiting longer than a retry step for it is the cause.
            waited = None if sent is None else time.monotonic() - sent
            if waited is None or waited < self.shortest_lease() / RENEWALS_PER_LEASE / 2:
                return None
            return f"could not renew {what} for {waited:.1f} s: no answer from the database, as across a network cut"
        why = ("another connection held the database's write lock all that time (a long transaction)"
               if isinstance(failure, DatabaseLocked) else one_line(failure))
        return f"could not renew {what} for {time.monotonic() - since:.1f} s: {why}"

    def _seconds_until_due(self, planning_a_nap: bool = False) -> float | None:
        now = time.monotonic()
        with self._lock:  # with track()'s, so that a lease added meanwhile wakes the nap
            if not self._held:
                due = None
            else:
                due = max(min(held.renew_in(now) for held in self._held.values()), self._retry_at - now, 0.0)
            if planning_a_nap:
                self._sleeping_until = math.inf if due is None else now + due
        return due

    def _run(self) -> None:
        mark_worker_thread()
        try:
            while not self._stopped:
                self._wake.wait(self._seconds_until_due(planning_a_nap=True))
                self._sleeping_until = -math.inf  # awake: a new lease is seen by the next look
                self._wake.clear()
                if not self._stopped and self._seconds_until_due() == 0.0:
                    self.renew_now()
        except BaseException as error:  # a dead heartbeat must stop the worker loudly, not silently
            self.failure = error
            log.exception("heartbeat stopped")

    def renew_now(self) -> None:
        with self._lock:
            leases = list(self._held)
            reports, self._reports = self._reports, {}
        if not leases:
            return
        shortest = self.shortest_lease()
        sent = time.monotonic()
        step = shortest / RENEWALS_PER_LEASE / 2
        with self._lock:
            remaining = min((held.deadline for held in self._held.values()), default=math.inf) - sent
        self._sent = sent
        try:  # never wait past the lease's end; once it has passed, a step at a time
            kept = self._backend.renew(leases, wait_seconds=min(step, remaining) if remaining > 0 else step,
                                       progress=reports)
        except BaseException as error:
            self._sent = None
            with self._lock:  # the reports go with the next try, unless newer ones came meanwhile
                self._reports = {lease: report for lease, report in reports.items() if lease in self._held} | \
                    self._reports
            if not self._is_transient(error):
                raise
            self._failure = error
            if self._failing_since is None:
                self._failing_since = sent
            # A lock wait has paused already: try again at once. Other failures wait a step.
            self._retry_at = time.monotonic() + (0.0 if isinstance(error, DatabaseLocked) else step)
            log.warning("%s; retrying until the lease runs out", self._lapse(f"{len(leases)} lease(s)"))
            return
        self._sent = None
        answered = time.monotonic()
        late: tuple[float, str] | None = None  # how long it waited, and why
        if self._failing_since is not None:
            log.info("renewal went through after failing for %.1f s: %d of %d lease(s) still held",
                     sent - self._failing_since, len(kept), len(leases))
            late = (answered - self._failing_since, "another connection held the database's write lock"
                    if isinstance(self._failure, DatabaseLocked) else one_line(self._failure))
        elif answered - sent > step:  # e.g. sent into a network cut, delivered once the link came back
            log.info("renewal answered after %.1f s: %d of %d lease(s) still held", answered - sent, len(kept),
                     len(leases))
            late = (answered - sent, "the database was slow to answer")
        self._retry_at = 0.0
        self._failing_since = self._failure = None
        lapsed: list[tuple[Lease, LateRenewal]] = []
        with self._lock:
            for lease in kept:
                held = self._held.get(lease)
                if held is not None:
                    if late is not None:
                        lapsed.append((lease, LateRenewal(late[0], held.deadline - answered, late[1])))
                    held.deadline = sent + held.lease_seconds
            lost = [lease for lease in leases if lease not in kept and lease in self._held]
        for lease, renewal in lapsed:
            self._renewed_late(lease, renewal)
        for lease in lost:
            self._on_lost(lease)
