"""How busy SQLite's one writer is while a worker drains: the time claims and finishes wait for the
write lock and hold it, against the drain's own time.

    python bench/sqlite_writer.py                                   # 20,000 no-op jobs, 10 slots
    python bench/sqlite_writer.py --jobs 10000 --slots 500 --sleep 0.05

Drains N queued jobs with one worker in this process (`run_until_empty`) on a temporary SQLite
file, timing each write transaction of the backend (its connections' `transaction`, wrapped here)
by the call that opened it: from asking for the lock to having it, and from having it to its commit.
When claims plus finishes hold the lock for about the whole drain, the writer is the bound, and
what a job costs inside the lock decides the rate. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import tempfile
import threading
import time
import uuid
from pathlib import Path

from leased import Leased


def drain(jobs: int, slots: int, sleep: float) -> None:
    with tempfile.TemporaryDirectory() as folder:
        app = Leased(f"sqlite:///{Path(folder) / f'{uuid.uuid4().hex}.db'}")

        @app.task(name="bench.nap")
        def nap(n: int, seconds: float) -> None:
            if seconds:
                time.sleep(seconds)

        for first in range(0, jobs, 1_000):
            nap.enqueue_many([(n, sleep) for n in range(first, min(jobs, first + 1_000))])
        backend = app.backend
        waited: dict[str, float] = collections.defaultdict(float)
        held: dict[str, float] = collections.defaultdict(float)
        calls: collections.Counter[str] = collections.Counter()
        caller = threading.local()
        write = backend.connections.transaction  # every write of ours: the claim's and database.transact's

        @contextlib.contextmanager
        def timed_write(*args, **kwargs):
            name = getattr(caller, "name", "other")
            asked = time.perf_counter()
            with write(*args, **kwargs) as connection:
                got = time.perf_counter()
                try:
                    yield connection
                finally:
                    done = time.perf_counter()
                    waited[name] += got - asked
                    held[name] += done - got
                    calls[name] += 1

        def tagged(name, method):
            def call(*args, **kwargs):
                caller.name = name
                try:
                    return method(*args, **kwargs)
                finally:
                    caller.name = "other"
            return call

        backend.connections.transaction = timed_write
        backend.claim = tagged("claim", backend.claim)
        backend.finish = tagged("finish", backend.finish)
        started = time.perf_counter()
        stats = app.run_until_empty(concurrency=slots)
        seconds = time.perf_counter() - started
        app.close()
    assert stats.done == jobs, stats
    busy = sum(held.values())
    print(f"{jobs:,} jobs in {seconds:.2f} s ({jobs / seconds:,.0f} jobs/s); the write lock held "
          f"{busy:.2f} s ({busy / seconds:.0%} of the drain)")
    for name in ("claim", "finish"):
        print(f"  {name:7} {calls[name]:5} transactions, {jobs / max(1, calls[name]):6.0f} jobs each: held "
              f"{held[name] / jobs * 1e6:5.1f} µs per job, "
              f"waited {waited[name] / jobs * 1e6:5.1f} µs per job")
    print(f"  others  {calls['other']:5} transactions (the worker's record, renewals, the reclaim): held "
          f"{held['other'] * 1000:.1f} ms in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--slots", type=int, default=10)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds each job sleeps (0: no-op jobs)")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    for _ in range(options.repeats):
        drain(options.jobs, options.slots, options.sleep)


if __name__ == "__main__":
    main()
