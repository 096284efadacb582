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
from typing import TYPE_CHECKING, Any, Callable

from leased.errors import ConfigurationError, PayloadError
from leased.payloads import DEFAULT_MAX_PAYLOAD_BYTES, decode, encode_result

if TYPE_CHECKING:
    from leased.engine.context import TaskContext

MAX_STEP_NAME = 255


def check_step_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
        raise ConfigurationError(f"invalid step name {name!r}: use a non-empty string of at most {MAX_STEP_NAME} "
                                 "characters, the same on every attempt")
    return name


def recorded_steps(context: TaskContext) -> dict[str, Any]:
    """The job's recorded steps by name, read once per attempt (none before a second attempt)."""
    if context._steps is None:
        context._steps = {} if context.attempt == 1 or context.store is None else {
            step.name: step.result for step in context.store.durable_steps(context.job_id)}
    return context._steps


def _check_step(name: object, fn: object) -> None:
    check_step_name(name)
    if not callable(fn):
        raise ConfigurationError(f"step {name!r}: fn must be callable, got {fn!r}")


def run_step(context: TaskContext, name: str, fn: Callable[..., Any], transactional: bool) -> Any:
    _check_step(name, fn)
    recorded = recorded_steps(context)
    if name in recorded:
        return recorded[name]
    began = time.monotonic()
    handlers_connection = context._connection  # a transactional handler's: the step commits with its end
    if transactional and handlers_connection is None:
        with context.store.attempt_transaction() as connection:
            result_json = _result(name, fn(connection))
            kept = context.store.record_step(context.claimed.lease, name, result_json, time.monotonic() - began,
                                             connection)
            if not kept:
                raise _lease_gone(context, name)  # leaves the block: the step's writes roll back
    else:
        result_json = _result(name, fn(handlers_connection) if transactional else fn())
        kept = context.store.record_step(context.claimed.lease, name, result_json, time.monotonic() - began,
                                         handlers_connection)
        if not kept:
            raise _lease_gone(context, name)
    recorded[name] = result = decode(result_json)  # what later attempts get: the value as stored
    return result


async def run_step_async(context: TaskContext, name: str, fn: Callable[..., Any]) -> Any:
    _check_step(name, fn)
    recorded = await asyncio.to_thread(recorded_steps, context)
    if name in recorded:
        return recorded[name]
    began = time.monotonic()
    value = fn()
    if inspect.isawaitable(value):
        value = await value
    result_json = _result(name, value)
    lease, seconds = context.claimed.lease, time.monotonic() - began
    if context._connection is not None:  # an async transactional handler's: the record commits with its end
        recorded_now = await context.store.record_step_async(lease, name, result_json, seconds, context._connection)
    else:
        recorded_now = await asyncio.to_thread(context.store.record_step, lease, name, result_json, seconds)
    if not recorded_now:
        raise _lease_gone(context, name)
    recorded[name] = result = decode(result_json)
    return result


def _result(name: str, value: Any) -> str | None:
    try:
        return encode_result(value, DEFAULT_MAX_PAYLOAD_BYTES)
    except PayloadError as error:
        raise PayloadError(f"step {name!r} returned what leased cannot store as its result: {error}") from None


def _lease_gone(context: TaskContext, name: str) -> BaseException:
    from leased.engine.context import CancelReason, JobCancelled

    context.cancel(CancelReason.LEASE_LOST)
    return JobCancelled(f"lease lost: step {name!r} could not be recorded")
