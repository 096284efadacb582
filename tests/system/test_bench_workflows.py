"""A short run of bench/workflows.py (the long one: 10,000 steps, three backends, Celery): a fan-out of
300 no-op steps and one fan-in step, and the same jobs with no workflow, each drained by two
`leased worker` processes on a SQLite file. Checks that the bench still runs, not its figures."""

from __future__ import annotations

import pytest

from paths import BENCH

pytestmark = [pytest.mark.slow, pytest.mark.system]


def test_workflows_bench_short_run(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import workflows

    fan_out = workflows.leased_workflow("sqlite", 300, 60.0)  # 60: how long a failing run may take
    plain = workflows.leased_plain("sqlite", 300, 60.0)
    assert fan_out["workflow_status"] == "{'done': 301}"
    assert 0 < fan_out["to_last_member"] <= fan_out["seconds"]  # the fan-in started after its last parent ended
    assert 0 < fan_out["enqueue"] < fan_out["seconds"]
    assert 0 < plain["enqueue"] < plain["seconds"]
