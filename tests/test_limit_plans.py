"""A claim under limits reads O(keys + limit) rows, not every job its limits hold back.

The work of one claim_limited is measured as the database counts it (rows the plan's nodes return
on PostgreSQL, virtual-machine steps on SQLite), with 100 and with 10,000 jobs held back behind one
busy key: the second must cost about what the first does.
"""

from __future__ import annotations

import json

import pytest


from leased.backends.base import ClaimRequest
from leased.backends.postgres.backend import QUERIES as POSTGRES
from leased.backends.sqlite.backend import QUERIES as SQLITE

TASKS = ("sync", "plain")


def _held_back(app, held: int) -> None:
    """`held` due jobs on key "busy", whose one slot is taken; ten other keys and ten plain jobs behind."""

    @app.task(name="sync", concurrency=1, concurrency_key="{customer}")
    def sync(customer, n=0): ...

    @app.task(name="plain")
    def plain(n=0): ...

    sync.enqueue("busy", -1)
    assert len(app.backend.claim(ClaimRequest("holder", TASKS, None, 1))) == 1
    sync.enqueue_many([("busy", n) for n in range(held)])
    sync.enqueue_many([(f"c{n}", n) for n in range(10)])
    plain.enqueue_many([(n,) for n in range(10)])


def _sqlite_steps(app) -> int:
    connection = app.backend._connection()
    connection.execute("ANALYZE")
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    params = {"worker_id": "w", "task_names": json.dumps(TASKS), "queue_names": None, "limit": 10}
    connection.set_progress_handler(count, 100)
    connection.execute("BEGIN IMMEDIATE")
    try:
        rows = connection.execute(SQLITE["claim_limited"], params).fetchall()
    finally:
        connection.execute("ROLLBACK")
        connection.set_progress_handler(None, 0)
    assert len(rows) == 10 and all(row["concurrency_key"] != "busy" for row in rows)
    return steps


def _postgres_rows(app) -> int:
    import psycopg

    def rows_returned(node: dict) -> int:
        own = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
        return own + sum(rows_returned(child) for child in node.get("Plans", ()))

    params = {"worker_id": "w", "task_names": list(TASKS), "queue_names": None, "limit": 10}
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute("ANALYZE")
        connection.execute(POSTGRES["claim_settings"])
        with connection.transaction(force_rollback=True):  # EXPLAIN ANALYZE runs the claim: undo it
            (plan,), = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + POSTGRES["claim_limited"],
                                          params).fetchall()
    return rows_returned(plan[0]["Plan"])


def _mariadb_rows(app) -> int:
    """Rows the claim's plan read, as the server's handler counters count them."""
    from MySQLdb.cursors import DictCursor

    from conftest import callers_connection
    from leased.backends.mariadb.backend import QUERIES as MARIADB

    def reads(cursor) -> int:
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(row["Value"]) for row in cursor.fetchall())

    params = {"worker_id": "w", "task_names": json.dumps(TASKS), "queue_names": None, "limit": 10}
    connection = callers_connection(app)
    try:
        cursor = connection.cursor(DictCursor)
        cursor.execute("ANALYZE TABLE leased_jobs")
        cursor.fetchall()
        before = reads(cursor)
        cursor.execute(MARIADB["claim_limited_ids"], params)
        assert len(cursor.fetchall()) == 10
        return reads(cursor) - before
    finally:
        connection.rollback()
        connection.close()


# Known on MariaDB: its claim_limited_ids reads every due job (no LATERAL, no LIMIT in an IN subquery,
# so the per-key bounds PostgreSQL has are window functions over them all): 120,000 handler reads
# with 10,000 jobs held back against 1,400 with 100. Strict: a fix turns these red until this goes.
MARIADB_READS_EVERY_DUE_JOB = pytest.param("mariadb", marks=pytest.mark.xfail(
    strict=True, reason="MariaDB's limited claim reads every due job (known; see claim_limited_ids)"))
ALL_BACKENDS = pytest.mark.parametrize("backend_name", ["sqlite", "postgres", MARIADB_READS_EVERY_DUE_JOB],
                                       indirect=True)


@ALL_BACKENDS
def test_claim_limited_work_does_not_grow_with_held_back_jobs(app, backend_name):
    measure = {"sqlite": _sqlite_steps, "postgres": _postgres_rows, "mariadb": _mariadb_rows}[backend_name]
    _held_back(app, 100)
    few = measure(app)
    app.tasks["sync"].enqueue_many([("busy", n) for n in range(100, 10_000)])
    many = measure(app)
    assert many < 2 * few, (few, many)


@ALL_BACKENDS
def test_claim_limited_reads_indexes_not_the_table(app, backend_name):
    _held_back(app, 2_000)
    if backend_name == "sqlite":
        connection = app.backend._connection()
        connection.execute("ANALYZE")
        params = {"worker_id": "w", "task_names": json.dumps(TASKS), "queue_names": None, "limit": 10}
        plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE["claim_limited"], params)]
        scans = [line for line in plan if line.startswith("SCAN ") and "leased_jobs" in line
                 and "COVERING INDEX" not in line and "USING INDEX" not in line]
        assert scans == [], plan
        assert any("leased_jobs_keyed_due" in line for line in plan), plan
        return
    if backend_name == "mariadb":
        from MySQLdb.cursors import DictCursor

        from conftest import callers_connection
        from leased.backends.mariadb.backend import QUERIES as MARIADB

        connection = callers_connection(app, autocommit=True)
        try:
            cursor = connection.cursor(DictCursor)
            cursor.execute("EXPLAIN " + MARIADB["claim_limited_ids"], {"worker_id": "w", "task_names": json.dumps(TASKS),
                                                                      "queue_names": None, "limit": 10})
            plan = cursor.fetchall()
        finally:
            connection.close()
        assert not [row for row in plan if row["type"] == "ALL" and not str(row["table"]).startswith("<")], plan
        return
    import psycopg

    params = {"worker_id": "w", "task_names": list(TASKS), "queue_names": None, "limit": 10}
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        connection.execute(POSTGRES["claim_settings"])
        plan = "\n".join(row[0] for row in connection.execute("EXPLAIN " + POSTGRES["claim_limited"], params))
    assert "Seq Scan on leased_jobs" not in plan and "leased_jobs_keyed_due" in plan, plan
