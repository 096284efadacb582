"""A claim under limits reads O(keys + limit) rows, not every job its limits hold back.

The work of one claim_limited is measured as the database counts it (rows the plan's nodes return
on PostgreSQL, virtual-machine steps on SQLite), with 100 and with 10,000 jobs held back behind one
busy key: the second must cost about what the first does.
"""

from __future__ import annotations

import json

import pytest


from leased.backends.ports import ClaimRequest
from leased.backends.postgres.queries import QUERIES as POSTGRES
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
    connection = app.backend.connection()
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
        # for the session, as a claim connection
        connection.execute(POSTGRES["claim_settings"], {"for_transaction": False})
        with connection.transaction(force_rollback=True):  # EXPLAIN ANALYZE runs the claim: undo it
            (plan,), = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + POSTGRES["claim_limited"],
                                          params).fetchall()
    return rows_returned(plan[0]["Plan"])


def _mariadb_reads(app) -> int:
    """Rows the limited claim's reads (all its statements) cost, as the server's handler counters
    count them."""
    from leased.backends.mariadb import driver

    from conftest import callers_connection

    def reads(cursor) -> int:
        cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%%'")
        return sum(int(row["Value"]) for row in cursor.fetchall())

    params = {"worker_id": "w", "task_names": json.dumps(TASKS), "queue_names": None, "limit": 10}
    connection = callers_connection(app)
    try:
        cursor = driver.dict_cursor(connection)
        cursor.execute("ANALYZE TABLE leased_jobs")
        cursor.fetchall()
        before = reads(cursor)
        rows = app.backend.claims.pick_limited(connection, params)
        after = reads(cursor)
        assert len(rows) == 10 and all(row["id"] > 0 for row in rows)
        cursor.execute("SELECT count(*) AS n FROM leased_jobs WHERE id IN %s AND concurrency_key = 'busy'",
                       ([row["id"] for row in rows],))
        assert cursor.fetchone()["n"] == 0
        return after - before
    finally:
        connection.rollback()
        connection.close()


ALL_BACKENDS = pytest.mark.parametrize("backend_name", ["sqlite", "postgres", "mariadb"], indirect=True)


@ALL_BACKENDS
def test_claim_limited_work_does_not_grow_with_held_back_jobs(app, backend_name):
    measure = {"sqlite": _sqlite_steps, "postgres": _postgres_rows, "mariadb": _mariadb_reads}[backend_name]
    _held_back(app, 100)
    few = measure(app)
    app.tasks["sync"].enqueue_many([("busy", n) for n in range(100, 10_000)])
    many = measure(app)
    assert many < 2 * few, (few, many)


@ALL_BACKENDS
def test_claim_limited_reads_indexes_not_the_table(app, backend_name):
    _held_back(app, 2_000)
    if backend_name == "sqlite":
        connection = app.backend.connection()
        connection.execute("ANALYZE")
        params = {"worker_id": "w", "task_names": json.dumps(TASKS), "queue_names": None, "limit": 10}
        plan = [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + SQLITE["claim_limited"], params)]
        scans = [line for line in plan if line.startswith("SCAN ") and "leased_jobs" in line
                 and "COVERING INDEX" not in line and "USING INDEX" not in line]
        assert scans == [], plan
        assert any("leased_jobs_keyed_due" in line for line in plan), plan
        return
    if backend_name == "mariadb":
        from leased.backends.mariadb import driver

        from conftest import callers_connection
        from leased.backends.mariadb.backend import QUERIES as MARIADB

        filters = {"task_names": json.dumps(TASKS), "queue_names": None}
        statements = [("claim_ids", {**filters, "worker_id": "w", "limit": 10}),
                      ("limited_queue_rooms", {"limit": 10}),
                      ("limited_queue_due_jobs", {**filters, "queue_name": "default", "room": 10}),
                      ("next_waiting_key", {"after": None, "limit": 10}),
                      ("next_waiting_key", {"after": "busy", "limit": 10}),
                      ("waiting_key_level", {**filters, "limit_key": "busy", "below": None, "room": 10}),
                      ("waiting_key_level", {**filters, "limit_key": "busy", "below": 0, "room": 10})]
        connection = callers_connection(app, autocommit=True)
        try:
            cursor = driver.dict_cursor(connection)
            cursor.execute("ANALYZE TABLE leased_jobs")
            cursor.fetchall()
            for name, params in statements:
                cursor.execute("EXPLAIN " + MARIADB[name], params)
                plan = cursor.fetchall()
                # A whole-table or whole-index read of the jobs (small limit and queue tables may be read whole).
                scans = [row for row in plan if row["type"] in ("ALL", "index")
                         and not str(row["table"]).startswith("<")
                         and row["table"] not in ("leased_queues", "leased_queue_limits", "l")]
                assert scans == [], (name, plan)
        finally:
            connection.close()
        return
    import psycopg

    params = {"worker_id": "w", "task_names": list(TASKS), "queue_names": None, "limit": 10}
    with psycopg.connect(app.database_url, autocommit=True) as connection:
        # for the session, as a claim connection
        connection.execute(POSTGRES["claim_settings"], {"for_transaction": False})
        plan = "\n".join(row[0] for row in connection.execute("EXPLAIN " + POSTGRES["claim_limited"], params))
    assert "Seq Scan on leased_jobs" not in plan and "leased_jobs_keyed_due" in plan, plan
