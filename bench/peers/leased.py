"""leased, on PostgreSQL, MariaDB and SQLite: used as its README shows (sync handlers, `leased worker`)."""

from __future__ import annotations

import os
import sqlite3
import time
import uuid

from common import (
    drop_database, drop_mariadb_database, mariadb_connect, recreate_database, recreate_mariadb_database, remove_sqlite,
    venv_bin)

from leased import Leased
from peers.base import Peer, Unsupported, chunks, scratch
from peers.probe import report_end, report_start

# The worker processes import this module (`leased worker peers.leased:app`); the database comes
# from the environment, as it would in production.
app = Leased(os.environ.get("BENCH_LEASED_URL", "sqlite:///unused.db"))


@app.task(name="bench.noop")
def noop(n: int) -> None:
    return None


@app.task(name="bench.probe")
def probe(n: int) -> None:
    report_start(n)


@app.task(name="bench.nap")
def nap(n: int, seconds: float) -> None:
    report_start(n)
    time.sleep(seconds)
    report_end(n)


TASKS = {"noop": noop, "probe": probe, "nap": nap}


class _Leased(Peer):
    package = "leased"
    handler = "sync"
    recovery = "lease expiry (automatic), lease 5 s"

    def __init__(self) -> None:
        self.url = ""
        self.producer: Leased | None = None
        self.lease: float | None = None
        self.after_id = 0  # count_done() counts the done jobs above this id

    def done_sql(self) -> str:
        # Jobs above `after_id` only: with a million finished jobs already in the table (bench/scale.py),
        # counting them all ten times a second would slow the drain it measures. Read from the
        # (status, id) index either way.
        return f"SELECT count(*) AS n FROM leased_jobs WHERE status = 'done' AND id > {int(self.after_id)}"

    def _call(self, kind: str, seconds: float):
        task = TASKS[kind]
        # The producer's app has the same tasks; its options (the lease) are stored with each job.
        call = self.producer.get_task(task.name).using(**({"lease": self.lease} if self.lease else {}))
        return call, (lambda n: (n, seconds)) if kind == "nap" else (lambda n: (n,))

    def _open_producer(self) -> None:
        self.producer = Leased(self.url)
        for task in TASKS.values():
            self.producer.task(name=task.name)(task.func)
        _ = self.producer.backend  # opened and migrated now, not inside the timed loop

    def enqueue_one(self, kind, numbers, seconds=0.0):
        call, args = self._call(kind, seconds)
        for n in numbers:
            call.enqueue(*args(n))

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        call, args = self._call(kind, seconds)
        if not hasattr(call, "enqueue_many"):
            raise Unsupported("Task.enqueue_many not in this checkout yet")
        for chunk in chunks(numbers):
            call.enqueue_many([args(n) for n in chunk])

    def worker_argv(self, concurrency, index):
        return [venv_bin("leased"), "worker", "peers.leased:app", "--concurrency", str(concurrency),
                "--log-level", "warning"]

    def worker_env(self):
        return {"BENCH_LEASED_URL": self.url}

    def crash_settings(self):
        self.lease = 5.0
        return {}

    def teardown(self):
        self.lease = None
        if self.producer is not None:
            self.producer.close()
            self.producer = None


class LeasedPostgres(_Leased):
    name = "leased-pg"
    label = "leased (PostgreSQL)"
    store = "PostgreSQL"
    database = "bench_leased"

    def settings(self):
        return "`leased worker --concurrency N`, sync handlers on threads, LISTEN/NOTIFY wake-ups, poll 1 s"

    def setup(self):
        self.url = recreate_database(self.database)
        self._open_producer()

    def count_done(self):
        with self.producer.backend.connection() as connection:
            return connection.execute(self.done_sql()).fetchone()["n"]

    def teardown(self):
        super().teardown()
        drop_database(self.database)


class LeasedMariaDB(_Leased):
    name = "leased-mariadb"
    label = "leased (MariaDB)"
    store = "MariaDB"
    database = "leased_bench_leased"

    def settings(self):
        return ("`leased worker --concurrency N`, sync handlers on threads, InnoDB, "
                "loopback datagram wake-ups (no LISTEN on MariaDB), poll 1 s")

    def setup(self):
        self.url = recreate_mariadb_database(self.database)
        self._open_producer()
        self._reader = mariadb_connect(self.database)

    def count_done(self):
        with self._reader.cursor() as cursor:
            cursor.execute(self.done_sql())
            return cursor.fetchone()[0]

    def teardown(self):
        super().teardown()
        self._reader.close()
        drop_mariadb_database(self.database)


class LeasedSQLite(_Leased):
    name = "leased-sqlite"
    label = "leased (SQLite)"
    store = "SQLite"

    def settings(self):
        return ("`leased worker --concurrency N`, sync handlers on threads, WAL + synchronous=NORMAL, "
                "loopback datagram wake-ups, poll 1 s")

    def setup(self):
        self.path = scratch("leased-sqlite") / f"jobs-{uuid.uuid4().hex[:8]}.db"
        self.url = f"sqlite:///{self.path}"
        self._open_producer()
        self._reader = sqlite3.connect(self.path, timeout=30)

    def count_done(self):
        return self._reader.execute(self.done_sql()).fetchone()[0]

    def teardown(self):
        super().teardown()
        self._reader.close()
        remove_sqlite(self.path)
