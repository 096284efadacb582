"""Prometheus metrics through prometheus_client: never hand-written exposition text.

Two registries, because they come from different places:
- database_registry(app): jobs by queue and status, the wait of the oldest due job, paused queues,
  live workers,
  read from the database on every scrape (the dashboard serves it on /metrics);
- worker_registry(events): attempts by task and outcome and a histogram of run time, counted from
  the events of the workers in this process (`leased worker --metrics-port N` serves it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from leased.events import AttemptEnded, Event, Events, ListenerLost, ListenerReconnected

if TYPE_CHECKING:
    from leased.app import Leased

RUN_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class DatabaseCollector:
    """Gauges read from the database when scraped, so they are right whichever process serves them."""

    def __init__(self, app: Leased):
        self.app = app

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        overview = self.app.overview()
        jobs = GaugeMetricFamily("leased_jobs", "Jobs by queue and status.", labels=["queue", "status"])
        oldest = GaugeMetricFamily("leased_oldest_due_job_age_seconds",
                                   "How long the oldest due pending job of each queue has waited (0: none).",
                                   labels=["queue"])
        paused = GaugeMetricFamily("leased_queue_paused", "1 while the queue is paused: no worker claims its jobs.",
                                   labels=["queue"])
        for queue in overview.queues:
            for status, count in queue.counts.items():
                jobs.add_metric([queue.queue_name, status], count)
            oldest.add_metric([queue.queue_name], queue.oldest_due_seconds or 0.0)
            paused.add_metric([queue.queue_name], 1.0 if queue.paused else 0.0)
        workers = GaugeMetricFamily("leased_workers_alive", "Workers that renewed their presence recently.")
        workers.add_metric([], sum(worker.alive for worker in overview.workers))
        yield from (jobs, oldest, paused, workers)


def database_registry(app: Leased) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(DatabaseCollector(app))
    return registry


def worker_registry(events: Events) -> CollectorRegistry:
    registry = CollectorRegistry()
    attempts = Counter("leased_attempts", "Attempts by task and how they ended.", ["task", "queue", "outcome"],
                       registry=registry)
    run_time = Histogram("leased_attempt_duration_seconds", "How long attempts ran, by task.", ["task", "queue"],
                         buckets=RUN_TIME_BUCKETS, registry=registry)

    # Both counters equal: the wake-up listener is up (or the worker has none, as with push=False).
    listener_lost = Counter("leased_listener_lost", "Times the wake-up listener failed; the worker polled "
                            "meanwhile.", registry=registry)
    listener_back = Counter("leased_listener_reconnects", "Times the wake-up listener reconnected.",
                            registry=registry)

    def count(event: Event) -> None:
        if isinstance(event, AttemptEnded):
            attempts.labels(event.task_name, event.queue_name, event.outcome.value).inc()
            run_time.labels(event.task_name, event.queue_name).observe(event.seconds)
        elif isinstance(event, ListenerLost):
            listener_lost.inc()
        elif isinstance(event, ListenerReconnected):
            listener_back.inc()

    events.subscribe(count)
    return registry


def serve_worker_metrics(app: Leased, port: int, host: str = "127.0.0.1") -> None:
    """Serve this process's worker metrics on http://host:port/metrics, from a daemon thread."""
    start_http_server(port, addr=host, registry=worker_registry(app.events))
