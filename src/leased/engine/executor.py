"""The executor: runs one attempt of a claimed job (its handler, once) and says how it ended.

It calls the handler with its TaskContext: a sync one on the handler thread that calls run_sync(),
an async one as a task on the loop (start_async()). It arms the job's time limit and turns what the
handler did into the attempt's end: a result, an error to retry or not, or nothing when the
attempt was cancelled (its cause decides what is recorded, see engine/attempts.py).

Whatever a handler raises is its attempt's error, BaseExceptions included: a KeyboardInterrupt,
a SystemExit or a BaseException of the user's own fails the attempt, is retried by the task's
policy and ends the job at max_attempts, while the worker goes on. Were they to stop the worker,
a poison job would take down every worker that claims it, and each stop would give its attempt
back uncounted as a failure. The operator's Ctrl-C never arrives this way: it is a signal, which
the worker turns into a graceful stop (engine/worker.py), and Python raises KeyboardInterrupt
for a signal only in the main thread, never on a handler thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from typing import Any, Callable, Iterator

from leased import logs, tracing
from leased.backends.ports import AttemptEnd, RuntimePort
from leased.backends.worker_calls import worker_calls
from leased.backoff import Backoff
from leased.engine.children import Call, Children, Crashed, Returned, Stopped
from leased.engine.claimed import ClaimedAttempt
from leased.engine.context import CancelReason, JobCancelled, TaskContext
from leased.engine.error_text import message_of, traceback_of
from leased.engine.retrying import one_line
from leased.engine.timelimits import TimeLimits, timeout_end
from leased.engine.transactional import Written, run_in_transaction, run_in_transaction_async
from leased.errors import ArgumentsMismatch, ConfigurationError, PayloadError, PermanentError, ResultNotStored
from leased.jobs import ClaimedJob, Outcome, quarantined_error
from leased.payloads import clean_text, encode_result
from leased.tasks import importable
from leased.terminal import printable

log = logging.getLogger("leased.worker")

MAX_ERROR_MESSAGE = 4_000
MAX_TRACEBACK = 32_000
# How long a child process may take to begin a handler (start, imports) beyond the handler's own
# time limit, before the limit stops it anyway: a start that hangs is still bounded.
CHILD_START_SECONDS = 60.0


class Executor:
    def __init__(self, time_limits: TimeLimits, max_payload_bytes: int, backend: RuntimePort,
                 children: Children | None = None):
        self.time_limits = time_limits
        self.max_payload_bytes = max_payload_bytes
        self.children = children or Children()  # process-isolated handlers' (spawned on first use)
        self._backend = backend  # a transactional handler's transaction, and its end written in it

    def run_sync(self, attempt: ClaimedAttempt) -> AttemptEnd | Written | None:
        """On a handler thread: run the handler once. None means it was cancelled and nothing is to
        be written; Written, a transactional handler's end, written with its writes."""
        with _attempt_context(attempt):
            _link_parents(attempt)
            return self._run_sync(attempt)

    def _run_sync(self, attempt: ClaimedAttempt) -> AttemptEnd | Written | None:
        context = attempt.context
        if context.is_cancelled:
            return None
        job, handler = attempt.job, attempt.handler
        try:
            args, kwargs = self._arguments(attempt)
        except PayloadError as error:
            return error_end(job, _found_as(ArgumentsMismatch, error), retry=False) if context.finish() else None
        attempt.thread_id = threading.get_ident()
        attempt.started = attempt.limit_from = time.monotonic()
        if job.timeout_seconds is not None:
            # A child process's start (a new process, its imports) is not the handler's time: its
            # limit is armed again when the handler begins (_handler_started), and until then a
            # start that hangs is bounded by CHILD_START_SECONDS more.
            if attempt.isolation == "process":
                attempt.limit_from += CHILD_START_SECONDS
            self.time_limits.arm_soon(attempt)
        if attempt.isolation == "process":
            end = self._run_in_child(attempt, args, kwargs)
            attempt.thread_id = None
            return end if end is not None and context.finish() else None
        if handler.transactional:
            ended = run_in_transaction(
                attempt, self._backend, lambda: _as_handler(handler.func, context, *args, **kwargs),
                lambda error: _reported(context, self._error_end(attempt, error)),
                lambda result: context.with_reports(self._result_end(attempt, result)))
            attempt.thread_id = None
            return ended
        try:
            result = _as_handler(handler.func, *((context,) if handler.takes_context else ()), *args, **kwargs)
        except BaseException as error:  # a KeyboardInterrupt too: see the module's docstring
            end = None if context.is_cancelled else self._error_end(attempt, error)
        else:
            end = None if context.is_cancelled else self._result_end(attempt, result)
        attempt.thread_id = None
        return end if end is not None and context.finish() else None

    def start_async(self, attempt: ClaimedAttempt,
                    ended: Callable[[ClaimedAttempt, AttemptEnd | Written | None], None]) -> None:
        """On the loop: start the handler as a task; `ended(attempt, end)` is called when it is done
        (end None: cancelled, nothing to write)."""
        with _attempt_context(attempt):  # the task and its done callback copy the context as it is here
            self._start_async(attempt, ended)

    def _start_async(self, attempt: ClaimedAttempt,
                     ended: Callable[[ClaimedAttempt, AttemptEnd | Written | None], None]) -> None:
        context = attempt.context
        if context.is_cancelled:
            ended(attempt, None)
            return
        try:
            args, kwargs = self._arguments(attempt)
        except PayloadError as error:
            ended(attempt, error_end(attempt.job, _found_as(ArgumentsMismatch, error), retry=False)
                  if context.finish() else None)
            return
        handler = attempt.handler
        attempt.started = attempt.limit_from = time.monotonic()
        if handler.transactional:
            running = run_in_transaction_async(
                attempt, self._backend, lambda: _as_handler_async(handler.func(context, *args, **kwargs)),
                lambda error: _reported(context, self._error_end(attempt, error)),
                lambda result: context.with_reports(self._result_end(attempt, result)))
        else:
            running = _as_handler_async(handler.func(*((context,) if handler.takes_context else ()), *args, **kwargs))
        if _has_parents_to_link(attempt):
            running = _parents_linked_first(attempt, running)
        attempt.task = asyncio.get_running_loop().create_task(_contained(running))
        self.time_limits.arm(attempt)
        attempt.task.add_done_callback(lambda task: ended(attempt, self._async_end(attempt, task)))

    def _async_end(self, attempt: ClaimedAttempt, task: asyncio.Task) -> AttemptEnd | Written | None:
        context = attempt.context
        if context.cancel_reason is CancelReason.TIMEOUT:  # whatever it did after its limit, it ended there
            return timeout_end(attempt.job, attempt.handler.backoff)
        if context.is_cancelled:
            return None
        if task.cancelled():  # not by the worker: an error like any other
            end = self._error_end(attempt, asyncio.CancelledError("the handler's task was cancelled"))
        elif (error := task.exception()) is not None:
            end = self._error_end(attempt, error.error if isinstance(error, _Escaped) else error)
        elif attempt.handler.transactional:  # its end, decided (and written, if it held) in its transaction
            return task.result()
        else:
            end = self._result_end(attempt, task.result())
        return end if end is not None and context.finish() else None

    def _run_in_child(self, attempt: ClaimedAttempt, args: list[Any], kwargs: dict[str, Any]) -> AttemptEnd | None:
        """On a handler thread: the handler in a child process (engine/children.py); its end here."""
        job, handler, context = attempt.job, attempt.handler, attempt.context
        try:
            module, qualname = importable(handler.func, job.task_name)
        except ConfigurationError as error:  # enqueued with using(isolation="process") when it was importable
            return failed_end(job, Outcome.ERROR, "ConfigurationError", str(error), None, retry=False,
                              backoff=handler.backoff)
        call = Call(module, qualname, handler.takes_context, handler.database_url,
                    job.id, job.attempt, context.worker_id, job.task_name, args, kwargs, self.max_payload_bytes,
                    tracing.current_trace_context())  # the attempt's span, for the child's own spans
        try:
            answer = self.children.run(call, context, lambda: self._handler_started(attempt))
        except Exception as error:  # e.g. arguments that cannot be sent to a child (not picklable)
            return self._error_end(attempt, error)
        if isinstance(answer, Returned):
            return AttemptEnd(attempt.lease, Outcome.DONE, result_json=answer.result_json, workflow_id=job.workflow_id)
        if isinstance(answer, Stopped):  # cancelled: its cause decides what is recorded
            attempt.stopped_child = ("its child process did not stop when told and was killed (SIGKILL)"
                                     if answer.killed else "its child process stopped when told (SIGTERM)")
            return None
        if isinstance(answer, Crashed):
            tracing.event(attempt.span, "child_crashed", how=answer.how)
            return crashed_end(job, f"the handler's child process {answer.described}", handler.backoff)
        retry = not (answer.permanent or answer.unstorable) and job.attempt < job.max_attempts
        return failed_end(job, Outcome.ERROR, "ResultNotStored" if answer.unstorable else answer.error_type,
                          answer.message, answer.traceback, retry=retry, backoff=handler.backoff)

    def _handler_started(self, attempt: ClaimedAttempt) -> None:
        """A child began the handler: its time limit counts from now."""
        attempt.limit_from = time.monotonic()
        if attempt.job.timeout_seconds is not None:
            self.time_limits.arm_soon(attempt)

    def _arguments(self, attempt: ClaimedAttempt) -> tuple[list[Any], dict[str, Any]]:
        job, handler = attempt.job, attempt.handler
        if job.unreadable is not None:  # a row another program wrote: this job's failure, no retry
            raise PayloadError(job.unreadable)
        handler.check_arguments(job.args, job.kwargs)
        return handler.handler_arguments(job.args, job.kwargs)  # typed parameters decoded

    def _error_end(self, attempt: ClaimedAttempt, error: BaseException) -> AttemptEnd | None:
        job = attempt.job
        if isinstance(error, JobCancelled):
            return None
        tracing.failed(attempt.span, error)
        if isinstance(error, PermanentError):
            return error_end(job, error, retry=False)
        return error_end(job, error, retry=job.attempt < job.max_attempts, backoff=attempt.handler.backoff)

    def _result_end(self, attempt: ClaimedAttempt, result: Any) -> AttemptEnd:
        job = attempt.job
        try:
            result_json = encode_result(result, self.max_payload_bytes)
        except PayloadError as error:
            return error_end(job, _found_as(ResultNotStored, error), retry=False)
        log.debug("job %d (%s) attempt %d done", job.id, job.task_name, job.attempt)
        return AttemptEnd(attempt.lease, Outcome.DONE, result_json=result_json, workflow_id=job.workflow_id)


def _reported(context: TaskContext, end: AttemptEnd | None) -> AttemptEnd | None:
    return None if end is None else context.with_reports(end)


def _found_as(kind: type[PayloadError], error: PayloadError) -> PayloadError:
    """`error` as the step it was found in (`kind`), with its message and traceback."""
    return kind(str(error)).with_traceback(error.__traceback__)


class _Escaped(Exception):
    """A KeyboardInterrupt or SystemExit an async handler raised, carried out of its task as an
    Exception: asyncio raises those two on out of the event loop, which would stop the worker."""

    def __init__(self, error: BaseException):
        super().__init__(error)
        self.error = error


@contextlib.contextmanager
def _attempt_context(attempt: ClaimedAttempt) -> Iterator[None]:
    """What the handler logs, and the worker logs of its end, name the job (leased.logs); what it
    traces nests under its attempt's span, which starts here (leased.tracing; attempts.py ends it)."""
    worker_id = attempt.context.worker_id
    attempt.span = tracing.start_attempt(attempt.job, worker_id)
    attempt.context.trace_context = tracing.trace_context_of(attempt.span)
    with logs.about(**logs.job_fields(attempt.job, worker_id=worker_id)), tracing.current(attempt.span):
        yield


def _has_parents_to_link(attempt: ClaimedAttempt) -> bool:
    return attempt.span is not None and attempt.job.workflow_id is not None


def _link_parents(attempt: ClaimedAttempt) -> None:
    """A traced workflow step's attempt links to each parent's last attempt (a fan-in's to every
    one): one read of its parents, as its handler's own (context.parents). A read that fails is the
    trace's loss, never the attempt's."""
    if not _has_parents_to_link(attempt):
        return
    try:
        with worker_calls(mine=False):
            parents = attempt.context.parents.values()
    except Exception as error:
        log.debug("job %d: its parents' attempts are not linked (%s)", attempt.job.id, one_line(error))
        return
    tracing.link_parents(attempt.span, parents)


async def _parents_linked_first(attempt: ClaimedAttempt, handler_call: Any) -> Any:
    """An async handler's call, after its attempt's links to its parents, read off the loop."""
    try:
        await asyncio.to_thread(_link_parents, attempt)
    except BaseException:
        handler_call.close()  # never started: closed, not left to warn that it was never awaited
        raise
    return await handler_call


# A handler's own calls (an enqueue, a step) are not the worker's: they take the app's connections,
# not the few the worker's loops share (leased.backends.worker_calls).
def _as_handler(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with worker_calls(mine=False):
        return func(*args, **kwargs)


async def _as_handler_async(handler_call: Any) -> Any:
    with worker_calls(mine=False):
        return await handler_call


async def _contained(handler_call: Any) -> Any:
    try:
        return await handler_call
    except (KeyboardInterrupt, SystemExit) as error:
        raise _Escaped(error) from None


def error_end(job: ClaimedJob, error: BaseException, *, retry: bool, backoff: Backoff | None = None) -> AttemptEnd:
    return failed_end(job, Outcome.ERROR, type(error).__name__, message_of(error),
                      traceback_of(error, _handler_frames(error)), retry=retry, backoff=backoff)


def crashed_end(job: ClaimedJob, message: str, backoff: Backoff | None) -> AttemptEnd:
    """An attempt whose process died: retried by the job's policy, unless this crash is its
    max_crashes-th, which quarantines it (fails it as a poison job, not retried). The finish adds
    the crash to the job's count (outcome crashed)."""
    crashes = job.crashes + 1
    if crashes >= job.max_crashes:
        return failed_end(job, Outcome.CRASHED, "ChildProcessDied", quarantined_error(crashes, message), None,
                          retry=False)
    return failed_end(job, Outcome.CRASHED, "ChildProcessDied", message, None,
                      retry=job.attempt < job.max_attempts, backoff=backoff)


def failed_end(job: ClaimedJob, outcome: Outcome, error_type: str, message: str, traceback_text: str | None, *,
               retry: bool, backoff: Backoff | None = None) -> AttemptEnd:
    """An attempt that failed (`outcome` error or crashed), retried after the backoff or not."""
    delay = backoff.delay(job.attempt) if retry else None
    message = clean_text(message, MAX_ERROR_MESSAGE)
    # The handler's own words, bound for whatever log handler the application set up: a terminal's
    # controls in them are written out rather than obeyed (the stored message keeps them).
    shown = printable(one_line(message))
    if retry:
        log.warning("job %d (%s) attempt %d/%d failed: %s: %s; retrying in %.1fs", job.id, job.task_name,
                    job.attempt, job.max_attempts, error_type, shown, delay,
                    extra=logs.extra(job, outcome=outcome.value, error_type=error_type, retry_in_seconds=delay))
    else:
        log.error("job %d (%s) attempt %d/%d failed for good: %s: %s", job.id, job.task_name,
                  job.attempt, job.max_attempts, error_type, shown,
                  extra=logs.extra(job, outcome=outcome.value, error_type=error_type))
    return AttemptEnd(job.lease, outcome, error_type=error_type, error_message=message,
                      traceback=None if traceback_text is None else clean_text(traceback_text, MAX_TRACEBACK),
                      retry_in_seconds=delay, workflow_id=job.workflow_id)


def _handler_frames(error: BaseException):
    """The traceback from the handler's own frames on: the worker's machinery above it is noise."""
    frames = error.__traceback__
    while frames is not None and frames.tb_next is not None and \
            frames.tb_frame.f_code.co_filename.startswith(_ENGINE_FOLDER):
        frames = frames.tb_next
    return frames


_ENGINE_FOLDER = os.path.dirname(os.path.abspath(__file__))
