"""How long the job list and count_jobs take for pending jobs behind a long finished history, on
PostgreSQL or SQLite (docs/reliability.md, "Since migration 0019").

A fresh database (PostgreSQL's leased_bench_pending, dropped first; or a SQLite file in bench/work)
gets HISTORY finished jobs (written by SQL from one enqueued job) and PENDING pending ones
(enqueue_many); each read is timed 15 times, the median printed. Run it in two checkouts to
compare them:

    PYTHONPATH=src .venv/bin/python bench/pending_listing.py 1000000 50
    PYTHONPATH=src .venv/bin/python bench/pending_listing.py 1000000 200000
    PYTHONPATH=src .venv/bin/python bench/pending_listing.py 1000000 50 --backend sqlite
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from contextlib import closing
from typing import Any, Callable

import psycopg

from common import PG_ADMIN_URL, PG_HOST, PG_PORT, PG_USER, WORK, remove_sqlite
from leased import Leased

DATABASE = "leased_bench_pending"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("history", type=int, help="finished jobs")
    parser.add_argument("pending", type=int, help="pending jobs, enqueued after the history")
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    options = parser.parse_args()
    if options.backend == "postgres":
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
            admin.execute(f"CREATE DATABASE {DATABASE}")
        url = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{DATABASE}"
    else:
        WORK.mkdir(exist_ok=True)
        path = WORK / f"{DATABASE}.db"
        remove_sqlite(path)
        url = f"sqlite:///{path}"
    app = Leased(url)

    @app.task(name="t")
    def t(i: int) -> None:
        pass

    template = t.enqueue(-1).id
    if options.backend == "postgres":
        with psycopg.connect(url, autocommit=True) as connection:
            names = [row[0] for row in connection.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'leased_jobs' "
                "ORDER BY ordinal_position")]
            connection.execute(_history_sql(names, "%s", "now()"), (template, options.history))
            connection.execute("UPDATE leased_jobs SET status = 'done', finished_at = now() WHERE id = %s", (template,))
    else:
        with closing(sqlite3.connect(path)) as connection, connection:
            names = [row[1] for row in connection.execute("PRAGMA table_info(leased_jobs)")]
            connection.execute(_history_sql(names, "?", "0"), (template, options.history))
            connection.execute("UPDATE leased_jobs SET status = 'done', finished_at = 0 WHERE id = ?", (template,))
    for start in range(0, options.pending, 10_000):
        t.enqueue_many([(i,) for i in range(start, min(options.pending, start + 10_000))])
    if options.backend == "postgres":
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("VACUUM ANALYZE")
    else:
        with closing(sqlite3.connect(path)) as connection:
            connection.execute("ANALYZE")
    reads: dict[str, Callable[[], Any]] = {
        "a page of pending jobs, newest first": lambda: app.list_jobs(status="pending", limit=50),
        "a page of pending jobs, oldest first": lambda: app.list_jobs(status="pending", limit=50, order="oldest"),
        "the same, of one task": lambda: app.list_jobs(status="pending", task_name="t", limit=50, order="oldest"),
        "count of pending jobs": lambda: app.count_jobs(status="pending"),
        "count of one task's pending jobs": lambda: app.count_jobs(status="pending", task_name="t"),
        "a page of finished jobs, newest first": lambda: app.list_jobs(status="done", limit=50),
    }
    print(f"{options.backend}: {options.history:,} finished jobs, {options.pending:,} pending (medians of 15)")
    for label, read in reads.items():
        times = []
        for _ in range(15):
            started = time.perf_counter()
            read()
            times.append((time.perf_counter() - started) * 1000)
        print(f"  {label:40s} {statistics.median(times):8.2f} ms")
    app.close()
    if options.backend == "postgres":
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {DATABASE}")
    else:
        remove_sqlite(path)


def _history_sql(names: list[str], placeholder: str, now: str) -> str:
    """Finished copies of the template job (the first parameter), as many as the second says."""
    copied = ", ".join(name for name in names if name not in ("id", "status", "finished_at"))
    series = ("generate_series(2, {p})" if placeholder == "%s" else
              "(WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < {p}) SELECT i FROM n)")
    return (f"INSERT INTO leased_jobs ({copied}, status, finished_at) SELECT {copied}, 'done', {now} "
            f"FROM (SELECT * FROM leased_jobs WHERE id = {placeholder}) AS template, {series.format(p=placeholder)}")

if __name__ == "__main__":
    main()
