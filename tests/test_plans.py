"""The claim stays at the head of the due set however much history the table holds."""

from __future__ import annotations

import json

from leased.backends.postgres.backend import QUERIES as POSTGRES
from leased.backends.sqlite.backend import QUERIES as SQLITE

HISTORY = 20_000


def test_claim_reads_the_due_index_not_the_table(app, backend_name):
    app.counts()  # schema
    if backend_name == "sqlite":
        connection = app.backend._connection()
        connection.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, run_after, "
            "created_at, finished_at) SELECT 't', 'default', CASE WHEN i % 100 = 0 THEN 'pending' ELSE 'done' END, "
            "3, 30, 0, 0, 0 FROM n", (HISTORY,))
        connection.execute("ANALYZE")
        params = {"worker_id": "w", "task_names": json.dumps(["t"]), "queue_names": None, "limit": 10}
        plan = " ".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE["claim"], params))
        assert "USING INDEX leased_jobs_due" in plan and "SCAN leased_jobs " not in plan + " ", plan
        return
    import psycopg

    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds, finished_at) "
            "SELECT 't', 'default', CASE WHEN i %% 100 = 0 THEN 'pending' ELSE 'done' END, 3, 30, now() "
            "FROM generate_series(1, %s) AS i", (HISTORY,))
        connection.execute("ANALYZE leased_jobs")
        plan = "\n".join(row[0] for row in connection.execute(  # EXPLAIN alone runs nothing
            "EXPLAIN " + POSTGRES["claim"], {"worker_id": "w", "task_names": ["t"], "queue_names": None, "limit": 10}))
    assert "leased_jobs_due" in plan and "Seq Scan on leased_jobs" not in plan, plan
