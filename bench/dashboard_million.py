"""How fast the dashboard renders over a million jobs on PostgreSQL (or SQLite, or MariaDB).

    python bench/dashboard_million.py                 # 1,000,000 jobs, 7 repetitions per page
    python bench/dashboard_million.py --jobs 200000 --explain --keep
    python bench/dashboard_million.py --database sqlite   # or mariadb: the same jobs, no attempt rows
    python bench/dashboard_million.py --spacing 0.0036    # all million within the last hour

Fills a fresh schema with generate_series (mostly done, 5% failed with errors and tracebacks, a
few thousand pending and running, five queues, eight tasks, attempt rows for every failure and a
tenth of the successes, and the per-minute counts four workers' finishes would have kept),
ANALYZEs, then renders each page through the ASGI app (Starlette's TestClient, so templates and
HTTP plumbing are included) and prints the median and the spread.
--explain prints EXPLAIN ANALYZE of the backend's own queries behind the pages.
A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
import warnings
from urllib.parse import quote

import psycopg

from leased import Leased
from leased.web import dashboard

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
MARIADB_URL = "mariadb://root@127.0.0.1:3306"

FILL = """
INSERT INTO leased_jobs (task_name, queue_name, status, priority, args, kwargs, attempt, max_attempts,
                         lease_seconds, run_after, created_at, finished_at, lease_owner, lease_expires_at,
                         idempotency_key, result, last_error)
SELECT (ARRAY['send_receipt', 'send_newsletter', 'charge_card', 'refund', 'resize_image', 'sync_inventory',
              'build_report', 'notify_owner'])[g % 8 + 1],
       (ARRAY['default', 'default', 'default', 'mail', 'mail', 'billing', 'billing', 'images', 'images',
              'reports'])[g % 10 + 1],
       s.status, (g % 3) - 1, json_build_array(g, 'customer' || g || '@example.com'), '{}',
       CASE s.status WHEN 'pending' THEN 0 WHEN 'failed' THEN 3 WHEN 'done' THEN 1 + (g % 13 = 0)::int ELSE 1 END,
       3, 30, s.created + CASE WHEN s.status = 'pending' AND g % 10 = 0 THEN interval '30 minutes' ELSE '0' END,
       s.created,
       CASE WHEN s.status IN ('done', 'failed', 'cancelled') THEN s.created + (g % 5000) * interval '1 ms' END,
       CASE WHEN s.status = 'running' THEN 'bench-worker-' || (g % 4) END,
       CASE WHEN s.status = 'running' THEN now() + interval '30 seconds' END,
       CASE WHEN g % 8 = 2 THEN 'order:' || g END,
       CASE WHEN s.status = 'done' THEN json_build_object('ok', true, 'n', g) END,
       CASE WHEN s.status = 'failed' THEN 'ConnectionRefusedError: [Errno 111] connection refused by smtp:587' END
FROM generate_series(1, {jobs}) AS g,
LATERAL (SELECT now() - ({jobs} - g) * interval '{spacing} seconds' AS created,
                CASE WHEN g > {jobs} - 6000 AND g % 2 = 0 THEN CASE WHEN g % 15 = 0 THEN 'running' ELSE 'pending' END
                     WHEN g % 19 = 0 THEN 'failed'
                     WHEN g % 250 = 7 THEN 'cancelled'
                     ELSE 'done' END AS status) AS s
"""

ATTEMPTS = """
INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type,
                             error_message, traceback)
SELECT j.id, a, 'bench-worker-' || (j.id % 4), j.created_at + a * interval '1 s',
       CASE WHEN j.status = 'running' AND a = j.attempt THEN NULL
            ELSE j.created_at + a * interval '1 s' + interval '40 ms' END,
       CASE WHEN j.status = 'running' AND a = j.attempt THEN NULL
            WHEN j.status = 'failed' OR a < j.attempt THEN 'error' ELSE 'done' END,
       CASE WHEN j.status = 'failed' OR a < j.attempt THEN 'ConnectionRefusedError' END,
       CASE WHEN j.status = 'failed' OR a < j.attempt THEN '[Errno 111] connection refused by smtp:587' END,
       CASE WHEN j.status = 'failed' OR a < j.attempt
            THEN repeat('  File "app/mail.py", line 42, in send' || chr(10), 8) || 'ConnectionRefusedError: [Errno 111]'
       END
FROM leased_jobs AS j, generate_series(1, j.attempt) AS a
WHERE j.status IN ('failed', 'running') OR j.id % 10 = 0
"""

# The same jobs on SQLite and MariaDB (without attempt rows: the overview and /metrics read none).
SQLITE_FILL = """
WITH RECURSIVE n (g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < {jobs}),
now (t) AS (SELECT (julianday('now') - 2440587.5) * 86400.0),
s AS (SELECT g, t AS now, t - ({jobs} - g) * {spacing} AS created,
             CASE WHEN g > {jobs} - 6000 AND g % 2 = 0 THEN CASE WHEN g % 15 = 0 THEN 'running' ELSE 'pending' END
                  WHEN g % 19 = 0 THEN 'failed' WHEN g % 250 = 7 THEN 'cancelled' ELSE 'done' END AS status
      FROM n, now)
INSERT INTO leased_jobs (task_name, queue_name, status, priority, args, kwargs, attempt, max_attempts,
                         lease_seconds, run_after, created_at, finished_at, lease_owner, lease_expires_at,
                         idempotency_key, result, last_error)
SELECT json_extract('["send_receipt", "send_newsletter", "charge_card", "refund", "resize_image", "sync_inventory",
                      "build_report", "notify_owner"]', '$[' || (g % 8) || ']'),
       json_extract('["default", "default", "default", "mail", "mail", "billing", "billing", "images", "images",
                      "reports"]', '$[' || (g % 10) || ']'),
       status, (g % 3) - 1, json_array(g, 'customer' || g || '@example.com'), '{}',
       CASE status WHEN 'pending' THEN 0 WHEN 'failed' THEN 3 WHEN 'done' THEN 1 + (g % 13 = 0) ELSE 1 END,
       3, 30, created + CASE WHEN status = 'pending' AND g % 10 = 0 THEN 1800 ELSE 0 END, created,
       CASE WHEN status IN ('done', 'failed', 'cancelled') THEN created + (g % 5000) * 0.001 END,
       CASE WHEN status = 'running' THEN 'bench-worker-' || (g % 4) END,
       CASE WHEN status = 'running' THEN now + 30 END,
       CASE WHEN g % 8 = 2 THEN 'order:' || g END,
       CASE WHEN status = 'done' THEN json_object('ok', json('true'), 'n', g) END,
       CASE WHEN status = 'failed' THEN 'ConnectionRefusedError: [Errno 111] connection refused by smtp:587' END
FROM s
"""

MARIADB_FILL = """
INSERT INTO leased_jobs (task_name, queue_name, status, priority, args, kwargs, attempt, max_attempts,
                         lease_seconds, run_after, created_at, finished_at, lease_owner, lease_expires_at,
                         idempotency_key, result, last_error)
SELECT ELT(g % 8 + 1, 'send_receipt', 'send_newsletter', 'charge_card', 'refund', 'resize_image', 'sync_inventory',
           'build_report', 'notify_owner'),
       ELT(g % 10 + 1, 'default', 'default', 'default', 'mail', 'mail', 'billing', 'billing', 'images', 'images',
           'reports'),
       status, (g % 3) - 1, JSON_ARRAY(g, CONCAT('customer', g, '@example.com')), '{}',
       CASE status WHEN 'pending' THEN 0 WHEN 'failed' THEN 3 WHEN 'done' THEN 1 + (g % 13 = 0) ELSE 1 END,
       3, 30, created + IF(status = 'pending' AND g % 10 = 0, 1800, 0), created,
       IF(status IN ('done', 'failed', 'cancelled'), created + (g % 5000) * 0.001, NULL),
       IF(status = 'running', CONCAT('bench-worker-', g % 4), NULL),
       IF(status = 'running', now + 30, NULL),
       IF(g % 8 = 2, CONCAT('order:', g), NULL),
       IF(status = 'done', JSON_OBJECT('ok', true, 'n', g), NULL),
       IF(status = 'failed', 'ConnectionRefusedError: [Errno 111] connection refused by smtp:587', NULL)
FROM (SELECT CAST(seq AS SIGNED) AS g, UNIX_TIMESTAMP(NOW(6)) AS now,
             UNIX_TIMESTAMP(NOW(6)) - ({jobs} - seq) * {spacing} AS created,
             CASE WHEN seq > {jobs} - 6000 AND seq % 2 = 0 THEN IF(seq % 15 = 0, 'running', 'pending')
                  WHEN seq % 19 = 0 THEN 'failed' WHEN seq % 250 = 7 THEN 'cancelled' ELSE 'done' END AS status
      FROM seq_1_to_{jobs}) AS s
"""

# What the workers' finishes would have counted (migration 0011): per minute, queue, task and
# worker, four workers sharing the jobs.
COUNTED = {
    "postgres": """
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT date_trunc('minute', finished_at), queue_name, task_name, 'bench-worker-' || (id % 4),
       count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'failed')
FROM leased_jobs WHERE status IN ('done', 'failed') GROUP BY 1, 2, 3, 4
""",
    "sqlite": """
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT CAST(finished_at / 60 AS INTEGER) * 60, queue_name, task_name, 'bench-worker-' || (id % 4),
       sum(status = 'done'), sum(status = 'failed')
FROM leased_jobs WHERE status IN ('done', 'failed') GROUP BY 1, 2, 3, 4
""",
    "mariadb": """
INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed)
SELECT FLOOR(finished_at / 60) * 60, queue_name, task_name, CONCAT('bench-worker-', id % 4),
       SUM(status = 'done'), SUM(status = 'failed')
FROM leased_jobs WHERE status IN ('done', 'failed') GROUP BY 1, 2, 3, 4
""",
}

OTHER_WORKERS = """
INSERT INTO leased_workers (id, host, pid, concurrency, queues, tasks, started_at, last_seen_at)
SELECT concat('bench-worker-', n), concat('host-', n), 1000 + n, 8, NULL, '["send_receipt", "charge_card"]',
       {now}, {now}
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) AS workers
"""

WORKERS = """
INSERT INTO leased_workers (id, host, pid, concurrency, queues, tasks)
SELECT 'bench-worker-' || n, 'host-' || n, 1000 + n, 8, NULL, '["send_receipt", "charge_card"]'
FROM generate_series(0, 3) AS n
"""


def fill(url: str, jobs: int, spacing: float) -> None:
    app = Leased(url)
    app.backend.migrate()
    app.close()
    with psycopg.connect(url, autocommit=True) as connection:
        started = time.perf_counter()
        connection.execute(spaced(FILL, jobs, spacing))  # no parameters: `%` stays modulo
        connection.execute(ATTEMPTS)
        connection.execute(COUNTED["postgres"])
        connection.execute(WORKERS)
        connection.execute("ANALYZE")
        print(f"filled {jobs:,} jobs in {time.perf_counter() - started:.1f}s")


def spaced(fill_sql: str, jobs: int, spacing: float) -> str:
    return fill_sql.replace("{jobs}", str(int(jobs))).replace("{spacing}", repr(float(spacing)))


def fill_other(url: str, database: str, jobs: int, spacing: float) -> None:
    """SQLite or MariaDB: the same jobs through their own SQL, and four workers."""
    app = Leased(url)
    app.backend.migrate()
    started = time.perf_counter()
    # One write transaction of the backend's own (its database part's), on its own connection.
    with app.backend.database.transaction() as connection:
        cursor = connection.cursor()
        if database == "sqlite":
            cursor.execute(spaced(SQLITE_FILL, jobs, spacing))
            cursor.execute(COUNTED["sqlite"])
            cursor.execute(OTHER_WORKERS.replace("{now}", "(julianday('now') - 2440587.5) * 86400.0")
                           .replace("concat('bench-worker-', n)", "'bench-worker-' || n")
                           .replace("concat('host-', n)", "'host-' || n"))
            cursor.execute("ANALYZE")
        else:
            cursor.execute(spaced(MARIADB_FILL, jobs, spacing))
            cursor.execute(COUNTED["mariadb"])
            cursor.execute(OTHER_WORKERS.replace("{now}", "UNIX_TIMESTAMP(NOW(6))"))
            cursor.execute("ANALYZE TABLE leased_jobs")
    app.close()
    print(f"filled {jobs:,} jobs in {time.perf_counter() - started:.1f}s")


def pages(url: str, jobs: int) -> dict[str, str]:
    app = Leased(url)
    (failed,) = app.list_jobs(status="failed", before_id=jobs // 2, limit=1)
    failed = failed.id
    app.close()
    return {
        "overview": "/",
        "jobs, first page": "/jobs",
        "jobs, failed of one task": "/jobs?status=failed&task=charge_card",
        "jobs, queue + status": "/jobs?queue=reports&status=done",
        "jobs, rare status": "/jobs?status=running",
        "jobs, deep page (newest first)": f"/jobs?before_id={jobs // 10}",
        "jobs, deep page (oldest first)": f"/jobs?order=oldest&after_id={jobs // 2}",
        "jobs, deep filtered page": f"/jobs?status=failed&before_id={jobs // 10}",
        "jobs, previous page": f"/jobs?after_id={jobs // 2}",
        "search by id": f"/jobs?q={jobs // 3}",
        "search by idempotency key": f"/jobs?q=order:{(jobs // 2) // 8 * 8 + 2}",
        "search, no match": "/jobs?q=nothing-like-this",
        "job page (failed, 3 attempts)": f"/jobs/{failed}",
        "metrics": "/metrics",
    }


def page_times(app: Leased, targets: dict[str, str], repetitions: int) -> dict[str, tuple[list[float], str]]:
    """Each page rendered once to warm up, then `repetitions` times: {name: (milliseconds, last body)}."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    client = TestClient(dashboard(app))
    found = {}
    for name, path in targets.items():
        response = client.get(path)  # warm: connections, template compilation, caches
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
        times = []
        for _ in range(repetitions):
            started = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
        found[name] = (times, response.text)
    return found


def measure(url: str, targets: dict[str, str], repetitions: int) -> None:
    app = Leased(url)
    print(f"\n{'page':34} {'median':>9} {'min':>9} {'max':>9}  rows")
    for name, (times, text) in page_times(app, targets, repetitions).items():
        path = targets[name]
        rows = text.count('data-label="ID"') if path.startswith("/jobs?") or path == "/jobs" else ""
        print(f"{name:34} {statistics.median(times):7.1f}ms {min(times):7.1f}ms {max(times):7.1f}ms  {rows}")
    app.close()


def explain(url: str, jobs: int) -> None:
    from leased.backends.postgres.queries import QUERIES

    none = {"status": None, "queue_name": None, "task_name": None, "worker_id": None, "search": None,
            "search_id": None, "before_id": None, "after_id": None, "limit": 51}
    plans = {
        "counts": ("counts", {}),
        "oldest_due": ("oldest_due", {}),
        "finished_since": ("finished_since", {"window_seconds": 3600.0}),
        "list_workers": ("list_workers", {}),
        "task_names": ("task_names", {}),
        "list_jobs_newest (failed, task)": ("list_jobs_newest",
                                            {**none, "status": "failed", "task_name": "charge_card"}),
        "list_jobs_newest (queue, status)": ("list_jobs_newest",
                                             {**none, "status": "done", "queue_name": "reports"}),
        "list_jobs_newest (deep)": ("list_jobs_newest", {**none, "before_id": jobs // 10}),
        "list_jobs_oldest (previous page)": ("list_jobs_oldest", {**none, "after_id": jobs // 2}),
        "list_jobs_newest (search key)": ("list_jobs_newest", {**none, "search": "order:10"}),
        "list_jobs_newest (search, no match)": ("list_jobs_newest", {**none, "search": "nothing-like-this"}),
    }
    with psycopg.connect(url) as connection:
        for title, (query, params) in plans.items():
            rows = connection.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + QUERIES[query], params).fetchall()
            print(f"\n-- {title}\n" + "\n".join(row[0] for row in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--explain", action="store_true",
                        help="Print EXPLAIN ANALYZE of the queries behind the pages.")
    parser.add_argument("--keep", action="store_true", help="Keep the schema (its name is printed) for a look.")
    parser.add_argument("--schema", help="Measure an existing (kept) schema instead of filling a new one.")
    parser.add_argument("--spacing", type=float, default=2.6,
                        help="Seconds between two jobs' creation (the newest is now): 2.6 spreads a million over a "
                             "month; 0.0036 puts them all in the last hour, as under 280 jobs a second.")
    parser.add_argument("--database", choices=["postgres", "sqlite", "mariadb"], default="postgres")
    options = parser.parse_args()
    if options.database != "postgres":
        return other_database(options)

    schema = options.schema or f"leased_bench_{uuid.uuid4().hex[:8]}"
    url = f"{POSTGRES_URL}?options={quote(f'-csearch_path={schema}')}"
    if not options.schema:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        if not options.schema:
            fill(url, options.jobs, options.spacing)
        measure(url, pages(url, options.jobs), options.repetitions)
        if options.explain:
            explain(url, options.jobs)
    finally:
        if options.keep or options.schema:
            print(f"\nschema kept: {schema} (measure again with --schema {schema})")
        else:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
                connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def other_database(options: argparse.Namespace) -> None:
    """SQLite (a file in the temporary folder) or MariaDB (a database of its own), else as main()."""
    import tempfile

    name = options.schema or f"leased_bench_{uuid.uuid4().hex[:8]}"
    if options.database == "sqlite":
        path = f"{tempfile.gettempdir()}/{name}.db"
        url, drop = f"sqlite:///{path}", lambda: os.remove(path)
    else:
        from leased.backends.mariadb.driver import DRIVER

        server = DRIVER.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
        server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        url, drop = f"{MARIADB_URL}/{name}", lambda: server.cursor().execute(f"DROP DATABASE `{name}`")
    try:
        if not options.schema:
            fill_other(url, options.database, options.jobs, options.spacing)
        measure(url, pages(url, options.jobs), options.repetitions)
    finally:
        if options.keep or options.schema:
            print(f"\nkept: {name} (measure again with --database {options.database} --schema {name})")
        else:
            drop()


if __name__ == "__main__":
    main()
