"""The app the OTLP test's `leased worker` runs: it sets up OpenTelemetry as the docs say
(docs/tracing.md), exporting over OTLP/HTTP to $OTEL_EXPORTER_OTLP_ENDPOINT, a receiver the test runs."""

import os

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from leased import Leased

provider = TracerProvider(resource=Resource.create({"service.name": "shop-worker"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint from the environment
trace.set_tracer_provider(provider)

app = Leased(os.environ["LEASED_DATABASE_URL"])


@app.task(name="receipt", queue_name="mail")
def receipt(order: str) -> str:
    with trace.get_tracer("shop").start_as_current_span("render receipt"):
        return f"receipt for {order}"
