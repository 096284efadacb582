"""OpenTelemetry traces, when the application uses OpenTelemetry, following its messaging conventions.

Nothing here imports OpenTelemetry. An application that traces has imported it (its SDK set-up, or
`opentelemetry-instrument`), so each function looks for `opentelemetry.trace` among the loaded
modules and does nothing without it: leased without OpenTelemetry writes a null and pays a dict
lookup.

The trace travels with the job: an enqueue made while a span is active records that span's W3C trace
context (`traceparent`, `tracestate`) on the job's row, under a `send <queue>` span of its own when the
enqueue is leased's (Task.enqueue, enqueue_many, aenqueue). A worker runs each attempt of such a job in
a `process <queue>` span: the first attempt as a child of the enqueue, so that a request and the job
it made read as one trace; each retry as a new trace linked to the enqueue, so that a job retried
hours later neither stretches the request's trace across its backoff nor inherits its sampling
(as awa and the messaging conventions do). Whatever the handler traces (an HTTP client, a database
driver, a durable step) nests under its attempt, in a process-isolated child too. What only leased
knows is recorded on the attempt's span as events: cancelled (a lost lease, a user, the time limit,
the shutdown), a result refused by the fence, a child process that crashed, a lease renewal that
landed late.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
from typing import Any, ContextManager, Iterable, Iterator, Sequence

SYSTEM = "leased"


def _trace() -> Any:
    """opentelemetry.trace if the application has imported it, else None."""
    return sys.modules.get("opentelemetry.trace")


_tracers: dict[Any, Any] = {}


def _active(trace: Any) -> bool:
    """Whether OpenTelemetry is in use and a span is active in this thread or task."""
    return trace is not None and trace.get_current_span().get_span_context().is_valid


@functools.cache
def _context() -> Any:
    """opentelemetry.context, imported once it is needed: an import statement costs a microsecond
    a call, and an attempt would pay it twice."""
    from opentelemetry import context

    return context


def _tracer(trace: Any) -> Any:
    """leased's tracer, one per tracer provider: getting one costs as much as the attempt's span."""
    provider = trace.get_tracer_provider()
    tracer = _tracers.get(provider)
    if tracer is None:
        tracer = _tracers[provider] = trace.get_tracer("leased")
    return tracer


def current_trace_context() -> str | None:
    """The active span's W3C trace context as a job row keeps it (JSON of the `traceparent` and
    `tracestate` headers), or None when no span is active (or OpenTelemetry is not in use)."""
    trace = _trace()
    if trace is None:
        return None
    return _w3c(trace.get_current_span().get_span_context())


def trace_context_of(span: Any) -> str | None:
    """A span's W3C trace context as current_trace_context() writes it; None for no span."""
    return None if span is None else _w3c(span.get_span_context())


def _w3c(span_context: Any) -> str | None:
    if not span_context.is_valid:
        return None
    # What the W3C propagator's inject() writes, written here: it costs a tenth of an enqueue.
    traceparent = f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"
    if not span_context.trace_state:
        return f'{{"traceparent":"{traceparent}"}}'
    return json.dumps({"traceparent": traceparent, "tracestate": span_context.trace_state.to_header()},
                      separators=(",", ":"))


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# A row as current_trace_context() writes it without a tracestate: read without parsing JSON.
_TRACEPARENT_ONLY = re.compile(r'\{"traceparent":"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})"\}')


def _traceparent(trace_context: str) -> tuple[re.Match[str], str | None] | None:
    """The `traceparent` a job row's trace context holds (its trace id, span id and flags), with its
    `tracestate`, or None if it holds none (a row written by hand: a bad value is the trace's loss,
    never the job's). Read here rather than by the W3C propagator, which costs a tenth of a no-op
    job: leased wrote the value, version 00."""
    found = _TRACEPARENT_ONLY.fullmatch(trace_context)
    if found is not None:
        return found, None
    try:
        carrier = json.loads(trace_context)
        found = _TRACEPARENT.fullmatch(carrier.get("traceparent", ""))
        state = carrier.get("tracestate")
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    return None if found is None else (found, state if isinstance(state, str) else None)


def trace_id(trace_context: str | None) -> str | None:
    """The trace id (32 hex digits) of a job row's trace context, or None; imports no OpenTelemetry."""
    found = _traceparent(trace_context) if trace_context is not None else None
    return None if found is None or int(found[0][1], 16) == 0 else found[0][1]


def _extracted(trace_context: str) -> Any:
    """The span context a job row's trace context names, or None if it names none."""
    trace = _trace()
    parsed = _traceparent(trace_context)
    if parsed is None:
        return None
    found, state = parsed
    span_context = trace.SpanContext(int(found[1], 16), int(found[2], 16), is_remote=True,
                                     trace_flags=trace.TraceFlags(int(found[3], 16)),
                                     trace_state=trace.TraceState.from_header([state]) if state else None)
    return span_context if span_context.is_valid else None


@contextlib.contextmanager
def sending(destination: str, task_name: str | None, count: int) -> Iterator[Any]:
    """A `send <destination>` producer span around an enqueue of `count` jobs (to a queue, or a
    workflow's steps), current while it runs so that the jobs record it, when a span is active;
    yields it, or None. `sent(span, jobs)` names the job."""
    trace = _trace()
    if not _active(trace):
        yield None
        return
    attributes: dict[str, str | int] = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                                        "messaging.operation.name": "send", "messaging.destination.name": destination}
    if task_name is not None:
        attributes["leased.task"] = task_name
    if count != 1:
        attributes["messaging.batch.message_count"] = count
    with _tracer(trace).start_as_current_span(f"send {destination}", kind=trace.SpanKind.PRODUCER,
                                              attributes=attributes) as span:
        yield span


def sent(span: Any, jobs: Sequence[Any]) -> None:
    """The jobs a send span wrote: the message id when it wrote one."""
    if span is not None and len(jobs) == 1:
        span.set_attribute("messaging.message.id", str(jobs[0].id))


def start_attempt(job: Any, worker_id: str) -> Any:
    """The `process <queue>` span of a claimed job's attempt (not yet current), or None when its
    enqueue was not traced: the first attempt a child of the enqueue, a retry a new trace linked to it."""
    trace = _trace()
    trace_context = getattr(job, "trace_context", None)
    if trace is None or trace_context is None:
        return None
    parent = _extracted(trace_context)
    if parent is None:
        return None
    attributes: dict[str, str | int | float] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": job.queue_name, "messaging.message.id": str(job.id),
        "leased.task": job.task_name, "leased.attempt": job.attempt, "leased.max_attempts": job.max_attempts,
        "leased.worker_id": worker_id}
    # Messaging's conventions name no time spent waiting in the queue: leased's own, from due (not
    # enqueued: a delayed job or a retry's backoff is not waiting) to start, by the database's clock.
    queued = job.queued_seconds()
    if queued is not None:
        attributes["leased.queued_seconds"] = queued
    # From an empty context, as a retry's always was: the thread's or task's own is the worker's, not the job's.
    if job.attempt == 1:
        return _tracer(trace).start_span(f"process {job.queue_name}", context=trace.set_span_in_context(
            trace.NonRecordingSpan(parent), _context().Context()), kind=trace.SpanKind.CONSUMER, attributes=attributes)
    return _tracer(trace).start_span(f"process {job.queue_name}", context=_context().Context(),
                                     kind=trace.SpanKind.CONSUMER, attributes=attributes, links=[trace.Link(parent)])


def link_parents(span: Any, parents: Iterable[Any]) -> None:
    """Links from a workflow step's attempt span to each traced parent's last attempt (ParentEnd's
    trace_context), named by the parent step: a fan-in step links to every one."""
    if span is None or not span.is_recording():
        return
    for parent in parents:
        span_context = _extracted(parent.trace_context) if parent.trace_context is not None else None
        if span_context is not None:
            span.add_link(span_context, {"leased.step.parent": parent.name})


def current(span: Any) -> ContextManager[None]:
    """`span` is the current span in this thread or task (and what it starts) until exit."""
    return _NOTHING if span is None else _Current(span)


_NOTHING = contextlib.nullcontext()


class _Current:
    """current()'s context manager: a class rather than a generator, as it runs once per attempt."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any):
        self.span = span

    def __enter__(self) -> None:
        self.token = _context().attach(_trace().set_span_in_context(self.span))

    def __exit__(self, *exception: object) -> None:
        _context().detach(self.token)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """A durable step that runs: a child span of the attempt's, current while it runs."""
    trace = _trace()
    if not _active(trace):
        yield
        return
    with _tracer(trace).start_as_current_span(f"step {name}", attributes={"leased.step": name,
                                                                          "leased.step.replayed": False}):
        yield


def replayed_step(name: str) -> None:
    """A durable step an earlier attempt recorded, whose result is reused: a span of no length, so
    that the attempt's trace still shows every step in order."""
    trace = _trace()
    if _active(trace):
        _tracer(trace).start_span(f"step {name}", attributes={"leased.step": name,
                                                              "leased.step.replayed": True}).end()


@contextlib.contextmanager
def continued(trace_context: str | None) -> Iterator[None]:
    """In another process (a process-isolated handler's child): the spans started until exit are
    children of the span `trace_context` names."""
    parent = _extracted(trace_context) if trace_context is not None and _trace() is not None else None
    if parent is None:
        yield
        return
    from opentelemetry import context

    token = context.attach(_trace().set_span_in_context(_trace().NonRecordingSpan(parent)))
    try:
        yield
    finally:
        context.detach(token)


def event(span: Any, name: str, **attributes: Any) -> None:
    """An event on an attempt's span while it is open (an ended span takes none, and says so)."""
    if span is not None and span.is_recording():
        span.add_event(f"leased.{name}", {key: value for key, value in attributes.items() if value is not None})


def failed(span: Any, error: BaseException) -> None:
    """The handler's exception, on its attempt's span."""
    if span is not None and span.is_recording():
        try:
            span.record_exception(error)
        except Exception:  # an exception that cannot be printed (see engine/error_text.py) is the trace's loss
            span.add_event("exception", {"exception.type": type(error).__name__})


FAILED_OUTCOMES = frozenset({"error", "timeout", "crashed", "expired"})


def end_attempt(span: Any, outcome: str | None, will_retry: bool) -> None:
    """End an attempt's span with how it ended (None: not recorded by this worker, e.g. a lost lease
    whose end another writes)."""
    if span is None or not span.is_recording():
        return
    # One at a time: set_attributes({...}) cleans the mapping before its values, a microsecond more.
    span.set_attribute("leased.outcome", outcome or "abandoned")
    span.set_attribute("leased.will_retry", will_retry)
    if outcome in FAILED_OUTCOMES:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end()
