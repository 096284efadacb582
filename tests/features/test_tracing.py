"""OpenTelemetry traces (leased.tracing), with the SDK's in-memory exporter, on every database: the
trace context travels on the job's row, so what is checked here is what each database stored and
gave back to the worker's claim."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                       ExportTraceServiceResponse)
from opentelemetry.trace import SpanKind, StatusCode

import traced_handlers
from conftest import callers_connection, raw_scalar, raw_sql, running_worker, wait_for
from leased import Backoff, DatabaseUnavailable
from leased.cli.main import cli
from paths import pythonpath

EXPORTED = InMemorySpanExporter()
# One provider for the test process (OpenTelemetry takes the first set and ignores the rest).
if not isinstance(trace.get_tracer_provider(), TracerProvider):
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(EXPORTED))
    trace.set_tracer_provider(_provider)
else:
    trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(EXPORTED))
request_tracer = trace.get_tracer("shop.web")
handler_tracer = trace.get_tracer("shop.handlers")


@pytest.fixture(autouse=True)
def spans():
    EXPORTED.clear()
    yield lambda: list(EXPORTED.get_finished_spans())
    EXPORTED.clear()


def named(spans, name: str) -> list:
    return [span for span in spans if span.name == name]


def test_a_traced_request_continues_into_the_jobs_first_attempt(app, spans):
    @app.task(name="receipt", queue_name="mail")
    def receipt(order: str) -> None:
        with handler_tracer.start_as_current_span("render receipt"):
            pass

    with request_tracer.start_as_current_span("POST /orders") as request:
        connection = callers_connection(app)
        try:
            job = receipt.using(connection=connection).enqueue("o-1")  # in the request's own transaction
            connection.commit()
        finally:
            connection.close()
    stored = json.loads(raw_scalar(app, f"SELECT trace_context FROM leased_jobs WHERE id = {job.id}"))
    assert stored["traceparent"].split("-")[1] == format(request.get_span_context().trace_id, "032x")
    app.run_until_empty()

    [send] = named(spans(), "send mail")
    [process] = named(spans(), "process mail")
    [inner] = named(spans(), "render receipt")
    trace_id = request.get_span_context().trace_id
    assert send.context.trace_id == process.context.trace_id == inner.context.trace_id == trace_id
    assert send.parent.span_id == request.get_span_context().span_id and send.kind is SpanKind.PRODUCER
    assert process.parent.span_id == send.context.span_id and process.kind is SpanKind.CONSUMER
    assert inner.parent.span_id == process.context.span_id  # the handler's own spans nest under its attempt
    assert send.attributes["messaging.message.id"] == str(job.id)
    assert process.attributes["messaging.system"] == "leased"
    assert process.attributes["messaging.destination.name"] == "mail"
    assert process.attributes["messaging.message.id"] == str(job.id)
    assert process.attributes["leased.task"] == "receipt" and process.attributes["leased.attempt"] == 1
    assert process.attributes["leased.outcome"] == "done" and process.attributes["leased.will_retry"] is False
    assert process.status.status_code is not StatusCode.ERROR


def test_a_retry_is_a_new_trace_linked_to_the_enqueue_and_each_says_its_wait(app, spans):
    tries: list[int] = []

    @app.task(name="flaky", max_attempts=2, backoff=Backoff(base=0.0, jitter=0.0))
    def flaky() -> None:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("relay down")

    with request_tracer.start_as_current_span("nightly import"):
        flaky.using(run_after=datetime.now(UTC) - timedelta(hours=1)).enqueue()  # due an hour ago
    app.run_until_empty()
    [send] = named(spans(), "send default")
    first, second = sorted(named(spans(), "process default"), key=lambda span: span.attributes["leased.attempt"])
    assert first.parent.span_id == send.context.span_id
    assert first.status.status_code is StatusCode.ERROR and first.attributes["leased.will_retry"] is True
    assert [event.attributes["exception.type"] for event in first.events if event.name == "exception"] == \
        ["ConnectionError"]
    assert second.parent is None and second.context.trace_id != send.context.trace_id
    assert [link.context.span_id for link in second.links] == [send.context.span_id]
    assert second.attributes["leased.attempt"] == 2 and second.attributes["leased.outcome"] == "done"
    # From due to start by the database's clock: the enqueue's run_after, then the retry's (no backoff).
    assert 3600 <= first.attributes["leased.queued_seconds"] < 3600 + 60
    assert 0 <= second.attributes["leased.queued_seconds"] < 60


def test_an_untraced_enqueue_exports_nothing_and_stores_no_context(app, spans):
    @app.task(name="quiet")
    def quiet() -> None:
        with handler_tracer.start_as_current_span("inside"):
            pass

    job = quiet.enqueue()
    jobs = quiet.enqueue_many([()] * 3)
    assert raw_scalar(app, "SELECT count(*) FROM leased_jobs WHERE trace_context IS NOT NULL") == 0
    app.run_until_empty()
    assert [span.name for span in spans()] == ["inside"] * 4  # the handler's own, as roots: none of leased's
    assert [span.parent for span in spans()] == [None] * 4
    assert raw_scalar(app, "SELECT count(*) FROM leased_attempts WHERE trace_context IS NOT NULL") == 0
    assert {app.get_job(one.id).status for one in [job, *jobs]} == {"done"}


def test_a_batch_enqueue_is_one_send_span_that_every_attempt_continues(app, spans):
    @app.task(name="resize")
    def resize(n: int) -> None:
        pass

    with request_tracer.start_as_current_span("upload album"):
        resize.enqueue_many([(n,) for n in range(5)])
    app.run_until_empty()
    [send] = named(spans(), "send default")
    assert send.attributes["messaging.batch.message_count"] == 5
    processed = named(spans(), "process default")
    assert len(processed) == 5 and {span.parent.span_id for span in processed} == {send.context.span_id}


def test_a_lost_lease_and_a_users_cancel_leave_their_events_on_the_attempt(app, spans):
    started, release = threading.Event(), threading.Event()

    @app.task(name="hold", takes_context=True, lease=2.0, max_attempts=1)
    def hold(context) -> None:
        started.set()
        context.cancelled.wait(30)
        release.wait(30)

    with request_tracer.start_as_current_span("request"):
        stolen = hold.enqueue()
    with running_worker(app, concurrency=1):
        wait_for(started.is_set, message="the handler to start")
        # Another writer takes the job's lease behind the worker's back: its next renewal finds it gone.
        raw_sql(app, f"UPDATE leased_jobs SET lease_owner = 'someone-else' WHERE id = {stolen.id}")
        wait_for(lambda: named(spans(), "process default"), message="the attempt's span to end")
        release.set()
    [process] = named(spans(), "process default")
    cancelled = [event for event in process.events if event.name == "leased.cancelled"]
    assert [event.attributes["reason"] for event in cancelled] == ["lease lost"], process.events
    assert process.attributes["leased.outcome"] == "lease_lost"


class FirstRenewalFails:
    """The real backend, except that the first renewal finds the database out of reach."""

    def __init__(self, backend):
        self._backend = backend
        self.renewals = 0

    def renew(self, leases, wait_seconds=None, progress=None):
        self.renewals += 1
        if self.renewals == 1:
            raise DatabaseUnavailable("connection refused (injected)")
        return self._backend.renew(leases, wait_seconds=wait_seconds, progress=progress)

    def __getattr__(self, name):
        return getattr(self._backend, name)


def test_a_renewal_that_lands_late_leaves_its_event_on_the_attempt(app, spans):
    app._backend = FirstRenewalFails(app.backend)

    @app.task(name="hold", takes_context=True, lease=3.0, max_attempts=1)
    def hold(context) -> None:
        attempt = trace.get_current_span()  # its events so far, read while it is open
        wait_for(lambda: [event for event in attempt.events if event.name == "leased.lease_renewed_late"],
                 message="a failed renewal, then one that went through")

    with request_tracer.start_as_current_span("request"):
        job = hold.enqueue()
    with running_worker(app, concurrency=1):
        wait_for(lambda: named(spans(), "process default"), message="the attempt's span to end")
    [process] = named(spans(), "process default")
    [late] = [event for event in process.events if event.name == "leased.lease_renewed_late"]
    assert late.attributes["cause"] == "connection refused (injected)"
    assert 0 < late.attributes["waited_seconds"] < late.attributes["lease_left_seconds"] + late.attributes[
        "waited_seconds"] <= 3.0
    assert process.attributes["leased.outcome"] == "done" and app.get_job(job.id).status == "done"


def test_durable_steps_are_child_spans_and_a_replayed_one_says_so(app, spans):
    attempts: list[int] = []

    @app.task(name="checkout", takes_context=True, max_attempts=2, backoff=Backoff(base=0.0, jitter=0.0))
    def checkout(context) -> None:
        attempts.append(context.attempt)
        context.step("charge", lambda: "ch_1")
        if context.attempt == 1:
            raise TimeoutError("the shipping API timed out")
        context.step("ship", lambda: "sh_1")

    with request_tracer.start_as_current_span("checkout"):
        checkout.enqueue()
    app.run_until_empty()
    first, second = sorted(named(spans(), "process default"), key=lambda span: span.attributes["leased.attempt"])
    steps = {(span.parent.span_id, span.name, span.attributes["leased.step.replayed"])
             for span in spans() if span.name.startswith("step ")}
    assert steps == {(first.context.span_id, "step charge", False), (second.context.span_id, "step charge", True),
                     (second.context.span_id, "step ship", False)}


def test_a_process_isolated_handlers_spans_nest_under_its_attempt(app, spans, tmp_path, monkeypatch):
    exported = tmp_path / "child-spans.jsonl"
    monkeypatch.setenv("TRACED_SPANS", str(exported))  # the child inherits it, and exports there
    render = app.task(name="render", isolation="process")(traced_handlers.render)
    with request_tracer.start_as_current_span("request"):
        job = render.enqueue(21)
    app.run_until_empty()
    assert app.get_job(job.id).result == 42
    [process] = named(spans(), "process default")
    [child_span] = [json.loads(line) for line in exported.read_text().splitlines()]
    assert child_span["name"] == "render page"
    assert child_span["trace_id"] == format(process.context.trace_id, "032x")
    assert child_span["parent_id"] == format(process.context.span_id, "016x")


def test_a_row_whose_trace_context_is_not_a_trace_runs_untraced(app, spans):
    @app.task(name="plain")
    def plain() -> None:
        pass

    jobs = [plain.enqueue() for _ in range(3)]
    for job, value in zip(jobs, ["not json", '{"traceparent": "00-zz-yy-01"}', "[1, 2]"], strict=True):
        raw_sql(app, f"UPDATE leased_jobs SET trace_context = '{value}' WHERE id = {job.id}")
    app.run_until_empty()
    assert {app.get_job(job.id).status for job in jobs} == {"done"}
    assert spans() == []


def test_a_tracestate_travels_with_the_job(app, spans):
    """A vendor's tracestate (here with a quote, which the row's JSON must escape) reaches the attempt."""
    stateful = app.task(name="stateful")(lambda: None)
    remote = trace.SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=True,
                               trace_flags=trace.TraceFlags(1), trace_state=trace.TraceState([("vendor", 'a"b')]))
    with trace.use_span(trace.NonRecordingSpan(remote)):
        stateful.enqueue()
    app.run_until_empty()
    [process] = named(spans(), "process default")
    assert process.context.trace_id == remote.trace_id
    assert process.context.trace_state.get("vendor") == 'a"b'


def test_show_prints_a_traced_jobs_trace_id(app, database_url):
    traced_task = app.task(name="traced")(lambda: None)
    with request_tracer.start_as_current_span("POST /orders") as request:
        traced = traced_task.enqueue()
    untraced = traced_task.enqueue()

    def show(job_id: int, *options: str) -> str:
        shown = CliRunner().invoke(cli, ["show", str(job_id), "--database", database_url, *options])
        assert shown.exit_code == 0, shown.output
        return shown.output

    trace_id = format(request.get_span_context().trace_id, "032x")
    assert re.findall(r"^\s*trace\s+(\S+)\s*$", show(traced.id), re.MULTILINE) == [trace_id]
    assert not re.findall(r"^\s*trace\s", show(untraced.id), re.MULTILINE)
    assert trace_id in json.loads(show(traced.id, "--json"))["trace_context"]


def test_without_opentelemetry_imported_nothing_is_looked_up(tmp_path):
    """A process that never imported OpenTelemetry: enqueue and run (a fan-in step's too) import
    none of it, and every attempt's record holds a null trace context."""
    code = f"""
import sqlite3, sys
from leased import Leased
app = Leased("sqlite:///{tmp_path / 'jobs.db'}")
noop = app.task(name="noop")(lambda: None)
noop.enqueue(); noop.enqueue_many([()] * 2)
workflow = app.workflow("fan-in")
workflow.add(noop, name="after", after=[workflow.add(noop, name=f"part-{{n}}") for n in range(2)])
workflow.enqueue()
app.run_until_empty()
assert not [name for name in sys.modules if name.startswith("opentelemetry")], sorted(sys.modules)
read = sqlite3.connect("{tmp_path / 'jobs.db'}").execute
assert read("SELECT count(*), count(trace_context) FROM leased_attempts").fetchone() == (6, 0)
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)



def test_a_workflows_steps_continue_its_enqueue_and_a_run_time_step_its_adding_attempt(app, spans):
    @app.task(name="plan", takes_context=True)
    def plan(context) -> None:
        context.workflow.add(resize, 1)

    @app.task(name="resize")
    def resize(n: int) -> None:
        pass

    workflow = app.workflow("album")
    workflow.add(plan)
    with request_tracer.start_as_current_span("POST /albums") as request:
        workflow.enqueue()
    app.run_until_empty()
    [send] = named(spans(), "send workflow album")
    by_task = {span.attributes["leased.task"]: span for span in named(spans(), "process default")}
    assert send.parent.span_id == request.get_span_context().span_id
    assert by_task["plan"].parent.span_id == send.context.span_id
    assert by_task["resize"].parent.span_id == by_task["plan"].context.span_id  # added by plan's attempt
    assert by_task["resize"].context.trace_id == request.get_span_context().trace_id


def test_a_fan_in_steps_attempt_links_to_every_parents_attempt(app, spans):
    """100 parents, one step after them all: its attempt links to each parent's own attempt span,
    read from the parent's recorded attempt (leased_attempts.trace_context), and says which."""
    @app.task(name="part")
    def part(n: int) -> int:
        return n

    @app.task(name="merge")
    def merge() -> None:
        pass

    @app.task(name="amerge")
    async def amerge() -> None:  # an async handler's step: its parents are read off the worker's loop
        pass

    workflow = app.workflow("fan-in")
    parts = [workflow.add(part, n, name=f"part-{n}") for n in range(100)]
    workflow.add(merge, after=parts)
    workflow.add(amerge, after=parts[:2])
    with request_tracer.start_as_current_span("POST /reports"):
        workflow.enqueue()
    app.run_until_empty()
    by_task: dict[str, list] = {}
    for span in named(spans(), "process default"):
        by_task.setdefault(span.attributes["leased.task"], []).append(span)
    parent_attempts = {span.context.span_id: span for span in by_task["part"]}
    [merged], [amerged] = by_task["merge"], by_task["amerge"]
    assert len(parent_attempts) == 100
    assert {link.context.span_id for link in merged.links} == set(parent_attempts)
    assert sorted(link.attributes["leased.step.parent"] for link in merged.links) == sorted(
        f"part-{n}" for n in range(100))
    assert {link.attributes["leased.step.parent"] for link in amerged.links} == {"part-0", "part-1"}
    assert merged.parent is not None and merged.parent.span_id not in parent_attempts  # a child of the enqueue


class Receiver(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP receiver: the spans of every ExportTraceServiceRequest posted to /v1/traces."""

    def __init__(self):
        self.spans: list = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                receiver.spans += [(resource.resource, span) for resource in request.resource_spans
                                   for scope in resource.scope_spans for span in scope.spans]
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, name="otlp-receiver", daemon=True).start()


def test_a_worker_process_exports_the_jobs_attempt_over_otlp(database_url, app, spans, tmp_path):
    receiver = Receiver()
    receipt = app.task(name="receipt", queue_name="mail")(lambda order: None)
    with request_tracer.start_as_current_span("POST /orders") as request:
        job = receipt.enqueue("o-7")
    [send] = named(spans(), "send mail")
    env = {**os.environ, "LEASED_DATABASE_URL": database_url, "PYTHONPATH": pythonpath(),
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}"}
    worker = subprocess.Popen([sys.executable, "-m", "leased.cli.main", "worker", "otlp_app:app",
                               "--poll-interval", "100ms"], env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: app.get_job(job.id).status == "done", message="the worker to run the job")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)  # at exit the SDK flushes what it batched
        receiver.shutdown()
    assert worker.returncode == 0, stderr.decode()
    exported = {span.name: (resource, span) for resource, span in receiver.spans}
    resource, process = exported["process mail"]
    _, inner = exported["render receipt"]
    assert process.trace_id.hex() == format(request.get_span_context().trace_id, "032x")
    assert process.parent_span_id.hex() == format(send.context.span_id, "016x")
    assert inner.parent_span_id == process.span_id
    attributes = {attribute.key: attribute.value for attribute in process.attributes}
    assert attributes["messaging.message.id"].string_value == str(job.id)
    assert attributes["leased.outcome"].string_value == "done"
    assert {attribute.key: attribute.value.string_value for attribute in resource.attributes}["service.name"] == \
        "shop-worker"
