"""Prometheus metrics, scraped and parsed with prometheus_client's own parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import urllib.request

import pytest

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_for
from leased import PermanentError
from leased.metrics import database_registry, worker_registry
from servers import free_port


def samples(text: str) -> dict[tuple, float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_database_metrics_match_the_database(app):
    @app.task(name="ok")
    def ok(): ...

    @app.task(name="broken", queue_name="mail")
    def broken():
        raise PermanentError("no")

    ok.enqueue(), ok.enqueue(), broken.enqueue()
    app.run_until_empty()
    ok.enqueue()
    scraped = samples(prometheus_client.generate_latest(database_registry(app)).decode())
    for queue, statuses in app.counts().items():
        for status, count in statuses.items():
            assert scraped[("leased_jobs", (("queue", queue), ("status", status)))] == count
    assert scraped[("leased_jobs", (("queue", "mail"), ("status", "failed")))] == 1
    assert scraped[("leased_oldest_due_job_age_seconds", (("queue", "default"),))] >= 0
    assert scraped[("leased_workers_alive", ())] == 0
    assert scraped[("leased_queue_paused", (("queue", "mail"),))] == 0


def test_a_paused_queue_is_a_gauge_of_one(app):
    @app.task(name="ok")
    def ok(): ...

    ok.enqueue()
    app.pause("default")
    app.pause("reports", force=True)
    registry = database_registry(app)
    scraped = samples(prometheus_client.generate_latest(registry).decode())
    assert scraped[("leased_queue_paused", (("queue", "default"),))] == 1
    assert scraped[("leased_queue_paused", (("queue", "reports"),))] == 1
    app.resume("default")
    scraped = samples(prometheus_client.generate_latest(registry).decode())
    assert scraped[("leased_queue_paused", (("queue", "default"),))] == 0


def test_queue_limits_are_gauges(app):
    app.limit("billing", concurrency=5, rate_limit="120/m")
    scraped = samples(prometheus_client.generate_latest(database_registry(app)).decode())
    assert scraped[("leased_queue_concurrency_limit", (("queue", "billing"),))] == 5
    assert scraped[("leased_queue_rate_limit_per_second", (("queue", "billing"),))] == 2


def test_worker_metrics_count_attempts_and_time_them(app):
    registry = worker_registry(app.events)

    @app.task(name="flaky", max_attempts=2)
    def flaky(n):
        if n:
            raise RuntimeError("boom")

    flaky.enqueue(0), flaky.enqueue(1)
    app.run_until_empty()
    scraped = samples(prometheus_client.generate_latest(registry).decode())
    labels = (("outcome", "done"), ("queue", "default"), ("task", "flaky"))
    assert scraped[("leased_attempts_total", labels)] == 1
    assert scraped[("leased_attempts_total", (("outcome", "error"), ("queue", "default"), ("task", "flaky")))] == 1
    assert scraped[("leased_attempt_duration_seconds_count", (("queue", "default"), ("task", "flaky")))] == 2


def test_worker_command_serves_metrics(app, database_url, tmp_path):
    (tmp_path / "metrics_app.py").write_text(textwrap.dedent("""
        import os
        from leased import Leased
        app = Leased(os.environ["LEASED_DATABASE_URL"])

        @app.task(name="hello")
        def hello():
            return "hi"
    """))
    app.task(name="hello")(lambda: None).enqueue()
    port = free_port()
    env = {**os.environ, "LEASED_DATABASE_URL": database_url}
    worker = subprocess.Popen([sys.executable, "-m", "leased.cli.main", "worker", "metrics_app:app",
                               "--metrics-port", str(port), "--poll-interval", "50ms"],
                              cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        def scrape():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                return ""

        text = wait_for(lambda: "leased_attempts_total{" in scrape() and scrape(), message="a scrape with attempts")
        labels = (("outcome", "done"), ("queue", "default"), ("task", "hello"))
        assert samples(text)[("leased_attempts_total", labels)] == 1
    finally:
        worker.send_signal(signal.SIGTERM)
        _, errors = worker.communicate(timeout=30)
    assert worker.returncode == 0, errors


def test_a_quarantined_job_is_counted_and_shown_on_its_page(app):
    """A poison job (issue 41): the gauge and the job page read the stored fact, Job.quarantined."""
    import warnings

    import isolated_handlers as handlers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Starlette's preference of httpx2, as in test_web.py
        from starlette.testclient import TestClient
    from leased.web import dashboard

    crashing = app.task(name="crashing", isolation="process", max_attempts=3, max_crashes=1)(handlers.segfaults)
    ok = app.task(name="ok", queue_name="mail")(lambda: None)
    poison, healthy = crashing.enqueue(), ok.enqueue()
    app.run_until_empty()
    quarantined = app.get_job(poison.id)
    assert quarantined.quarantined and (quarantined.crashes, quarantined.attempt) == (1, 1), "not retried"
    assert app.get_job(healthy.id).status == "done"
    scraped = samples(prometheus_client.generate_latest(database_registry(app)).decode())
    assert scraped[("leased_jobs_quarantined", (("queue", "default"),))] == 1
    assert ("leased_jobs_quarantined", (("queue", "mail"),)) not in scraped
    page = TestClient(dashboard(app)).get(f"/jobs/{poison.id}").text
    assert "quarantined after 1 crash" in page and "1 crashes" not in page and "killed by SIGSEGV" in page
    assert 'data-code="quarantined"' in page


def test_sleeping_jobs_are_counted(app):
    @app.task(name="nap", takes_context=True)
    def nap(context):
        context.sleep(60)

    nap.enqueue()
    app.run_until_empty()
    scraped = samples(prometheus_client.generate_latest(database_registry(app)).decode())
    assert scraped[("leased_jobs", (("queue", "default"), ("status", "sleeping")))] == 1
    assert scraped[("leased_jobs_estimated", (("status", "sleeping"),))] == 0, "counted exactly, as running jobs are"
