"""Celery with a Redis broker, tuned as its "Optimizing" guide says for many short tasks: a large
prefetch multiplier, no gossip/mingle/heartbeat, and the threads pool (one process, N threads) for
I/O-bound handlers. A Redis result backend records each completion, which is what is counted.
`send_task` for one job; a `group` for bulk (Celery has no other bulk-send API)."""

from __future__ import annotations

import os
import time

from celery import Celery, group
from common import REDIS_HOST, REDIS_PORT, venv_bin
from redis import Redis

from peers.base import Peer, chunks
from peers.probe import report_end, report_start

BROKER_DB, RESULT_DB = 11, 12  # Redis databases of their own, flushed before and after
PREFETCH_MULTIPLIER = 64  # the guide: "say 64, or 128" for lots of short tasks

app = Celery("bench", broker=f"redis://{REDIS_HOST}:{REDIS_PORT}/{BROKER_DB}",
             backend=f"redis://{REDIS_HOST}:{REDIS_PORT}/{RESULT_DB}")
app.conf.update(
    task_serializer="json", accept_content=["json"], result_serializer="json",
    worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
    task_acks_late=os.environ.get("BENCH_CELERY_ACKS_LATE") == "1",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


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

# The producer needs no result backend (with one, every send also subscribes to the result's
# channel): it sends by task name on an app of its own.
producer = Celery("bench-producer", broker=app.conf.broker_url)
producer.conf.update(task_serializer="json", accept_content=["json"])


class CeleryPeer(Peer):
    name = "celery"
    label = "Celery"
    store = "Redis"
    package = "celery"
    handler = "sync (threads pool)"
    recovery = "acks_late + Redis visibility timeout (1 h by default)"

    def settings(self):
        return (f"`celery worker --pool threads -c N --without-gossip --without-mingle --without-heartbeat`, "
                f"prefetch multiplier {PREFETCH_MULTIPLIER}, Redis result backend")

    def setup(self):
        self.results = Redis(host=REDIS_HOST, port=REDIS_PORT, db=RESULT_DB)
        self.broker = Redis(host=REDIS_HOST, port=REDIS_PORT, db=BROKER_DB)
        self.broker.flushdb()
        self.results.flushdb()

    @staticmethod
    def _args(kind, n, seconds):
        return (n, seconds) if kind == "nap" else (n,)

    def enqueue_one(self, kind, numbers, seconds=0.0):
        name = TASKS[kind].name
        for n in numbers:
            producer.send_task(name, args=self._args(kind, n, seconds))

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        name = TASKS[kind].name
        for chunk in chunks(numbers):
            group(producer.signature(name, args=self._args(kind, n, seconds)) for n in chunk).apply_async()

    def worker_argv(self, concurrency, index):
        return [venv_bin("celery"), "-A", "peers.celery", "worker", "--pool", "threads", "-c", str(concurrency),
                "-n", f"bench{index}-{time.time_ns()}@%h", "--without-gossip", "--without-mingle",
                "--without-heartbeat", "--loglevel", "WARNING"]

    def crash_settings(self):
        # The guide's way to survive a worker crash: acknowledge after the task ran; Redis gives an
        # unacknowledged message back after the visibility timeout.
        return {"BENCH_CELERY_ACKS_LATE": "1"}

    def count_done(self):
        # Every key in the result database is one task's stored result (status SUCCESS).
        return self.results.dbsize()

    def teardown(self):
        self.broker.flushdb()
        self.results.flushdb()
        self.broker.close()
        self.results.close()
