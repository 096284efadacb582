"""What limits cost: drain throughput with and without a limit, and one claim's time with 10,000
jobs held back by a busy key against none.

    python bench/limits.py                       # SQLite (temp file) and the local PostgreSQL
    python bench/limits.py --jobs 5000 --backend sqlite

Drains: N no-op jobs queued in bulk, drained in this process by one worker (concurrency 10):
  - no limit: the plain claim (today's plan);
  - queue limit: the same jobs, with `app.limit("default", concurrency=10)` (never binding, so the
    rate shows the limited claim's overhead: every claim counts room and, on PostgreSQL, takes the lock);
  - keyed: the same count spread over 100 keys of a task with concurrency=5.
Claim cost: median time of one claim of 10 jobs (limits in use: keyed jobs wait), with 10,000 due
jobs of one key held back by its single running job, and with none held back.

A measurement, not a test: run it by hand and compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drain import postgres_url

from leased import Leased
from leased.backends.ports import ClaimRequest

HELD = 10_000


def noop(n: int, key: str = "") -> None:
    return None


def drain(url: str, jobs: int, mode: str) -> float:
    app = Leased(url)
    if mode == "keyed":
        task = app.task(name="bench.keyed", concurrency=5, concurrency_key="k{key}")(noop)
        task.enqueue_many([(n, str(n % 100)) for n in range(jobs)])
    else:
        task = app.task(name="bench.noop")(noop)
        task.enqueue_many([(n,) for n in range(jobs)])
        if mode == "queue limit":
            app.limit("default", concurrency=10)
    started = time.perf_counter()
    stats = app.run_until_empty(concurrency=10)
    elapsed = time.perf_counter() - started
    assert stats.done == jobs, stats
    app.close()
    return jobs / elapsed


def claim_ms(url: str, held: int, claims: int = 100) -> float:
    """Median ms of one claim of 10, with `held` due jobs behind a busy key (and other keys' jobs)."""
    app = Leased(url)
    keyed = app.task(name="bench.keyed", concurrency=1, concurrency_key="{key}")(noop)
    keyed.enqueue(0, "busy")
    app.backend.claim(ClaimRequest("holder", ("bench.keyed",), None, 1))
    keyed.enqueue_many([(n, "busy") for n in range(held)])
    keyed.enqueue_many([(n, f"other{n}") for n in range(claims * 10)])  # what the claims take
    request = ClaimRequest("bench", ("bench.keyed",), None, 10)
    times = []
    for _ in range(claims):
        started = time.perf_counter()
        claimed = app.backend.claim(request)
        times.append((time.perf_counter() - started) * 1000)
        assert len(claimed) == 10 and all(job.job.concurrency_key != "busy" for job in claimed)
    app.close()
    return statistics.median(times)


def measure(backend: str, jobs: int) -> dict[str, float]:
    def fresh() -> tuple[str, callable]:
        if backend == "postgres":
            return postgres_url()
        folder = tempfile.TemporaryDirectory()
        return f"sqlite:///{Path(folder.name) / 'bench.db'}", folder.cleanup

    results = {}
    for mode in ("no limit", "queue limit", "keyed"):
        url, done = fresh()
        try:
            results[f"drain/s, {mode}"] = drain(url, jobs, mode)
        finally:
            done()
    for held in (0, HELD):
        url, done = fresh()
        try:
            results[f"claim ms, {held:,} held back"] = claim_ms(url, held)
        finally:
            done()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "all"], default="all")
    options = parser.parse_args()
    for backend in ("sqlite", "postgres"):
        if options.backend in (backend, "all"):
            for name, value in measure(backend, options.jobs).items():
                print(f"{backend:9} {name:32} {value:10.2f}", flush=True)


if __name__ == "__main__":
    main()
