"""Prometheus metrics through prometheus_client: never hand-written exposition text.

Two registries, because they come from different places:
- database_registry(app): jobs by queue and status (some estimated, see leased.counts; a
  workflow's steps that wait for their parents are status "waiting", jobs whose handler waits for a
  time or a signal "sleeping"), the wait of the oldest due
  job, paused queues, live workers, each schedule's last success and skipped ticks, the queues'
  limits, the latest workflow runs by status, poison jobs quarantined among the latest failed,
  read from the database on every scrape (the dashboard serves it on /metrics);
- worker_registry(events): attempts by task and outcome, a histogram of run time, and handlers
  stuck past their time limit, counted from the events of the workers in this process
  (`leased worker --metrics-port N` serves it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from leased.events import (
    AttemptEnded,
    ChildProcessEnded,
    ChildProcessStarted,
    Event,
    Events,
    HandlerStuck,
    ListenerLost,
    ListenerReconnected,
)
from leased.runs import WorkflowStatus

if TYPE_CHECKING:
    from leased.admin import QueueSummary
    from leased.app import Leased

RECENT_WORKFLOWS = 1000  # leased_recent_workflows counts the latest this many runs
RECENT_FAILED = 10_000  # leased_jobs_quarantined counts among the latest this many failed jobs
RUN_TIME_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class DatabaseCollector:
    """Gauges read from the database when scraped, so they are right whichever process serves them."""

    def __init__(self, app: Leased):
        self.app = app

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        overview = self.app.overview()
        jobs = GaugeMetricFamily("leased_jobs", "Jobs by queue and status. Waiting (a workflow's steps whose "
                                 "parents have not all ended), sleeping (handlers waiting for a time or a "
                                 "signal), pending and running are exact; done, "
                                 "failed and cancelled are estimated from a sample of job ids when "
                                 "leased_jobs_estimated says so for their status.", labels=["queue", "status"])
        estimated = GaugeMetricFamily("leased_jobs_estimated", "1 while leased_jobs of this status is an estimate "
                                      "(done beyond a few thousand jobs; failed, cancelled beyond 10,000), 0 while "
                                      "exact.", labels=["status"])
        for status in overview.totals:
            estimated.add_metric([status], 1.0 if status in overview.estimated else 0.0)
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
        yield from (jobs, estimated, oldest, paused, workers, *_limit_gauges(overview.queues))
        yield from self._schedules()
        yield self._workflows()
        yield self._quarantined()

    def _quarantined(self) -> Metric:
        """Poison jobs: alert on any rise. Bounded as _workflows is."""
        quarantined = GaugeMetricFamily("leased_jobs_quarantined",
                                        f"Poison jobs by queue: failed because max_crashes of their attempts killed "
                                        f"their process (a segfault, the OOM killer, os._exit), counted over the "
                                        f"latest {RECENT_FAILED:,} failed jobs only.", labels=["queue"])
        for queue_name, count in sorted(self.app.backend.recent_quarantined(RECENT_FAILED).items()):
            quarantined.add_metric([queue_name], count)
        return quarantined

    def _workflows(self) -> Metric:
        """Runs by status over the latest RECENT_WORKFLOWS only: one bounded read per scrape, whatever
        the table's size. Alert on a rise of failed; running covers long runs only while recent."""
        runs = GaugeMetricFamily("leased_recent_workflows",
                                 f"Workflow runs by status (running, succeeded, failed, cancelled), counted over "
                                 f"the latest {RECENT_WORKFLOWS:,} runs only (newest by id): older runs are not "
                                 f"in it. Steps waiting for their parents are leased_jobs{{status=\"waiting\"}}.",
                                 labels=["status"])
        counts = {status.value: 0 for status in WorkflowStatus}
        for info in self.app.list_workflows(limit=RECENT_WORKFLOWS):
            counts[info.status.value] += 1
        for status, count in counts.items():
            runs.add_metric([status], count)
        return runs

    def _schedules(self) -> Iterator[Metric]:
        """Alert on a schedule that stopped: time() minus its last success, against its period."""
        success = GaugeMetricFamily("leased_schedule_last_success_timestamp_seconds",
                                    "When each schedule's task last finished done (Unix time); absent: never.",
                                    labels=["schedule"])
        skipped = GaugeMetricFamily("leased_schedule_skipped_ticks", "Ticks each schedule skipped because its "
                                    "previous run was still pending or running.", labels=["schedule"])
        for schedule in self.app.list_schedules():
            if schedule.last_success_at is not None:
                success.add_metric([schedule.name], schedule.last_success_at.timestamp())
            skipped.add_metric([schedule.name], schedule.skipped_ticks)
        yield from (success, skipped)


def _limit_gauges(queues: list[QueueSummary]) -> tuple[Metric, Metric]:
    """The limits of the queues that have them (`leased limit`)."""
    concurrency = GaugeMetricFamily("leased_queue_concurrency_limit",
                                    "Most jobs of the queue that may run at once, across all workers.",
                                    labels=["queue"])
    rate = GaugeMetricFamily("leased_queue_rate_limit_per_second",
                             "Starts of the queue's jobs allowed per second, averaged over the limit's window.",
                             labels=["queue"])
    for queue in queues:
        if queue.limit is not None and queue.limit.concurrency is not None:
            concurrency.add_metric([queue.queue_name], queue.limit.concurrency)
        if queue.limit is not None and queue.limit.rate_limit is not None:
            rate.add_metric([queue.queue_name], queue.limit.rate_limit.count / queue.limit.rate_limit.seconds)
    return concurrency, rate


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
    # Each one holds a worker slot: a sync handler past its time limit that ignores its context.
    stuck = Gauge("leased_stuck_handlers", "Sync handler threads still running past their job's time limit.",
                  ["task", "queue"], registry=registry)

    # Process isolation (engine/children.py): children alive, started, and why each ended.
    children = Gauge("leased_child_processes", "Child processes of process-isolated handlers alive.",
                     registry=registry)
    children_started = Counter("leased_child_processes_started", "Child processes started.", registry=registry)
    children_ended = Counter("leased_child_processes_ended", "Child processes ended, by why: recycled, stopped "
                             "(their attempt was cancelled), crashed, closed.", ["reason"], registry=registry)
    child_crashes = Counter("leased_child_crashes", "Child processes that died mid-job, by how: the signal that "
                            "killed them (SIGSEGV, SIGKILL: the OOM killer's) or their exit code (exit 3).", ["how"],
                            registry=registry)
    child_rss = Gauge("leased_child_rss_bytes_at_end", "The resident memory of the child that ended last, as it "
                      "last said.", registry=registry)

    def count(event: Event) -> None:
        if isinstance(event, AttemptEnded):
            attempts.labels(event.task_name, event.queue_name, event.outcome.value).inc()
            run_time.labels(event.task_name, event.queue_name).observe(event.seconds)
        elif isinstance(event, ListenerLost):
            listener_lost.inc()
        elif isinstance(event, ListenerReconnected):
            listener_back.inc()
        elif isinstance(event, HandlerStuck):
            stuck.labels(event.task_name, event.queue_name).inc(-1 if event.returned else 1)
        elif isinstance(event, ChildProcessStarted):
            children.inc()
            children_started.inc()
        elif isinstance(event, ChildProcessEnded):
            children.dec()
            children_ended.labels(event.reason).inc()
            if event.how is not None:
                child_crashes.labels(event.how).inc()
            child_rss.set(event.rss_bytes)

    events.subscribe(count)
    return registry


def serve_worker_metrics(app: Leased, port: int, host: str = "127.0.0.1") -> None:
    """Serve this process's worker metrics on http://host:port/metrics, from a daemon thread."""
    start_http_server(port, addr=host, registry=worker_registry(app.events))
