"""RQ on Redis, as its docs show: `rq worker` (the default Worker forks a work horse per job, so a
process runs one job at a time), `Queue.enqueue`, and `Queue.enqueue_many` with `prepare_data`
(one pipeline per call) for bulk. Completions: the FinishedJobRegistry in Redis."""

from __future__ import annotations

import time

from common import REDIS_HOST, REDIS_PORT, venv_bin
from redis import Redis
from rq import Queue

from peers.base import Peer, chunks
from peers.probe import report_end, report_start

DB = 10  # a Redis database of its own, flushed before and after
QUEUE = "bench"


def noop(n: int) -> None:
    return None


def probe(n: int) -> None:
    report_start(n)


def nap(n: int, seconds: float) -> None:
    report_start(n)
    time.sleep(seconds)
    report_end(n)


FUNCTIONS = {"noop": noop, "probe": probe, "nap": nap}


class RQPeer(Peer):
    name = "rq"
    label = "RQ"
    store = "Redis"
    package = "rq"
    handler = "sync (forked work horse)"
    one_job_per_process = True
    recovery = "not measured (a worker process holds one job)"
    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{DB}"

    def settings(self):
        return "`rq worker` (default Worker: one work horse forked per job, one job at a time per process)"

    def setup(self):
        self.redis = Redis(host=REDIS_HOST, port=REDIS_PORT, db=DB)
        self.redis.flushdb()
        self.queue = Queue(QUEUE, connection=self.redis)

    @staticmethod
    def _args(kind, n, seconds):
        return (n, seconds) if kind == "nap" else (n,)

    def enqueue_one(self, kind, numbers, seconds=0.0):
        function = FUNCTIONS[kind]
        for n in numbers:
            self.queue.enqueue(function, *self._args(kind, n, seconds))

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        function = FUNCTIONS[kind]
        for chunk in chunks(numbers):
            self.queue.enqueue_many([Queue.prepare_data(function, self._args(kind, n, seconds)) for n in chunk])

    def worker_argv(self, concurrency, index):
        return [venv_bin("rq"), "worker", "--url", self.url, "--quiet", "--name", f"bench-{index}-{time.time_ns()}",
                QUEUE]

    def count_done(self):
        return self.redis.zcard(f"rq:finished:{QUEUE}")

    def teardown(self):
        self.redis.flushdb()
        self.redis.close()
