"""huey with SQLite storage (SqliteHuey, its defaults: WAL, SQLite's default synchronous=FULL),
`huey_consumer -k thread -w N` with its default polling (0.1 s, backing off to 10 s when idle).
huey stores a task's result only when it is not None, so its handlers return True and the stored
results are what is counted. It has no bulk enqueue: Task.map() enqueues one call at a time."""

from __future__ import annotations

import os
import sqlite3
import time
import uuid

from common import remove_sqlite, venv_bin
from huey import SqliteHuey

from peers.base import Peer, Unsupported, scratch
from peers.probe import report_end, report_start

huey = SqliteHuey("bench", filename=os.environ.get("BENCH_HUEY_FILE", ":memory:"))


@huey.task(name="bench.noop")
def noop(n: int) -> bool:
    return True


@huey.task(name="bench.probe")
def probe(n: int) -> bool:
    report_start(n)
    return True


@huey.task(name="bench.nap")
def nap(n: int, seconds: float) -> bool:
    report_start(n)
    time.sleep(seconds)
    report_end(n)
    return True


TASKS = {"noop": noop, "probe": probe, "nap": nap}


class HueyPeer(Peer):
    name = "huey"
    label = "huey (SQLite)"
    store = "SQLite"
    package = "huey"
    handler = "sync (threads)"
    recovery = "not automatic: a dequeued task lives only in the dead consumer"

    def settings(self):
        return "`huey_consumer -k thread -w N`, SqliteHuey defaults (WAL, synchronous=FULL), poll 0.1-10 s"

    def setup(self):
        self.path = scratch("huey") / f"huey-{uuid.uuid4().hex[:8]}.db"
        self.huey = SqliteHuey("bench", filename=str(self.path))
        # The producer's tasks are the same functions registered on the instance for this file.
        self.tasks = {kind: self.huey.task(name=task.name)(task.func) for kind, task in TASKS.items()}
        self._reader = sqlite3.connect(self.path, timeout=30)

    def enqueue_one(self, kind, numbers, seconds=0.0):
        task = self.tasks[kind]
        for n in numbers:
            if kind == "nap":
                task(n, seconds)
            else:
                task(n)

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        raise Unsupported("no bulk enqueue API (Task.map enqueues one call at a time)")

    def worker_argv(self, concurrency, index):
        return [venv_bin("huey_consumer"), "peers.huey.huey", "-k", "thread", "-w", str(concurrency), "-q", "-n"]

    def worker_env(self):
        return {"BENCH_HUEY_FILE": str(self.path)}

    def count_done(self):
        return self._reader.execute("SELECT count(*) FROM kv WHERE queue = 'bench'").fetchone()[0]

    def teardown(self):
        self._reader.close()
        self.huey.storage.close()
        remove_sqlite(self.path)
