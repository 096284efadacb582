"""Cheap counts (leased.counts): the exact figures are exact, the estimated ones say so, on every backend."""

from __future__ import annotations

import pytest

from leased import PermanentError
from leased.backends.ports import ClaimRequest
from leased.counts import JobCounts, format_count, sample_ids, tally

prometheus_client = pytest.importorskip("prometheus_client")


def _fill(app) -> None:
    """Done, failed, cancelled, pending and running jobs in two queues: 128 ids in all."""

    @app.task(name="ok")
    def ok(): ...

    @app.task(name="broken", queue_name="mail")
    def broken():
        raise PermanentError("no")

    ok.enqueue_many([()] * 100)
    broken.enqueue_many([()] * 20)
    app.run_until_empty()
    for job in ok.enqueue_many([()] * 3):
        app.cancel(job.id)
    ok.enqueue_many([()] * 3)
    broken.enqueue_many([()] * 2)
    app.backend.claim(ClaimRequest("counting-worker", ("broken",), None, 1))


def test_a_table_the_sample_covers_is_counted_exactly(app):
    _fill(app)
    counts = app.job_counts()
    assert counts.estimated == frozenset()
    assert counts.by_queue == app.counts() == {
        "default": {"pending": 3, "running": 0, "done": 100, "failed": 0, "cancelled": 3, "waiting": 0, "sleeping": 0},
        "mail": {"pending": 1, "running": 1, "done": 0, "failed": 20, "cancelled": 0, "waiting": 0, "sleeping": 0},
    }
    # Probing every id is a count, whatever the cap: nothing is estimated.
    assert app.backend.job_counts(exact_up_to=1, sample_size=1_000) == counts


def test_beyond_the_sample_active_counts_stay_exact_and_the_rest_are_labelled(app):
    _fill(app)
    exact = app.counts()
    counts = app.backend.job_counts(exact_up_to=10, sample_size=40)
    assert counts.estimated == {"done", "failed"}  # 20 failed is over the cap; 3 cancelled is not
    for queue in exact:
        for status in ("pending", "running", "cancelled"):
            assert counts.by_queue[queue][status] == exact[queue][status], (queue, status)
    # 40 probes over 128 ids, one per slice: within a quarter of the truth.
    assert abs(counts.by_queue["default"]["done"] - 100) <= 25, counts
    assert abs(counts.totals["failed"] - 20) <= 10, counts


def test_the_overview_and_metrics_say_which_counts_are_estimated(app):
    from prometheus_client.parser import text_string_to_metric_families

    from leased.metrics import database_registry

    @app.task(name="ok")
    def ok(): ...

    ok.enqueue_many([()] * 2_100)  # ids span more than the default sample
    overview = app.overview()
    assert overview.estimated == {"done"} and overview.totals["pending"] == 2_100
    scraped = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
               for family in text_string_to_metric_families(
                   prometheus_client.generate_latest(database_registry(app)).decode())
               for sample in family.samples}
    assert scraped[("leased_jobs_estimated", (("status", "done"),))] == 1
    assert scraped[("leased_jobs_estimated", (("status", "pending"),))] == 0
    assert scraped[("leased_jobs", (("queue", "default"), ("status", "pending")))] == 2_100


def test_the_dashboard_marks_estimates(app):
    starlette = pytest.importorskip("starlette.testclient")
    from leased.web import dashboard

    @app.task(name="ok")
    def ok(): ...

    ok.enqueue_many([()] * 2_100)
    page = starlette.TestClient(dashboard(app)).get("/").text
    assert "≈ marks estimates" in page and "(done)" in page and "2,100" in page


def test_sample_ids_take_one_id_in_each_slice_or_every_id():
    assert sample_ids(5, 9, 10) == [5, 6, 7, 8, 9]
    probes = sample_ids(1, 1_000_000, 2_000)
    assert len(probes) == 2_000 and probes == sorted(probes)
    assert all(1 + 500 * i <= probe < 1 + 500 * (i + 1) for i, probe in enumerate(probes))
    assert probes == sample_ids(1, 1_000_000, 2_000)  # the same table, the same figures


def test_tally_scales_the_hits_and_keeps_the_exact_figures():
    counts = tally(active=[{"queue_name": "q", "status": "pending", "n": 7}],
                   capped={"failed": 11, "cancelled": 2}, split=[{"queue_name": "q", "status": "cancelled", "n": 2}],
                   sampled=[{"queue_name": "q", "status": "done", "n": 90},
                            {"queue_name": "q", "status": "failed", "n": 5},
                            {"queue_name": "q", "status": "pending", "n": 1}],
                   low=1, high=1_000, probes=100, exact_up_to=10)
    assert counts == JobCounts({"q": {"pending": 7, "running": 0, "done": 900, "failed": 50, "cancelled": 2,
                                      "waiting": 0, "sleeping": 0}},
                               frozenset({"done", "failed"}))


def test_estimates_read_as_estimates():
    assert [format_count(n, True) for n in (950, 999, 52_473, 523_456, 999_999, 12_345_678)] == [
        "≈ 950", "≈ 1.0K", "≈ 52K", "≈ 520K", "≈ 1.0M", "≈ 12M"]
    assert format_count(1_234_567, False) == "1,234,567"
