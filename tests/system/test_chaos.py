"""A short chaos soak per backend: worker processes SIGKILLed (and on PostgreSQL their connections
terminated) while they drain 1,500 jobs, then every invariant checked. bench/chaos_soak.py is the long run."""

from __future__ import annotations

import pytest

import chaos

# Alone: their workers hold one-second leases, which the other xdist workers' load made them miss.
pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.alone]


def test_chaos_soak_keeps_every_invariant(backend_name, database_url, tmp_path):
    settings = chaos.Settings(backend_name, database_url, tmp_path / "logs", jobs=1_500, workers=4, concurrency=4,
                              seconds=4.5, max_kills=8, pace=(0.3, 0.8), lease=1.5, seed=7, drain_timeout=90.0)
    result = chaos.run(settings)
    print(f"\n{chaos.HEADER}\n{chaos.RULE}\n{chaos.table_row(result)}\n{chaos.details(result)}")

    assert result.violations == [], f"{chaos.details(result)}\nworker logs: {result.log_dir}"
    assert result.lost == 0
    assert result.done + result.failed == settings.jobs
    assert result.failed == result.failed_by_design
    # The chaos happened: at least one worker died mid-run (and, on PostgreSQL, connections were cut).
    assert result.worker_kills >= 1
    if backend_name == "postgres":
        assert result.connection_kills >= 1
    # Several workers on one SQLite file: "database is locked" never reaches a worker's log.
    logs = "".join(path.read_text() for path in (tmp_path / "logs").glob("*.log"))
    assert chaos.LOCKED not in logs
