"""How far from its documented place each job starts: N jobs enqueued in one enqueue_many, drained
by one worker, per backend.

    python bench/claim_order.py                                  # all three, 20,000 jobs, concurrency 10
    python bench/claim_order.py --backend postgres --jobs 20000 --rounds 3

The documented claim order is highest priority first, then earliest run_after, then oldest
(docs/explanation/promises.md). A worker claims in batches, and the jobs of one claim start
together, so a job's place is counted by claims: a job is late by the number of jobs claimed in
earlier claims than its own, less the number documented before it. With claims in the documented
order that is never above 0 (all jobs claimed before it were documented before it), whatever the
batch sizes; one job claimed a claim early makes each job it overtook late by one position.
"Started late" counts the same by the order the handlers' first lines ran (a sync handler, on the
worker's handler threads), one job at a time: where the threads' scheduling shows.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from common import drop_mariadb_database, percentile, recreate_mariadb_database
from drain import postgres_url

from leased import Leased


def lateness(documented: list[int], batches: list[list[int]]) -> list[int]:
    """Per job, in documented order: how many places late its claim came (0 when on time)."""
    claimed_before: dict[int, int] = {}
    count = 0
    for batch in batches:
        for job_id in batch:
            claimed_before[job_id] = count
        count += len(batch)
    return [max(0, claimed_before[job_id] - place) for place, job_id in enumerate(documented)]


def measure(url: str, jobs: int, concurrency: int) -> dict[str, float]:
    app = Leased(url)
    started: list[int] = []
    task = app.task(name="bench.order")(started.append)
    # One statement: one priority and one run_after for all, so the documented order is the ids'.
    enqueued = task.enqueue_many([(n,) for n in range(jobs)])
    ids = {n: job.id for n, job in enumerate(enqueued)}
    documented = [ids[n] for n in range(jobs)]

    batches: list[list[int]] = []
    backend = app.backend
    claim = backend.claim

    def recorded(request):
        claimed = claim(request)
        batches.append([job.id for job in claimed])
        return claimed

    backend.claim = recorded  # type: ignore[method-assign]  # a measurement watches the real claims
    stats = app.run_until_empty(concurrency=concurrency)
    assert stats.done == jobs, stats
    app.close()
    late = lateness(documented, batches)
    started_late = lateness(documented, [[ids[n]] for n in started])
    first = documented[0]
    first_claim = next(number for number, batch in enumerate(batches) if first in batch)
    return {"claims": len([batch for batch in batches if batch]),
            "late": sum(1 for value in late if value), "max": max(late), "p99": percentile(late, 0.99),
            "started_late": sum(1 for value in started_late if value), "started_max": max(started_late),
            "started_p99": percentile(started_late, 0.99),
            "first_claim": first_claim + 1, "first_started": [ids[n] for n in started].index(first) + 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "mariadb", "all"], default="all")
    options = parser.parse_args()
    print(f"{'':16} {'':6} {'claimed late':>20} {'started late':>20} {'first job':>16}")
    print(f"{'backend':9} {'jobs':>6} {'claims':>6} {'jobs':>6} {'max':>6} {'p99':>6} {'jobs':>6} {'max':>6} "
          f"{'p99':>6} {'claim':>8} {'started':>7}")
    for backend in ("sqlite", "postgres", "mariadb"):
        if options.backend not in (backend, "all"):
            continue
        for _ in range(options.rounds):
            with tempfile.TemporaryDirectory() as folder:
                if backend == "sqlite":
                    url, drop = f"sqlite:///{Path(folder) / 'order.db'}", lambda: None
                elif backend == "postgres":
                    url, drop = postgres_url()
                else:
                    name = f"leased_order_{uuid.uuid4().hex[:8]}"
                    url, drop = recreate_mariadb_database(name), lambda name=name: drop_mariadb_database(name)
                try:
                    result = measure(url, options.jobs, options.concurrency)
                finally:
                    drop()
            print(f"{backend:9} {options.jobs:>6} {result['claims']:>6} {result['late']:>6} {result['max']:>6} "
                  f"{result['p99']:>6.0f} {result['started_late']:>6} {result['started_max']:>6} "
                  f"{result['started_p99']:>6.0f} {result['first_claim']:>8} {result['first_started']:>7}", flush=True)


if __name__ == "__main__":
    main()
