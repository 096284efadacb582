"""Structured logs (leased.logs): every line the worker writes about a job, and every line a handler
logs while it runs, carries the job's fields; JsonFormatter writes them one object per line, with the
trace's ids when a span is active. Logging does not depend on the database: SQLite is enough."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

from leased import Backoff, Leased
from leased.logs import JobFields, JsonFormatter

handler_log = logging.getLogger("myapp.handlers")


@pytest.fixture
def log_lines():
    """The JSON lines logged at INFO and above while the test runs, parsed."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def sqlite_app(tmp_path):
    app = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield app
    app.close()


def test_a_handlers_own_lines_and_the_workers_lines_about_its_job_name_the_job(sqlite_app, log_lines):
    @sqlite_app.task(name="charge", queue_name="billing", max_attempts=2, backoff=Backoff(base=0.0, jitter=0.0))
    def charge(order: str) -> None:
        handler_log.info("charging %s", order)
        if charge_attempts.append(order) or len(charge_attempts) == 1:
            raise ValueError("card declined")

    charge_attempts: list[str] = []
    job = charge.enqueue("o-1")
    stats = sqlite_app.run_until_empty()
    assert stats.done == 1
    lines = log_lines()
    fields = {"job_id": job.id, "task": "charge", "queue": "billing", "max_attempts": 2}
    mine = [line for line in lines if line["logger"] == "myapp.handlers"]
    assert [line["message"] for line in mine] == ["charging o-1", "charging o-1"]
    assert [line["attempt"] for line in mine] == [1, 2]
    assert all(line.items() >= fields.items() for line in mine), mine
    worker_ids = {line["worker_id"] for line in lines}
    assert len(worker_ids) == 1  # every line, the worker's own included, names the one worker
    failed = [line for line in lines if line["level"] == "warning"]
    assert len(failed) == 1 and failed[0].items() >= {**fields, "attempt": 1, "outcome": "error",
                                                       "error_type": "ValueError"}.items(), failed
    started = next(line for line in lines if " started on " in line["message"])
    assert "job_id" not in started  # a line about no job names none


def test_an_async_handlers_lines_name_its_job(sqlite_app, log_lines):
    @sqlite_app.task(name="notify")
    async def notify(user: str) -> None:
        await asyncio.sleep(0)
        handler_log.info("notifying %s", user)

    jobs = [notify.enqueue(f"u-{n}") for n in range(3)]
    sqlite_app.run_until_empty(concurrency=3)
    mine = {line["message"]: line["job_id"] for line in log_lines() if line["logger"] == "myapp.handlers"}
    assert mine == {f"notifying u-{n}": job.id for n, job in enumerate(jobs)}


def test_a_line_written_inside_a_span_carries_the_traces_ids(sqlite_app, log_lines):
    tracer = TracerProvider().get_tracer("test")  # no global provider set: the context alone carries it
    seen: dict[str, str] = {}

    @sqlite_app.task(name="traced")
    def traced() -> None:
        with tracer.start_as_current_span("inside") as span:
            context = span.get_span_context()
            seen.update(trace_id=format(context.trace_id, "032x"), span_id=format(context.span_id, "016x"))
            handler_log.info("in a span")
        handler_log.info("outside it")

    traced.enqueue()
    sqlite_app.run_until_empty()
    inside, outside = [line for line in log_lines() if line["logger"] == "myapp.handlers"]
    assert inside["trace_id"] == seen["trace_id"] and inside["span_id"] == seen["span_id"]
    assert "trace_id" not in outside


def test_a_line_is_one_line_of_ascii_whatever_it_carries(log_lines):
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    evil = "\x1b[2J\u202eevil\nsecond line \udcff"
    try:
        raise ValueError(evil)
    except ValueError:
        handler_log.exception("failed: %s", evil, extra={"order": Unprintable(), "note": evil})
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed: %s", (evil,), None)
    record.order = Unprintable()
    handler.emit(record)
    text = stream.getvalue()
    assert text.isascii() and text.count("\n") == 1, text
    [line] = [line for line in log_lines() if line["logger"] == "myapp.handlers"]
    assert line["message"] == f"failed: {evil}" and line["note"] == evil
    assert line["order"] == "<unprintable Unprintable>"
    assert line["exception"].startswith("Traceback") and "ValueError" in line["exception"]


def test_a_formatter_of_your_own_reads_the_fields_through_the_filter(sqlite_app):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(JobFields())
    handler.setFormatter(logging.Formatter("%(leased)s %(message)s", defaults={"leased": {}}))
    handler_log.addHandler(handler)
    try:
        @sqlite_app.task(name="plain")
        def plain() -> None:
            handler_log.warning("hello")

        job = plain.enqueue()
        sqlite_app.run_until_empty()
    finally:
        handler_log.removeHandler(handler)
    fields, message = stream.getvalue().rsplit(" ", 1)
    assert message == "hello\n" and eval(fields).items() >= {"job_id": job.id, "task": "plain"}.items(), fields
