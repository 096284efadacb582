"""A handler the tracing tests run in a child process (isolation="process"). The child imports this
module, which sets up OpenTelemetry as an application would, exporting each ended span as a JSON
line to $TRACED_SPANS (a file the test reads: the test process cannot see a child's memory)."""

import json
import multiprocessing
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileExporter(SpanExporter):
    def export(self, spans):
        with open(os.environ["TRACED_SPANS"], "a") as file:
            for span in spans:
                file.write(json.dumps({"name": span.name, "trace_id": format(span.context.trace_id, "032x"),
                                       "span_id": format(span.context.span_id, "016x"),
                                       "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
                                       "attributes": dict(span.attributes)}) + "\n")
        return SpanExportResult.SUCCESS


if multiprocessing.parent_process() is not None:  # a worker's child; the test process has its own set-up
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)


def render(page: int) -> int:
    """Traces its own work, as a handler using a traced client would."""
    with trace.get_tracer("shop").start_as_current_span("render page"):
        return page * 2
