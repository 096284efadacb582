"""A handler's waits: `context.sleep(...)` and `context.wait_for(name)` (issue 46).

A wait that cannot return at once ends the attempt: one write fenced on the lease (WaitPort.begin_wait)
records it (outcome waited, not counted against max_attempts) and puts the job to sleep, and the
handler stops with JobWaits. The slot and the lease are free while the job sleeps. When its time
comes, or its signal, the job is claimed again and its handler runs from the top: its durable steps
return their recorded results, and each wait returns what it came to, recorded as a durable step
too (a sleep's end, a signal's payload, a timeout), so the handler goes on past the waits it made.

Waits are numbered in the order the handler makes them (the second `wait_for("approved")` is
"leased.signal:approved#2"), so a handler must make them in the same order on every run, as it must
its steps. A wait inside a durable step is refused: the step would run again at every wake-up.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any, Callable

from leased.backends.ports import WaitOutcome, WaitRequest
from leased.engine.durable import DurableSteps
from leased.engine.stopping import CancelReason, JobCancelled
from leased.errors import ConfigurationError, SignalTimeout
from leased.names import MAX_NAME, check_name, shown

SIGNAL_NAME_MAX = MAX_NAME - 40  # room for the step names made from it ("leased.signal:<name>#<n>.end")


class JobWaits(JobCancelled):
    """Stops a handler whose wait ended its attempt: the job sleeps, and its handler runs again when
    it wakes. Let it through; a handler that catches it is stopped anyway (its context is cancelled)."""


class HandlerWaits:
    """One attempt's waits, numbered as the handler makes them. `lease_lost(what)` cancels the
    attempt whose lease is gone and gives the exception that stops it."""

    def __init__(self, context: Any, steps: DurableSteps, lease_lost: Callable[[str], BaseException]):
        self.context = context
        self.steps = steps
        self.lease_lost = lease_lost
        self._made: dict[str, int] = {}

    def sleep(self, seconds: float | timedelta | None, until: datetime | None) -> None:
        duration, until_epoch = _sleep_end(seconds, until)
        name = self._next("leased.sleep")
        recorded = self.steps.recorded()
        replayed = name in recorded
        if replayed:  # the end its first run recorded, whatever this run computed
            duration, until_epoch = None, recorded[name]
        answer = self._wait(WaitRequest(self.context.claimed.lease, name, None, duration, until_epoch,
                                        end_recorded=replayed), "sleep")
        if not replayed and answer.ends_at is not None:
            recorded[name] = answer.ends_at.timestamp()

    def wait_for(self, signal_name: str, timeout: float | timedelta | None) -> Any:
        check_name(signal_name, "signal name")
        if len(signal_name) > SIGNAL_NAME_MAX:
            raise ConfigurationError(f"signal name {signal_name[:40]!r}... has {len(signal_name)} characters: use at "
                                     f"most {SIGNAL_NAME_MAX}")
        seconds = None if timeout is None else _seconds(timeout, "timeout", "context.wait_for")
        name = self._next(f"leased.signal:{signal_name}")
        recorded = self.steps.recorded()
        if name not in recorded:
            until_epoch = recorded.get(f"{name}.end")
            answer = self._wait(WaitRequest(self.context.claimed.lease, name, signal_name,
                                            None if until_epoch is not None else seconds, until_epoch,
                                            end_recorded=until_epoch is not None),
                                f"wait for signal {signal_name!r}")
            recorded[name] = {"payload": answer.payload} if answer.outcome is WaitOutcome.TOOK else {"timed_out": True}
        if "timed_out" in recorded[name]:
            raise SignalTimeout(self.context.job_id, signal_name)
        return recorded[name]["payload"]

    def _next(self, prefix: str) -> str:
        """The step name of this attempt's next wait with `prefix`: numbered from 1 per prefix."""
        self._made[prefix] = number = self._made.get(prefix, 0) + 1
        return f"{prefix}#{number}"

    def _wait(self, request: WaitRequest, what: str) -> Any:
        """begin_wait, and the handler stopped unless the wait came to something at once."""
        context = self.context
        if context.store is None or context.in_child:
            raise ConfigurationError(f"job {context.job_id}: a handler in a child process (isolation='process') "
                                     f"cannot {what} yet; run the task in a thread")
        if context._connection is not None:
            raise ConfigurationError(f"job {context.job_id}: a transactional handler cannot {what}: its writes would "
                                     "commit with an attempt that ends waiting; wait before a transactional step")
        if self.steps.running is not None:
            raise ConfigurationError(f"job {context.job_id}: cannot {what} inside durable step "
                                     f"{self.steps.running!r}: the step would run again at every wake-up; wait "
                                     "between steps")
        answer = context.store.begin_wait(request)
        if answer.outcome is WaitOutcome.LOST:
            raise self.lease_lost(request.step_name)
        if answer.outcome is WaitOutcome.WAITING:
            context.cancel(CancelReason.WAITED)  # its end is written: nothing else is to be, nor given back
            until = "its signal" if answer.ends_at is None else f"{answer.ends_at:%Y-%m-%d %H:%M:%S} UTC"
            raise JobWaits(f"{what}: the attempt ended and the job sleeps until {until}")
        return answer


def _sleep_end(seconds: float | timedelta | None, until: datetime | None) -> tuple[float | None, float | None]:
    """(seconds from now, or an absolute end in seconds since the epoch): one of the two."""
    if (seconds is None) == (until is None):
        raise ConfigurationError("context.sleep() takes either a duration (seconds or a timedelta) or until=, "
                                 f"not {'both' if seconds is not None else 'neither'}")
    if until is not None:
        if not isinstance(until, datetime) or until.tzinfo is None:
            raise ConfigurationError(f"context.sleep(until={shown(until)}): until must be a datetime with a "
                                     "timezone, e.g. datetime.now(UTC) + timedelta(days=3)")
        return None, until.timestamp()
    return _seconds(seconds, "seconds", "context.sleep"), None


def _seconds(value: Any, field: str, call: str) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{call}({field}={shown(value)}): {field} must be a number of seconds (0 or more) "
                                 "or a timedelta")
    return float(value)
