"""One job per call: leased's enqueue against the database's own floor, on each store, in one run.

For each store, rounds of `--calls` calls each, the paths interleaved round by round so that what
else the machine does falls on all of them alike:

- bare: one connection, an INSERT of a row of the same size (the same columns and values as
  leased's job row) into a table with only a primary key, and a COMMIT;
- leased_table: the same INSERT that leased sends, into leased's own `leased_jobs` (its indexes,
  its defaults), by the driver directly: what the database itself does for one enqueue;
- leased: `task.enqueue(n)`, the public call, end to end (validation, the insert, the wake-up).

It prints calls/s (median of the rounds, with the range), p50 and p99 of one call (over every call
of every round), the CPU this process spent per call (steadier than the wall clock on a shared
machine), and leased ÷ bare and leased ÷ leased_table.

    PYTHONPATH=src python bench/enqueue_one.py --rounds 7 --calls 2000
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
import uuid
from typing import Callable

from common import (WORK, drop_database, drop_mariadb_database, leased_commit,
                    mariadb_connect, recreate_database, recreate_mariadb_database, remove_sqlite)

ARGS = "[1]"
KWARGS = "{}"
BARE_COLUMNS = ("task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds, run_after, "
                "created_at, status, attempt")


def _noop(n: int) -> None:
    return None


class Store:
    """One database: its three paths, each a callable doing one call."""

    name: str

    def _open_leased(self, url: str) -> None:
        """leased on `url`: its schema made, and one job enqueued (the pool and the schema check, once)."""
        from leased import Leased

        self.app = Leased(url)
        self.app.migrate()
        self.task = self.app.task(name="bench.noop")(_noop)
        self.task.enqueue(0)

    def paths(self) -> dict[str, Callable[[int], object]]:
        raise NotImplementedError

    def enqueue(self, n: int) -> object:
        return self.task.enqueue(1)

    def close(self) -> None:
        pass


class PostgresStore(Store):
    name = "postgres"
    database = "leased_bench_enqueue_one"

    def __init__(self) -> None:
        import psycopg

        url = recreate_database(self.database)
        self._open_leased(url)
        self.raw = psycopg.connect(url, autocommit=True)
        self.raw.execute("CREATE TABLE bare (id bigserial PRIMARY KEY, task_name text NOT NULL, "
                         "queue_name text NOT NULL, args json NOT NULL, kwargs json NOT NULL, priority int NOT NULL,"
                         " max_attempts int NOT NULL, lease_seconds float8 NOT NULL, run_after timestamptz NOT NULL,"
                         " created_at timestamptz NOT NULL, status text NOT NULL, attempt int NOT NULL)")

    def paths(self) -> dict[str, Callable[[int], object]]:
        bare = (f"INSERT INTO bare ({BARE_COLUMNS}) VALUES ('bench.noop', 'default', %s::json, %s::json, 0, 3, "
                "300, now(), now(), 'pending', 0)")
        table = (f"INSERT INTO leased_jobs ({BARE_COLUMNS}) VALUES ('bench.noop', 'default', %s::json, %s::json, 0, 3,"
                 " 300, now(), now(), 'pending', 0) RETURNING id")
        raw = self.raw
        return {"bare": lambda n: raw.execute(bare, (ARGS, KWARGS)),
                "leased_table": lambda n: raw.execute(table, (ARGS, KWARGS)).fetchone(),
                "leased": self.enqueue}

    def close(self) -> None:
        self.raw.close()
        self.app.close()
        drop_database(self.database)


class MariaDBStore(Store):
    name = "mariadb"
    database = "leased_bench_enqueue_one"

    def __init__(self) -> None:
        url = recreate_mariadb_database(self.database)
        self._open_leased(url)
        self.raw = mariadb_connect(self.database)
        with self.raw.cursor() as cursor:
            cursor.execute("CREATE TABLE bare (id BIGINT AUTO_INCREMENT PRIMARY KEY, task_name VARCHAR(255) NOT NULL,"
                           " queue_name VARCHAR(255) NOT NULL, args JSON NOT NULL, kwargs JSON NOT NULL,"
                           " priority INT NOT NULL, max_attempts INT NOT NULL, lease_seconds DOUBLE NOT NULL,"
                           " run_after DATETIME(6) NOT NULL, created_at DATETIME(6) NOT NULL,"
                           " status VARCHAR(16) NOT NULL, attempt INT NOT NULL) ENGINE=InnoDB")

    def paths(self) -> dict[str, Callable[[int], object]]:
        values = "VALUES ('bench.noop', 'default', %s, %s, 0, 3, 300, NOW(6), NOW(6), 'pending', 0)"
        bare = f"INSERT INTO bare ({BARE_COLUMNS}) {values}"
        table = f"INSERT INTO leased_jobs ({BARE_COLUMNS}) {values} RETURNING id"
        cursor = self.raw.cursor()

        def run(statement: str) -> None:
            cursor.execute(statement, (ARGS, KWARGS))
            cursor.fetchall()

        return {"bare": lambda n: run(bare), "leased_table": lambda n: run(table),
                "leased": self.enqueue}

    def close(self) -> None:
        self.raw.close()
        self.app.close()
        drop_mariadb_database(self.database)


class SQLiteStore(Store):
    name = "sqlite"

    def __init__(self) -> None:
        WORK.mkdir(parents=True, exist_ok=True)
        self.path = WORK / f"enqueue-one-{uuid.uuid4().hex[:8]}.db"
        self._open_leased(f"sqlite:///{self.path}")
        # leased's own connection settings (WAL, synchronous=NORMAL), on a connection of the bench's.
        self.raw = sqlite3.connect(self.path, isolation_level=None)
        self.raw.execute("PRAGMA synchronous = NORMAL")
        self.raw.execute("PRAGMA busy_timeout = 5000")
        assert self.raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        self.raw.execute("CREATE TABLE bare (id INTEGER PRIMARY KEY, task_name TEXT NOT NULL, queue_name TEXT NOT NULL,"
                         " args TEXT NOT NULL, kwargs TEXT NOT NULL, priority INTEGER NOT NULL, max_attempts INTEGER"
                         " NOT NULL, lease_seconds REAL NOT NULL, run_after REAL NOT NULL, created_at REAL NOT NULL,"
                         " status TEXT NOT NULL, attempt INTEGER NOT NULL)")

    def paths(self) -> dict[str, Callable[[int], object]]:
        now = "((julianday('now') - 2440587.5) * 86400.0)"
        values = f"VALUES ('bench.noop', 'default', ?, ?, 0, 3, 300, {now}, {now}, 'pending', 0)"
        bare = f"INSERT INTO bare ({BARE_COLUMNS}) {values}"
        table = f"INSERT INTO leased_jobs ({BARE_COLUMNS}) {values} RETURNING id"
        raw = self.raw

        def run(statement: str) -> None:
            raw.execute("BEGIN IMMEDIATE")
            raw.execute(statement, (ARGS, KWARGS)).fetchall()
            raw.execute("COMMIT")

        return {"bare": lambda n: run(bare), "leased_table": lambda n: run(table),
                "leased": self.enqueue}

    def close(self) -> None:
        self.raw.close()
        self.app.close()
        remove_sqlite(self.path)


STORES: dict[str, type[Store]] = {"postgres": PostgresStore, "mariadb": MariaDBStore, "sqlite": SQLiteStore}


def measure(store: Store, rounds: int, calls: int, chunk: int = 100) -> dict[str, dict[str, float]]:
    """Each round runs every path `calls` times, in chunks of `chunk` calls taken in turn, so a
    burst of other work on the machine lands on every path alike. A path's rate is its calls over
    its own time in the round (median of the rounds); latencies are every call's."""
    paths = store.paths()
    rates: dict[str, list[float]] = {name: [] for name in paths}
    latencies: dict[str, list[float]] = {name: [] for name in paths}
    cpu = dict.fromkeys(paths, 0.0)  # this process's CPU: what a call costs the caller, whatever the load
    for call in paths.values():  # warm each path (statement caches, the pool)
        for n in range(200):
            call(n)
    clock = time.perf_counter
    for _ in range(rounds):
        spent = dict.fromkeys(paths, 0.0)
        for _ in range(calls // chunk):
            for name, call in paths.items():
                times = latencies[name]
                started, cpu_started = clock(), time.process_time()
                for n in range(chunk):
                    before = clock()
                    call(n)
                    times.append(clock() - before)
                spent[name] += clock() - started
                cpu[name] += time.process_time() - cpu_started
        for name in paths:
            rates[name].append((calls // chunk) * chunk / spent[name])
    out = {}
    for name in paths:
        ordered = sorted(latencies[name])
        out[name] = {"rate": statistics.median(rates[name]), "low": min(rates[name]), "high": max(rates[name]),
                     "p50_ms": 1000 * ordered[len(ordered) // 2], "p99_ms": 1000 * ordered[int(len(ordered) * 0.99)],
                     "cpu_us": 1e6 * cpu[name] / len(ordered)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="postgres,mariadb,sqlite")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", help="also write the figures to this file")
    options = parser.parse_args()
    print(f"leased {leased_commit()}, {options.rounds} rounds of {options.calls} calls per path")
    results = {}
    for name in options.stores.split(","):
        store = STORES[name]()
        try:
            results[name] = figures = measure(store, options.rounds, options.calls)
        finally:
            store.close()
        for path, figure in figures.items():
            print(f"{name:9} {path:13} {figure['rate']:9,.0f}/s ({figure['low']:,.0f}–{figure['high']:,.0f})"
                  f"  p50 {figure['p50_ms']:.3f} ms  p99 {figure['p99_ms']:.3f} ms"
                  f"  client CPU {figure['cpu_us']:.0f} µs")
        leased = figures["leased"]["rate"]
        print(f"{name:9} leased ÷ bare {leased / figures['bare']['rate']:.2f}×, "
              f"leased ÷ leased_table {leased / figures['leased_table']['rate']:.2f}×")
    if options.json:
        with open(options.json, "w") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
