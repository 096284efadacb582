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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

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
    context = attempt.context
    opener = attempt.handler.transaction or backend.attempt_transaction
    outcome: AttemptEnd | Written | None = None
    finishing = False  # context.finish() said yes: nothing cancels the attempt any more
    try:
        with opener() as connection:
            context._connection = connection
            try:
                result = call()
            except BaseException as error:  # the handler's own: its writes roll back
                outcome = None if context.is_cancelled else error_end(error)
                raise _RollBack from None
            end = None if context.is_cancelled else result_end(result)
            if end is None or end.outcome is not Outcome.DONE:  # cancelled, or a result that cannot be stored
                outcome = end
                raise _RollBack
            finishing = context.finish()
            if not finishing:  # cancelled as it returned: its cause decides what is recorded
                raise _RollBack
            kept, due_queues = backend.finish_in(connection, end)
            outcome = Written(end, kept, due_queues)
            if not kept:
                raise _RollBack
    except _RollBack:
        pass
    except Exception as error:
        # Opening the transaction, the fenced write or the commit failed: nothing of the attempt
        # was written (a commit that did land ended the job, and then this end is fenced off).
        job = attempt.job
        log.warning("job %d (%s) attempt %d: its transaction did not commit (%s); its writes were rolled back",
                    job.id, job.task_name, job.attempt, one_line(error))
        outcome = error_end(error) if (finishing or context.finish()) else None
        return outcome
    finally:
        context._connection = None
    if isinstance(outcome, Written):
        if outcome.kept and outcome.due_queues:
            backend.wake(outcome.due_queues)
        return outcome
    return outcome if outcome is not None and (finishing or context.finish()) else None
