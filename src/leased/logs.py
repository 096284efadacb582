"""Log records that say which job they are about, and a formatter that writes them as JSON lines.

Every line the worker writes about a job (a failure, a retry, a lease lost, `--log-jobs`) carries
the job's fields as `record.leased`, and so does every line a handler logs while it runs, whatever
logger it uses: the worker sets them for the handler's thread or task (`about`). A log shipper
then filters by job id, task or attempt instead of parsing sentences, and with OpenTelemetry active
each line also carries the trace and span it was written in, which joins the log to the trace.

`leased worker --log-format json` installs JsonFormatter; an application that configures logging
itself names it in its config (`"()": "leased.logs.JsonFormatter"`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import sys
from contextvars import ContextVar
from typing import Any, Iterator

# The fields of the worker and the job this thread or task works for (None: it works for none).
_current: ContextVar[dict[str, Any] | None] = ContextVar("leased_log_fields", default=None)

# Attributes every LogRecord has: anything else on a record came from `extra=` and is written out.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def job_fields(job: Any, **more: Any) -> dict[str, Any]:
    """The fields naming a claimed job's attempt (a ClaimedJob, or anything with its attributes),
    plus `more` (worker_id, outcome, duration_seconds, ...)."""
    return {"job_id": job.id, "task": job.task_name, "queue": job.queue_name, "attempt": job.attempt,
            "max_attempts": job.max_attempts, **more}


def extra(job: Any, **more: Any) -> dict[str, Any]:
    """`extra=` for a log call about `job`: its fields over those of the context (the worker's id)."""
    return {"leased": {**(_current.get() or {}), **job_fields(job, **more)}}


@contextlib.contextmanager
def about(**fields: Any) -> Iterator[None]:
    """Records logged in this thread or task, and in the tasks and `asyncio.to_thread` calls it
    starts, carry `fields` (over the context's own) until exit: the worker names itself for all it
    logs, and each handler's thread or task names its job."""
    token = _current.set({**(_current.get() or {}), **fields})
    try:
        yield
    finally:
        _current.reset(token)


def fields_of(record: logging.LogRecord) -> dict[str, Any] | None:
    """The job fields a record carries: its own (`extra`), else those of the handler that logged it."""
    return getattr(record, "leased", None) or _current.get()


class JobFields(logging.Filter):
    """For a formatter of your own: puts the fields of the job a line is about on the record as
    `record.leased` (a dict), where the call did not pass them. Add it to a handler, not a logger:
    a logger's filters do not see its children's records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "leased", None) is None and (fields := _current.get()):
            record.leased = fields
        return True


def _trace_ids() -> dict[str, str]:
    """The active span's ids, when OpenTelemetry is in use: looked up only if the application has
    imported it, so that a worker without it pays nothing."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return {}
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the job's fields
    (job_id, task, queue, attempt, max_attempts, worker_id, outcome, duration_seconds where known),
    the trace and span ids while a trace is active, any other `extra=` the call passed, and the
    exception's traceback as `exception`. Everything past ASCII is escaped, so no byte of a
    handler's text can steer a terminal or split a line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(fields_of(record) or {})
        line.update(_trace_ids())
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRIBUTES and name != "leased" and name not in line:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # default=str: a value passed in `extra` that JSON cannot hold is written as its text rather
        # than losing the line (a log call must never raise into the worker).
        return json.dumps(line, default=_as_text)


def _as_text(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # an object whose __str__ raises (see engine/error_text.py)
        return f"<unprintable {type(value).__name__}>"
