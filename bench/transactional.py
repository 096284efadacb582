#!/usr/bin/env python3
"""What a transactional handler costs: its drain against the same handler writing on a connection of
its own, on each database, and on SQLite what it costs another writer. Side by side, in one run.

    PYTHONPATH=src python3.12 bench/transactional.py                         # all three, 3 rounds
    PYTHONPATH=src python3.12 bench/transactional.py --backends sqlite --jobs 500 --rounds 1   # smoke

Each handler inserts one row into an effects table of the app's own:
- transactional: `@app.task(transactional=True)`, the row written on context.connection, committed
  with the job's end, fenced on the lease (engine/transactional.py);
- plain: the same INSERT on a connection the handler's thread keeps, committed as it runs (what a
  handler without leased's transaction does: at-least-once).
One worker in this process (--concurrency 8) drains --jobs jobs enqueued beforehand; a round times
each kind once, in alternating order, on a fresh database; ratios are of medians (transactional
over plain: above 1 is slower).

SQLite's one write lock: while the worker drains handlers that hold their transaction for
--hold-millis (a sleep inside it; plain: the same sleep, no transaction), a producer thread
enqueues one job at a time, and each enqueue's latency is recorded: its p50 and p99 beside the
plain handler's. That is what a transactional handler costs the other writers of the file.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from common import drop_fresh_database, fresh_database, percentile

from leased import Leased

BACKENDS = ("sqlite", "postgres", "mariadb")
CONCURRENCY = 8


class Store:
    """A fresh database with an effects table, and leased on it."""

    def __init__(self, backend: str):
        self.backend, self.name = backend, f"bench_tx_{uuid.uuid4().hex[:8]}"
        self.url, self.path = fresh_database(backend, self.name, "transactional")
        self.app = Leased(self.url)
        self.app.migrate()
        with self.connect() as connection:
            self.execute(connection, "CREATE TABLE effects (job_id BIGINT NOT NULL, note VARCHAR(20))")

    def connect(self):
        if self.backend == "sqlite":
            return _Closing(sqlite3.connect(self.path, timeout=30, isolation_level=None))
        if self.backend == "postgres":
            import psycopg

            return psycopg.connect(self.url, autocommit=True)
        from leased.backends.mariadb.backend import connect_arguments
        from leased.backends.mariadb.driver import DRIVER

        arguments, _ = connect_arguments(self.url)
        return _Closing(DRIVER.connect(**{**arguments, "autocommit": True}))

    def execute(self, connection, statement: str, params: tuple = ()) -> None:
        cursor = connection.cursor()
        cursor.execute(statement if self.backend == "sqlite" else statement.replace("?", "%s"), params)

    def close(self) -> None:
        self.app.close()
        drop_fresh_database(self.backend, self.name, self.path)


class _Closing:
    """A DB-API connection usable in `with` that closes it (sqlite3's and PyMySQL's `with` do not)."""

    def __init__(self, connection):
        self.connection = connection

    def __getattr__(self, name):
        return getattr(self.connection, name)

    def __enter__(self):
        return self.connection

    def __exit__(self, *exc) -> None:
        self.connection.close()


def register(store: Store, transactional: bool, hold_seconds: float = 0.0):
    own = threading.local()

    @store.app.task(name="effect", takes_context=True, transactional=transactional, max_attempts=1)
    def effect(context) -> None:
        if transactional:
            connection = context.connection
        else:
            if getattr(own, "connection", None) is None:
                own.connection = store.connect()
            connection = own.connection
        store.execute(connection, "INSERT INTO effects (job_id, note) VALUES (?, ?)", (context.job_id, "x"))
        if hold_seconds:
            time.sleep(hold_seconds)

    @store.app.task(name="other", max_attempts=1)
    def other() -> None:
        pass

    return effect, other


def drain(backend: str, jobs: int, transactional: bool) -> float:
    store = Store(backend)
    try:
        effect, _ = register(store, transactional)
        effect.enqueue_many([()] * jobs)
        began = time.perf_counter()
        stats = store.app.worker(concurrency=CONCURRENCY, poll_interval=0.05).run(stop_when_idle=True)
        seconds = time.perf_counter() - began
        assert stats.done == jobs, stats
        with store.connect() as connection:
            cursor = connection.cursor()
            cursor.execute("SELECT count(*) FROM effects")
            assert cursor.fetchone()[0] == jobs, "a job's row is missing"
        return seconds
    finally:
        store.close()


def sqlite_writer_latency(jobs: int, hold_millis: float, transactional: bool) -> dict[str, float]:
    store = Store("sqlite")
    try:
        effect, other = register(store, transactional, hold_millis / 1000)
        effect.enqueue_many([()] * jobs)
        latencies: list[float] = []
        done = threading.Event()

        def produce() -> None:
            while not done.is_set():
                began = time.perf_counter()
                other.enqueue()
                latencies.append(time.perf_counter() - began)
                done.wait(0.005)

        worker = store.app.worker(concurrency=CONCURRENCY, poll_interval=0.05, queues=["default"])
        producer = threading.Thread(target=produce)
        producer.start()
        worker.run(stop_when_idle=True)  # the producer's jobs too: they are drained with the rest
        done.set()
        producer.join()
        return {"p50_ms": percentile(latencies, 0.5) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000,
                "enqueues": len(latencies)}
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold-millis", type=float, default=5.0)
    parser.add_argument("--writer-jobs", type=int, default=400)
    options = parser.parse_args()
    print(f"leased {os.environ.get('GIT_DESCRIBE', '')} jobs={options.jobs} rounds={options.rounds} "
          f"concurrency={CONCURRENCY} load={os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for backend in options.backends.split(","):
        times: dict[bool, list[float]] = {True: [], False: []}
        for round_number in range(options.rounds):
            for transactional in ((True, False) if round_number % 2 == 0 else (False, True)):
                seconds = drain(backend, options.jobs, transactional)
                times[transactional].append(seconds)
                print(f"{backend} round {round_number + 1} {'transactional' if transactional else 'plain'}: "
                      f"{options.jobs / seconds:,.0f} jobs/s", flush=True)
        tx, plain = statistics.median(times[True]), statistics.median(times[False])
        rows.append((backend, options.jobs / tx, options.jobs / plain, tx / plain))
    print("\n| database | transactional jobs/s | plain jobs/s | transactional / plain time |")
    print("|---|---:|---:|---:|")
    for backend, tx_rate, plain_rate, ratio in rows:
        print(f"| {backend} | {tx_rate:,.0f} | {plain_rate:,.0f} | {ratio:.2f}x |")
    if "sqlite" in options.backends.split(","):
        print(f"\nSQLite: another writer's enqueue while handlers hold {options.hold_millis:g} ms each "
              f"({options.writer_jobs} jobs, concurrency {CONCURRENCY})")
        print("| handlers | enqueue p50 | enqueue p99 | enqueues |")
        print("|---|---:|---:|---:|")
        for transactional in (False, True):
            seen = sqlite_writer_latency(options.writer_jobs, options.hold_millis, transactional)
            print(f"| {'transactional' if transactional else 'plain'} | {seen['p50_ms']:.1f} ms "
                  f"| {seen['p99_ms']:.1f} ms | {seen['enqueues']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
