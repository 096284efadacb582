"""The plain claim's cost on PostgreSQL, alone: claims of 10 from a backlog, timed in the process.

    PYTHONPATH=src python bench/claim_statement.py [--jobs 20000] [--claims 1500]

Run it at two commits, one after the other, to compare a change to the claim statement (migration
0021 made each due row prove its job, and counts the rows that do not): it prints the median and
p90 of one claim call, in a fresh schema of its own that it drops after.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import psycopg

from leased import Leased
from leased.backends.ports import ClaimRequest

URL = "postgresql://postgres@127.0.0.1:5432/test"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--claims", type=int, default=1_500)
    options = parser.parse_args()
    schema = f"bench_claim_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    app = Leased(f"{URL}?options=-csearch_path%3D{schema}")
    try:
        task = app.task(name="noop")(lambda: None)
        for _ in range(options.jobs // 1000):
            task.enqueue_many([()] * 1000)
        request = ClaimRequest("bench", ("noop",), None, 10)
        app.backend.claim(request)  # the pools and the prepared statement
        times = []
        for _ in range(options.claims):
            started = time.perf_counter()
            app.backend.claim(request)
            times.append(time.perf_counter() - started)
        times.sort()
        print(f"claim of 10 from {options.jobs} pending: median {statistics.median(times) * 1000:.3f} ms, "
              f"p90 {times[int(len(times) * 0.9)] * 1000:.3f} ms over {options.claims} claims")
    finally:
        app.close()
        with psycopg.connect(URL, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
