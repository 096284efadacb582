"""Durable steps: `context.step(name, fn)` runs `fn` once across a job's attempts.

A step's result is recorded with the job by a write fenced on the lease (store.record_step), and a
later attempt gets the recorded result without calling `fn` again. The first step of an attempt
after the first reads the job's recorded steps (one query). A step that raised is not recorded,
and runs again on the next attempt.

The gap, stated plainly: a step whose `fn` returned but whose record did not commit before the
worker died runs again, so a step is at-least-once, and a recorded one is never repeated. With
`transactional=True`, `fn` gets a connection in a transaction that commits with the step's record:
its writes to the app's database happen once. In a transactional handler every step's record is
written in the handler's own transaction, and commits with its end. A step whose record finds the
lease gone stops the attempt (JobCancelled, its lease lost): nothing of it was written.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable

from leased import tracing
from leased.errors import ConfigurationError, PayloadError
from leased.jobs import ClaimedJob
from leased.names import check_name, shown
from leased.payloads import DEFAULT_MAX_PAYLOAD_BYTES, decode, encode_result



class DurableSteps:
    """One attempt's durable steps: those earlier attempts recorded, read on first use, and those
    this one records. `lease_lost(step)` cancels the attempt and gives the exception that stops it."""

    def __init__(self, store: Any, claimed: ClaimedJob, lease_lost: Callable[[str], BaseException]):
        self.store = store
        self.claimed = claimed
        self.lease_lost = lease_lost
        self._recorded: dict[str, Any] | None = None
        self.running: str | None = None  # the step whose fn runs now: a wait inside it is refused

    def recorded(self) -> dict[str, Any]:
        """The job's recorded steps by name, read once per attempt (none before a second attempt)."""
        if self._recorded is None:
            self._recorded = {} if self.claimed.attempt == 1 or self.store is None else {
                step.name: step.result for step in self.store.durable_steps(self.claimed.id)}
        return self._recorded

    def run(self, name: str, fn: Callable[..., Any], transactional: bool, handlers_connection: Any) -> Any:
        """`handlers_connection`: a transactional handler's, with which the step commits at its end."""
        _check_step(name, fn)
        recorded = self.recorded()
        if name in recorded:
            tracing.replayed_step(name)
            return recorded[name]
        with tracing.step(name):
            began = time.monotonic()
            self.running = name
            try:
                result_json = self._run_fn(name, fn, transactional, handlers_connection, began)
            finally:
                self.running = None
        recorded[name] = result = decode(result_json)  # what later attempts get: the value as stored
        return result

    def _run_fn(self, name: str, fn: Callable[..., Any], transactional: bool, handlers_connection: Any,
                began: float) -> str | None:
        """fn's result as JSON, recorded (and committed with fn's writes when transactional)."""
        if transactional and handlers_connection is None:
            with self.store.attempt_transaction() as connection:
                result_json = _result(name, fn(connection))
                if not self.store.record_step(self.claimed.lease, name, result_json, time.monotonic() - began,
                                              connection):
                    raise self.lease_lost(name)  # leaves the block: the step's writes roll back
            return result_json
        result_json = _result(name, fn(handlers_connection) if transactional else fn())
        if not self.store.record_step(self.claimed.lease, name, result_json, time.monotonic() - began,
                                      handlers_connection):
            raise self.lease_lost(name)
        return result_json

    async def run_async(self, name: str, fn: Callable[..., Any], handlers_connection: Any) -> Any:
        """`handlers_connection`: an async transactional handler's, with which the record commits."""
        _check_step(name, fn)
        recorded = await asyncio.to_thread(self.recorded)
        if name in recorded:
            tracing.replayed_step(name)
            return recorded[name]
        with tracing.step(name):
            began = time.monotonic()
            self.running = name
            try:
                value = fn()
                if inspect.isawaitable(value):
                    value = await value
            finally:
                self.running = None
            result_json = _result(name, value)
            lease, seconds = self.claimed.lease, time.monotonic() - began
            if handlers_connection is not None:
                recorded_now = await self.store.record_step_async(lease, name, result_json, seconds,
                                                                  handlers_connection)
            else:
                recorded_now = await asyncio.to_thread(self.store.record_step, lease, name, result_json, seconds)
        if not recorded_now:
            raise self.lease_lost(name)
        recorded[name] = result = decode(result_json)
        return result


def _check_step(name: object, fn: object) -> None:
    # The one rule for names (leased.names): MariaDB keeps 255 characters and pads with spaces, so a
    # longer name, or one that ends in white space, could be recorded as another step's.
    check_name(name, "step name")
    if not callable(fn):
        raise ConfigurationError(f"step {name!r}: fn must be callable, got {shown(fn)}")


def _result(name: str, value: Any) -> str | None:
    try:
        return encode_result(value, DEFAULT_MAX_PAYLOAD_BYTES)
    except PayloadError as error:
        raise PayloadError(f"step {name!r} returned what leased cannot store as its result: {error}") from None
