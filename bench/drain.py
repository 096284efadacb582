"""Drain N pre-queued no-op jobs with one worker and report jobs/s, per backend.

    python bench/drain.py                      # SQLite (temp file), the local PostgreSQL and MariaDB
    python bench/drain.py --jobs 10000 --concurrency 10 --backend sqlite
    python bench/drain.py --one-by-one --jobs 20000 --backend postgres   # one enqueue() per job

The jobs are enqueued in batches of 1,000 (enqueue_many), so the run is the drain rather than
thousands of enqueue round trips before it (one by one, 10,000 jobs took 37 s on PostgreSQL).
`--one-by-one` enqueues each job in a call of its own, as every run did before 2026-12-07: the
figures in docs/benchmarks.md that say "queued one by one", and the enqueue/s column of those
runs, were measured that way (the commands quoted beside them say --one-by-one). `--bulk`, the
earlier opt-in (every job in one enqueue_many), is still accepted and does what the default does,
so the commands quoted with it run as written; the drain after it is the same.

A measurement, not a test: run it by hand and compare runs on the same machine. Issue 5's suite
will put these figures side by side with the peers'.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from leased import Leased

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
BATCH = 1_000  # jobs per enqueue_many: one transaction and one statement each


def noop(n: int) -> None:
    return None


def drain(url: str, jobs: int, concurrency: int, one_by_one: bool = False) -> tuple[float, float]:
    app = Leased(url)
    task = app.task(name="bench.noop")(noop)
    started = time.perf_counter()
    if one_by_one:  # a round trip and a transaction per job
        for n in range(jobs):
            task.enqueue(n)
    else:
        for first in range(0, jobs, BATCH):
            task.enqueue_many([(n,) for n in range(first, min(jobs, first + BATCH))])
    enqueued = time.perf_counter()
    stats = app.run_until_empty(concurrency=concurrency)
    drained = time.perf_counter()
    assert stats.done == jobs, stats
    assert app.counts()["default"]["done"] == jobs
    app.close()
    return jobs / (enqueued - started), jobs / (drained - enqueued)


def postgres_url() -> tuple[str, callable]:
    import psycopg

    schema = f"leased_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')

    def drop() -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')

    return f"{POSTGRES_URL}?options=-csearch_path%3D{schema}", drop


def mariadb_url() -> tuple[str, callable]:
    from common import drop_mariadb_database, recreate_mariadb_database

    name = f"leased_bench_{uuid.uuid4().hex[:8]}"
    return recreate_mariadb_database(name), lambda: drop_mariadb_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "mariadb", "all"], default="all")
    parser.add_argument("--one-by-one", action="store_true",
                        help="enqueue each job in a call of its own (default: enqueue_many, 1,000 a call)")
    parser.add_argument("--bulk", action="store_true", help="the default now; accepted so earlier commands run")
    options = parser.parse_args()
    if options.bulk and options.one_by_one:
        parser.error("--bulk and --one-by-one are two ways to enqueue: give one of them")
    print(f"{'backend':10} {'jobs':>7} {'enqueue/s':>10} {'drain/s':>10}")
    if options.backend in ("sqlite", "all"):
        with tempfile.TemporaryDirectory() as folder:
            rates = drain(f"sqlite:///{Path(folder) / 'bench.db'}", options.jobs, options.concurrency,
                          options.one_by_one)
        print(f"{'sqlite':10} {options.jobs:>7} {rates[0]:>10.0f} {rates[1]:>10.0f}")
    for name, make_url in (("postgres", postgres_url), ("mariadb", mariadb_url)):
        if options.backend in (name, "all"):
            url, drop = make_url()
            try:
                rates = drain(url, options.jobs, options.concurrency, options.one_by_one)
            finally:
                drop()
            print(f"{name:10} {options.jobs:>7} {rates[0]:>10.0f} {rates[1]:>10.0f}")


if __name__ == "__main__":
    main()
