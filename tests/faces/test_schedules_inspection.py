"""Schedules where people look: `leased schedules` (a real subprocess), the dashboard's Schedules
page, and the /metrics gauge an alert can watch. On every backend."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from datetime import UTC, datetime, timedelta

import pytest

from leased import Leased
from conftest import raw_sql
from paths import SRC
from test_schedules import scheduler, set_last_tick, state

pytest.importorskip("starlette", reason="the dashboard needs the web extra: pip install -e '.[web]'")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from leased.web import dashboard

APP_SOURCE = """
import os
from datetime import timedelta
from leased import Leased

app = Leased(os.environ["TEST_APP_URL"])


@app.periodic("*/5 * * * *", name="digest", timezone="Europe/Paris", overlap="skip")
def digest(scheduled_at):
    return scheduled_at.isoformat()


@app.periodic(every=timedelta(minutes=1), name="beat")
def beat(scheduled_at): ...
"""


@pytest.fixture
def ticked(app, database_url):
    """`digest` with one done run and one skipped tick; `beat` registered but never seen by a worker;
    `gone` stored but no longer in the code."""
    exec(compile(APP_SOURCE.replace('os.environ["TEST_APP_URL"]', "None"), "app", "exec"), namespace := {})
    for name in ("digest", "gone"):
        app.periodic("*/5 * * * *", name=name, timezone="Europe/Paris", overlap="skip")(namespace["digest"].func)
    scheduler(app).run_once()
    for _ in range(2):
        set_last_tick(app, "digest", state(app, "digest").last_tick_at - timedelta(minutes=5))
        app.backend.run_schedules([app.schedules["digest"]])
        from conftest import raw_sql

        raw_sql(app, "DELETE FROM leased_schedule_ticks")
    app.run_until_empty()
    del app.schedules["gone"]  # as if removed from the code since
    return app


def test_leased_schedules_lists_next_run_last_job_and_skips(ticked, database_url, tmp_path):
    (tmp_path / "sched_app.py").write_text(APP_SOURCE)
    env = {**os.environ, "TEST_APP_URL": database_url, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)]),
           "TZ": "UTC"}  # the viewer's zone, which every time names; a schedule's own zone is shown beside

    def run(*arguments: str) -> str:
        done = subprocess.run([sys.executable, "-m", "leased.cli.main", "schedules", *arguments], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    table = run("sched_app:app")
    lines = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert table.splitlines()[0].split()[:4] == ["NAME", "SCHEDULE", "TIMEZONE", "NEXT"]
    assert "*/5 * * * *" in lines["digest"] and "Europe/Paris" in lines["digest"] and " done " in lines["digest"]
    assert " 1 (last " in lines["digest"]  # one skipped tick, and when
    assert re.search(r"\d\d:\d\d:\d\d UTC \((\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d CES?T in Europe/Paris\)",
                     lines["digest"]), lines["digest"]
    assert "removed from the code" in lines["gone"]
    assert "every 60s" in lines["beat"]
    listed = {item["name"]: item for item in json.loads(run("--database", database_url, "--json"))}
    assert set(listed) == {"digest", "gone"}  # without the code: what is stored
    assert listed["digest"]["skipped_ticks"] == 1 and listed["digest"]["last_job_status"] == "done"
    assert listed["digest"]["next_run_at"] and listed["digest"]["registered"] is None


def test_the_dashboard_has_a_schedules_page_linked_from_the_nav(ticked):
    client = TestClient(dashboard(ticked))
    assert 'href="/schedules"' in client.get("/").text
    page = client.get("/schedules")
    assert page.status_code == 200
    assert "digest" in page.text and "Europe/Paris" in page.text and "removed from the code" in page.text
    assert f'href="/jobs/{state(ticked, "digest").last_job_id}"' in page.text


def test_metrics_carry_each_schedule_last_success_for_alerting(ticked):
    client = TestClient(dashboard(ticked))
    families = {family.name: family for family in text_string_to_metric_families(client.get("/metrics").text)}
    success = {sample.labels["schedule"]: sample.value
               for sample in families["leased_schedule_last_success_timestamp_seconds"].samples}
    assert success == {"digest": state(ticked, "digest").last_success_at.timestamp()}  # `gone` never succeeded
    skipped = {sample.labels["schedule"]: sample.value for sample in families["leased_schedule_skipped_ticks"].samples}
    assert skipped == {"digest": 1, "gone": 0}


def test_an_empty_database_lists_no_schedules(app):
    assert Leased(app.database_url).list_schedules() == []


@pytest.fixture
def uncomputable(app):
    """Stored schedules whose ticks no arithmetic can compute, as a hand edit or another version could
    leave them: no interval, an interval past any date (both no longer in the code), and `late`, in
    the code, whose last tick is at the end of year 9999."""
    for name in ("zero", "huge", "late"):
        app.periodic(every=timedelta(hours=1), name=name)(lambda scheduled_at: None)
    scheduler(app).run_once()
    raw_sql(app, "UPDATE leased_schedules SET expression = 'every 0s' WHERE name = 'zero'")
    raw_sql(app, "UPDATE leased_schedules SET expression = 'every 1e300s' WHERE name = 'huge'")
    set_last_tick(app, "late", datetime(9999, 12, 31, 23, 30, tzinfo=UTC))
    del app.schedules["zero"], app.schedules["huge"]
    return app


def test_schedules_that_cannot_be_computed_are_shown_without_a_next_run(uncomputable, database_url):
    listed = {info.name: (info.expression, info.next_run_at) for info in uncomputable.list_schedules()}
    assert listed == {"zero": ("every 0s", None), "huge": ("every 1e300s", None), "late": ("every 3600s", None)}
    client = TestClient(dashboard(uncomputable))
    page = client.get("/schedules")
    assert page.status_code == 200 and "every 1e300s" in page.text and "every 0s" in page.text
    assert client.get("/metrics").status_code == 200
    env = {**os.environ, "PYTHONPATH": str(SRC), "TZ": "UTC"}
    done = subprocess.run([sys.executable, "-m", "leased.cli.main", "schedules", "--database", database_url],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert {line.split()[0] for line in done.stdout.splitlines()[1:]} == {"zero", "huge", "late"}
