"""Does pruning slow claiming? Drain jobs while a pruner deletes N old finished jobs, per backend.

    python bench/prune_under_load.py                          # N = 1,000,000, both backends
    python bench/prune_under_load.py --history 200000 --backend sqlite

Three drains of the same --jobs no-op jobs by one worker (concurrency 10), each on a fresh database:
  empty    no history at all;
  kept     N finished jobs (with an attempt each) that are within retention: nothing to prune;
  pruning  the same N jobs past retention, deleted meanwhile by a pruner in another process
           (a worker's pass: batches of 1,000, resting nine times as long as each batch took).
The ratio pruning/kept is the cost of pruning to claiming; kept/empty the cost of the table's size.
A measurement, not a test: run it by hand and compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

from drain import postgres_url
from leased import Leased
from leased.engine.pruner import prune

DAY = 86_400


def noop(n: int) -> None:
    return None


def add_history(app: Leased, count: int, days_old: float) -> None:
    """`count` done jobs with an attempt each, finished `days_old` days ago, written in bulk."""
    app.counts()  # the schema
    if app.database_url.startswith("sqlite"):
        connection = app.backend.connection()
        old = f"leased_now() - {days_old * DAY}"
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "INSERT INTO leased_jobs (task_name, queue_name, status, attempt, max_attempts, lease_seconds, "
            f"run_after, created_at, finished_at, result) SELECT 'bench.old', 'default', 'done', 1, 3, 30, {old}, "
            f"{old}, {old}, 'null' FROM n", (count,))
        connection.execute("INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome) "
                           "SELECT id, 1, 'old', finished_at, finished_at, 'done' FROM leased_jobs")
        connection.execute("COMMIT")
        connection.execute("ANALYZE")  # statistics for the planner, as VACUUM ANALYZE gives PostgreSQL's below
        return
    import psycopg

    with psycopg.connect(app.database_url, autocommit=True) as connection:
        old = f"now() - interval '{days_old} days'"
        connection.execute(
            "INSERT INTO leased_jobs (task_name, queue_name, status, attempt, max_attempts, lease_seconds, run_after, "
            f"created_at, finished_at, result) SELECT 'bench.old', 'default', 'done', 1, 3, 30, {old}, {old}, {old}, "
            "'null' FROM generate_series(1, %s)", (count,))
        connection.execute("INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome) "
                           "SELECT id, 1, 'old', finished_at, finished_at, 'done' FROM leased_jobs")
        connection.execute("VACUUM ANALYZE leased_jobs")
        connection.execute("VACUUM ANALYZE leased_attempts")
        connection.execute("CHECKPOINT")  # the bulk insert's WAL flushed now, not during the drain


def pruner_process(url: str, started, stop) -> None:
    """Another worker's pruner: passes back to back until told to stop."""
    app = Leased(url)
    started.set()
    while not stop.is_set():
        if prune(app.backend, app._prune_rules(), stop=_Flag(stop)) is None:
            time.sleep(0.1)
    app.close()


class _Flag:
    """A multiprocessing Event with the wait()/is_set() a prune pass expects of a threading.Event."""

    def __init__(self, event):
        self.event = event

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout: float) -> bool:
        return self.event.wait(timeout)


def drain(url: str, jobs: int, history: int, mode: str) -> tuple[float, int]:
    """jobs/s of the drain, and how many history rows went meanwhile."""
    app = Leased(url)
    task = app.task(name="bench.noop")(noop)
    if mode != "empty":
        add_history(app, history, days_old=8 if mode == "pruning" else 1)
    task.enqueue_many([(n,) for n in range(jobs)])
    before = app.counts()["default"]["done"]
    context = multiprocessing.get_context("spawn")
    started, stop = context.Event(), context.Event()
    pruner = None
    if mode == "pruning":
        pruner = context.Process(target=pruner_process, args=(url, started, stop))
        pruner.start()
        started.wait(60)
        time.sleep(0.5)  # into its first pass
    began = time.perf_counter()
    stats = app.run_until_empty(concurrency=10)
    rate = jobs / (time.perf_counter() - began)
    pruned_while_draining = before + jobs - app.counts()["default"]["done"]
    if pruner is not None:
        stop.set()
        pruner.join(60)
    assert stats.done == jobs, stats
    app.close()
    return rate, pruned_while_draining


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs drained in each run")
    parser.add_argument("--history", type=int, default=1_000_000, help="N: finished jobs in the table")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three drains; medians are shown")
    options = parser.parse_args()
    print(f"medians of {options.repeats}; pruned: the fewest rows the pruner deleted during a drain")
    print(f"{'backend':9} {'N':>9} {'empty/s':>8} {'kept/s':>8} {'pruning/s':>9} {'pruned':>8} "
          f"{'pruning/kept':>12} {'kept/empty':>10}")
    for backend in ("sqlite", "postgres"):
        if options.backend not in (backend, "all"):
            continue
        runs: dict[str, list[float]] = {"empty": [], "kept": [], "pruning": []}
        pruned = []
        for _ in range(options.repeats):  # the modes interleaved, so a busy spell hits all three alike
            for mode in runs:
                if backend == "sqlite":
                    with tempfile.TemporaryDirectory() as folder:
                        rate, gone = drain(f"sqlite:///{Path(folder) / 'bench.db'}", options.jobs,
                                           options.history, mode)
                else:
                    url, drop = postgres_url()
                    try:
                        rate, gone = drain(url, options.jobs, options.history, mode)
                    finally:
                        drop()
                runs[mode].append(rate)
                if mode == "pruning":
                    pruned.append(gone)
        rates = {mode: statistics.median(values) for mode, values in runs.items()}
        pruned = min(pruned)  # below N: the pruner was still at work when the drain ended
        print(f"{backend:9} {options.history:>9,} {rates['empty']:>8.0f} {rates['kept']:>8.0f} "
              f"{rates['pruning']:>9.0f} {pruned:>8,} {rates['pruning'] / rates['kept']:>12.2f} "
              f"{rates['kept'] / rates['empty']:>10.2f}")


if __name__ == "__main__":
    main()
