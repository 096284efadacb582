#!/usr/bin/env python3
"""leased's MariaDB hot path on each driver, side by side: mysqlclient (C) against PyMySQL (pure Python).

    PYTHONPATH=src /work/venv/bin/python bench/mariadb_drivers.py              # 3 rounds
    PYTHONPATH=src /work/venv/bin/python bench/mariadb_drivers.py --rounds 5 --jobs 5000

Both drivers must be installed. Each round runs every step once per driver, the drivers alternating
(A B, B A, ...), on one scratch database emptied before each, through leased's own backend (the one
seam, leased.backends.mariadb.driver, switched between them):

- enqueue: Task.enqueue, one job per call (one transaction and commit each);
- enqueue_many: Task.enqueue_many in batches of 500;
- claim: backend.claim of 50 jobs at a time until none is left (what a worker's claimer sends);
- finish: backend.finish of those claims, 50 ends per call, each `done`;
- drain: app.run_until_empty(concurrency=10) of as many jobs (enqueued by enqueue_many first, not
  timed): a worker's claimer, slots, completer and lease keeper on the driver, end to end.

Each line gives the median round's jobs/s per driver and the ratio PyMySQL / mysqlclient, with the
median CPU per job of this process (where a driver's cost shows; the server's work is the same).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import mariadb_connect

from leased import Leased
from leased.backends.base import AttemptEnd, ClaimRequest
from leased.backends.mariadb import driver
from leased.jobs import Outcome

DRIVERS = ("mysqlclient", "pymysql")
STEPS = ("enqueue", "enqueue_many", "claim", "finish", "drain")
BATCH, BULK = 50, 500
WORKER = "bench-drivers"


def noop(n: int) -> None:
    pass


def one_round(url: str, name: str, jobs: int) -> dict[str, tuple[float, float]]:
    """Each step's (seconds, CPU seconds of this process) for `jobs` jobs on driver `name`."""
    driver.DRIVER = driver.load_driver(name)  # leased's own connections, from here on
    app = Leased(url)
    task = app.task(name="noop")(noop)
    app.migrate()
    app.backend.connection()  # a connection of this driver, opened before the clock starts
    timings: dict[str, tuple[float, float]] = {}

    def timed(step: str, work) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        work()
        timings[step] = (time.perf_counter() - wall, time.process_time() - cpu)

    _empty(app)
    timed("enqueue", lambda: [task.enqueue(n) for n in range(jobs)])
    _empty(app)
    timed("enqueue_many", lambda: [task.enqueue_many([(n,) for n in range(start, min(start + BULK, jobs))])
                                   for start in range(0, jobs, BULK)])
    claims: list = []

    def claim_all() -> None:
        while batch := app.backend.claim(ClaimRequest(WORKER, ("noop",), None, BATCH)):
            claims.append(batch)

    timed("claim", claim_all)
    finished = sum(len(batch) for batch in claims)
    if finished != jobs:
        raise RuntimeError(f"{name}: claimed {finished} of {jobs} jobs")

    def finish_all() -> None:
        for batch in claims:
            kept = app.backend.finish([AttemptEnd(claimed.lease, Outcome.DONE, "null") for claimed in batch])
            if not all(kept):
                raise RuntimeError(f"{name}: a finish lost its lease")

    timed("finish", finish_all)
    _empty(app)
    task.enqueue_many([(n,) for n in range(jobs)])

    def drain() -> None:
        stats = app.run_until_empty(concurrency=10)
        if stats.done != jobs:
            raise RuntimeError(f"{name}: the drain finished {stats.done} of {jobs} jobs")

    timed("drain", drain)
    app.close()
    return timings


def _empty(app: Leased) -> None:
    connection = app.backend.connection()
    with connection.cursor() as cursor:
        for table in ("leased_attempts", "leased_jobs"):
            cursor.execute(f"DELETE FROM {table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=4_000)
    options = parser.parse_args()
    for name in DRIVERS:
        driver.load_driver(name)  # both installed, or say which is not
    database = f"bench_drivers_{uuid.uuid4().hex[:8]}"
    server = mariadb_connect()
    server.cursor().execute(f"CREATE DATABASE `{database}`")
    url = f"mariadb://root@127.0.0.1:3306/{database}"
    results: dict[str, dict[str, list[tuple[float, float]]]] = {name: {step: [] for step in STEPS} for name in DRIVERS}
    try:
        for number in range(options.rounds):
            for name in DRIVERS if number % 2 == 0 else reversed(DRIVERS):
                for step, timing in one_round(url, name, options.jobs).items():
                    results[name][step].append(timing)
    finally:
        server.cursor().execute(f"DROP DATABASE `{database}`")
        server.close()
    print(f"{options.jobs} jobs per step, median of {options.rounds} rounds (MariaDB, one connection, one thread)")
    print(f"{'step':<14}{'mysqlclient jobs/s':>20}{'PyMySQL jobs/s':>16}{'ratio':>8}"
          f"{'CPU µs/job C':>15}{'CPU µs/job Py':>15}")
    for step in STEPS:
        rates = {name: options.jobs / statistics.median(wall for wall, _ in results[name][step]) for name in DRIVERS}
        cpu = {name: 1e6 * statistics.median(c for _, c in results[name][step]) / options.jobs for name in DRIVERS}
        print(f"{step:<14}{rates['mysqlclient']:>20,.0f}{rates['pymysql']:>16,.0f}"
              f"{rates['pymysql'] / rates['mysqlclient']:>8.2f}{cpu['mysqlclient']:>15.0f}{cpu['pymysql']:>15.0f}")


if __name__ == "__main__":
    main()
