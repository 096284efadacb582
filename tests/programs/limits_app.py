"""Worker program for the limit tests: python limits_app.py WORKER_ID (database from $LEASED_DATABASE_URL).

Each handler records (job, key, queue, start, end) in `limit_runs`, its own table in the same
database, with the host's clock (every process runs on one host). The checker in
test_limits_processes.py then measures the largest overlap per key and per queue.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time

import connections
from leased import Leased

RUNS_SQL = ("CREATE TABLE IF NOT EXISTS limit_runs (job_id bigint NOT NULL, attempt integer NOT NULL, "
            "concurrency_key text, queue_name text NOT NULL, started double precision NOT NULL, "
            "ended double precision NOT NULL)")
PER_KEY = 2  # @task concurrency of "keyed"
BILLING = 3  # the test sets app.limit("billing", concurrency=3)
RATE = (8, 1.0)  # "rated": 8 starts per second per key


class Recorder:
    """One connection per thread, to the same database as the jobs."""

    def __init__(self, url: str):
        self.url, self.local = url, threading.local()

    def record(self, context, key: str | None, started: float) -> None:
        row = (context.job_id, context.attempt, key, context.job.queue_name, started, time.time())
        connection = getattr(self.local, "connection", None)
        if connection is None:
            options = {"timeout": 30} if self.url.startswith("sqlite") else {}
            connection = self.local.connection = connections.connect(self.url, autocommit=True, **options)
        connections.execute(connection, "INSERT INTO limit_runs VALUES (?, ?, ?, ?, ?, ?)", row)


def make_app(url: str) -> Leased:
    """The tasks, the same for the producer (the test) and the workers."""
    app = Leased(url)
    recorder = Recorder(url)

    def work(context, key: str | None) -> None:
        started = time.time()
        time.sleep(random.uniform(0.01, 0.04))
        recorder.record(context, key, started)

    @app.task(name="keyed", concurrency=PER_KEY, concurrency_key="customer:{customer}", takes_context=True)
    def keyed(context, customer: str, n: int) -> None:
        work(context, f"customer:{customer}")

    @app.task(name="billing", queue_name="billing", takes_context=True)
    def billing(context, n: int) -> None:
        work(context, None)

    @app.task(name="rated", concurrency_key="api:{host}", rate_limit=f"{RATE[0]}/s", takes_context=True)
    def rated(context, host: str, n: int) -> None:
        work(context, f"api:{host}")

    @app.task(name="plain", takes_context=True)
    def plain(context, n: int) -> None:
        work(context, None)

    @app.task(name="hold", concurrency=1, concurrency_key="{key}", lease=1.0, takes_context=True, max_attempts=3)
    def hold(context, key: str, forever: bool) -> None:
        if forever and context.attempt == 1:
            time.sleep(3600)
        recorder.record(context, key, time.time())

    return app


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    app = make_app(os.environ["LEASED_DATABASE_URL"])
    app.worker(concurrency=4, poll_interval=0.05, worker_id=sys.argv[1]).run()
