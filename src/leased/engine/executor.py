"""The executor: runs one attempt of a claimed job (its handler, once) and says how it ended.

It calls the handler with its TaskContext, on the event loop if it is async and on a reused
thread if not, arms the job's time limit, and turns what the handler did into the attempt's end:
a result, an error to retry or not, or nothing when the attempt was cancelled (its cause decides
what is recorded, see engine/attempts.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from leased.backends.base import AttemptEnd
from leased.backoff import Backoff
from leased.engine.context import JobCancelled, TaskContext
from leased.engine.retrying import one_line
from leased.engine.threads import HandlerThreads
from leased.engine.timelimits import TimeLimits
from leased.errors import PayloadError, PermanentError
from leased.jobs import Job, Outcome
from leased.payloads import clean_text, encode_result

log = logging.getLogger("leased.worker")

MAX_ERROR_MESSAGE = 4_000
MAX_TRACEBACK = 32_000


class Handler(Protocol):
    """What the engine needs of a task (leased.tasks.Task is one): a function and how to call it."""

    func: Callable[..., Any]
    takes_context: bool
    is_async: bool
    backoff: Backoff

    def check_arguments(self, args: tuple | list, kwargs: dict[str, Any]) -> None: ...

    def handler_arguments(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]: ...


@dataclass
class Attempt:
    """One claimed attempt, from its claim until its end is written or its lease given back."""

    job: Job
    context: TaskContext
    handler: asyncio.Future | None = None
    execution: asyncio.Task | None = field(default=None, repr=False)
    finishing: bool = False  # its end is being written: that fenced write, not a renewal, tells if it held
    thread: Future | None = field(default=None, repr=False)  # a sync handler's, until it returns
    time_limit: asyncio.TimerHandle | None = field(default=None, repr=False)

    lapse_cause: str | None = None  # why this worker let the lease lapse, when it knows (e.g. a write lock)


class Executor:
    def __init__(self, handlers: Mapping[str, Handler], threads: HandlerThreads, time_limits: TimeLimits,
                 max_payload_bytes: int):
        self.handlers = handlers
        self.threads = threads
        self.time_limits = time_limits
        self.max_payload_bytes = max_payload_bytes

    async def run(self, attempt: Attempt) -> AttemptEnd | None:
        """Run the handler once. None means it was cancelled and nothing is to be written."""
        job, context = attempt.job, attempt.context
        task = self.handlers[job.task_name]
        leading = (context,) if task.takes_context else ()
        try:
            task.check_arguments(job.args, job.kwargs)
            args, kwargs = task.handler_arguments(job.args, job.kwargs)  # typed parameters decoded
        except PayloadError as error:
            return error_end(job, error, retry=False)
        try:
            if task.is_async:
                attempt.handler = asyncio.ensure_future(task.func(*leading, *args, **kwargs))
            else:
                attempt.thread = self.threads.submit(task.func, (*leading, *args), kwargs)
                attempt.handler = asyncio.wrap_future(attempt.thread)
            attempt.time_limit = self.time_limits.arm(job)
            if context.is_cancelled:
                attempt.handler.cancel()
            result = await attempt.handler
        except asyncio.CancelledError:
            if context.is_cancelled:
                return None
            raise
        except JobCancelled:
            return None
        except PermanentError as error:
            return error_end(job, error, retry=False)
        except (Exception, SystemExit) as error:
            return error_end(job, error, retry=job.attempt < job.max_attempts, backoff=task.backoff)
        if context.is_cancelled:
            return None
        try:
            result_json = encode_result(result, self.max_payload_bytes)
        except PayloadError as error:
            return error_end(job, error, retry=False)
        log.debug("job %d (%s) attempt %d done", job.id, job.task_name, job.attempt)
        return AttemptEnd(job.lease, Outcome.DONE, result_json=result_json)


def error_end(job: Job, error: BaseException, *, retry: bool, backoff: Backoff | None = None) -> AttemptEnd:
    delay = backoff.delay(job.attempt) if retry else None
    message = clean_text(str(error), MAX_ERROR_MESSAGE)
    if retry:
        log.warning("job %d (%s) attempt %d/%d failed: %s: %s; retrying in %.1fs", job.id, job.task_name,
                    job.attempt, job.max_attempts, type(error).__name__, one_line(message), delay)
    else:
        log.error("job %d (%s) attempt %d/%d failed for good: %s: %s", job.id, job.task_name,
                  job.attempt, job.max_attempts, type(error).__name__, one_line(message))
    return AttemptEnd(
        job.lease, Outcome.ERROR, error_type=type(error).__name__, error_message=message,
        traceback=clean_text("".join(traceback.format_exception(type(error), error, _handler_frames(error))),
                             MAX_TRACEBACK),
        retry_in_seconds=delay,
    )


def _handler_frames(error: BaseException):
    """The traceback from the handler's own frames on: the worker's machinery above it is noise."""
    frames = error.__traceback__
    while frames is not None and frames.tb_next is not None and \
            frames.tb_frame.f_code.co_filename.startswith(_ENGINE_FOLDER):
        frames = frames.tb_next
    return frames


_ENGINE_FOLDER = os.path.dirname(os.path.abspath(__file__))
