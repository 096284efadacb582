"""Transactional handlers: what the handler writes and its attempt's end commit together, or not at all.

The executor hands an attempt of a task declared transactional=True here. Its handler runs with
context.connection, a connection in a transaction opened for this attempt: the backend's
attempt_transaction(), or a framework's (Django's atomic block, leased.contrib.django). When the
handler returns, its end is written in that same transaction by finish_in(), on condition that
the worker still holds the lease by the database's clock, and the transaction commits. A worker
that lost its lease (expired, taken over, cancelled) rolls back instead: none of the attempt's
writes happen, and the attempt ends as a lost lease. A handler that raises, is cancelled or
returns a result that cannot be stored rolls back too, and its end is written as any handler's
is, by the completer. Effects outside the database (mail, HTTP) stay at-least-once.

An async handler (a psycopg.AsyncConnection on PostgreSQL, an aiosqlite one on SQLite) takes the
same way on the event loop (run_in_transaction_async); a cancel reaches it as
asyncio.CancelledError, which rolls back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, NoReturn

from leased.backends.ports import AttemptEnd, RuntimePort
from leased.engine.claimed import ClaimedAttempt
from leased.engine.retrying import one_line
from leased.jobs import Outcome

log = logging.getLogger("leased.worker")


@dataclass(frozen=True, slots=True)
class Written:
    """An end written in the handler's own transaction, and whether it held (False: the lease was
    gone and everything rolled back). The completer passes it on without writing it again."""

    end: AttemptEnd
    kept: bool
    due_queues: set[str] = field(default_factory=set)  # steps its end made due, woken after the commit


class _RollBack(Exception):
    """Leaves the transaction's block so that it rolls back; nothing of the attempt is written."""


def run_in_transaction(attempt: ClaimedAttempt, backend: RuntimePort, call: Callable[[], Any],
                       error_end: Callable[[BaseException], AttemptEnd | None],
                       result_end: Callable[[Any], AttemptEnd]) -> AttemptEnd | Written | None:
    """On a handler thread: call the handler in the attempt's transaction and end it as the
    module's docstring says. Returns the end for the completer to write (after a rollback), the
    end already written (Written), or None when the attempt was cancelled."""
    ending, context = _Ending(attempt, error_end, result_end), attempt.context
    try:
        with (attempt.handler.transaction or backend.attempt_transaction)() as connection:
            context._connection = connection
            try:
                result = call()
            except BaseException as error:  # the handler's own: its writes roll back
                ending.raised(error)
            end = ending.returned(result)
            ending.written(end, *backend.finish_in(connection, end))
    except _RollBack:
        pass
    except Exception as error:
        return ending.not_committed(error)
    finally:
        context._connection = None
    outcome, due_queues = ending.outcome()
    if due_queues:
        backend.wake(due_queues)
    return outcome


async def run_in_transaction_async(attempt: ClaimedAttempt, backend: RuntimePort, call: Callable[[], Awaitable[Any]],
                                   error_end: Callable[[BaseException], AttemptEnd | None],
                                   result_end: Callable[[Any], AttemptEnd]) -> AttemptEnd | Written | None:
    """run_in_transaction() for an async handler, on the loop. A cancel (asyncio.CancelledError)
    rolls back and leaves this task cancelled: the executor finds the cause in the context."""
    ending, context = _Ending(attempt, error_end, result_end), attempt.context
    try:
        async with backend.attempt_transaction_async() as connection:
            context._connection = connection
            try:
                result = await call()
            except Exception as error:  # the handler's own (a cancel is not caught here): its writes roll back
                ending.raised(error)
            end = ending.returned(result)
            ending.written(end, *await backend.finish_in_async(connection, end))
    except _RollBack:
        pass
    except Exception as error:
        return ending.not_committed(error)
    finally:
        context._connection = None
    outcome, due_queues = ending.outcome()
    if due_queues:
        await asyncio.to_thread(backend.wake, due_queues)
    return outcome


class _Ending:
    """How a transactional attempt ends, decided step by step as its transaction goes; a step
    that must roll the transaction back raises _RollBack."""

    def __init__(self, attempt: ClaimedAttempt, error_end: Callable[[BaseException], AttemptEnd | None],
                 result_end: Callable[[Any], AttemptEnd]):
        self._attempt, self._context = attempt, attempt.context
        self._error_end, self._result_end = error_end, result_end
        self._outcome: AttemptEnd | Written | None = None
        self._finishing = False  # context.finish() said yes: nothing cancels the attempt any more

    def raised(self, error: BaseException) -> NoReturn:
        self._outcome = None if self._context.is_cancelled else self._error_end(error)
        raise _RollBack from None

    def returned(self, result: Any) -> AttemptEnd:
        """The end to write in the transaction, once the handler returned `result`."""
        end = None if self._context.is_cancelled else self._result_end(result)
        if end is None or end.outcome is not Outcome.DONE:  # cancelled, or a result that cannot be stored
            self._outcome = end
            raise _RollBack
        self._finishing = self._context.finish()
        if not self._finishing:  # cancelled as it returned: its cause decides what is recorded
            raise _RollBack
        return end

    def written(self, end: AttemptEnd, kept: bool, due_queues: set[str]) -> None:
        self._outcome = Written(end, kept, due_queues)
        if not kept:  # the lease was gone
            raise _RollBack

    def not_committed(self, error: Exception) -> AttemptEnd | None:
        """Opening the transaction, the fenced write or the commit failed: nothing of the attempt
        was written (a commit that did land ended the job, and then this end is fenced off)."""
        job = self._attempt.job
        log.warning("job %d (%s) attempt %d: its transaction did not commit (%s); its writes were rolled back",
                    job.id, job.task_name, job.attempt, one_line(error))
        return self._error_end(error) if (self._finishing or self._context.finish()) else None

    def outcome(self) -> tuple[AttemptEnd | Written | None, set[str]]:
        """The attempt's end, and the queues to wake now that it committed."""
        outcome = self._outcome
        if isinstance(outcome, Written):
            return outcome, outcome.due_queues if outcome.kept else set()
        return (outcome if outcome is not None and (self._finishing or self._context.finish()) else None), set()
