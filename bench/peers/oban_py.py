"""oban-py on PostgreSQL, as its README shows: `@worker` classes with async `process`, the schema from
`oban.schema.install`, `Worker.enqueue(args)` to produce, `oban.enqueue_many` for bulk, and workers
started with `oban start --dsn URL --queues default:N`.

The worker processes import this module by the jobs' worker names (peers.oban_py.Noop, ...)."""

from __future__ import annotations

import asyncio

import psycopg
from common import drop_database, recreate_database, venv_bin
from oban import Oban, worker
from oban.schema import install

from peers.base import Peer, chunks, scratch
from peers.probe import report_end, report_start


@worker(queue="default")
class Noop:
    async def process(self, job):
        return None


@worker(queue="default")
class Probe:
    async def process(self, job):
        report_start(job.args["n"])


@worker(queue="default")
class Nap:
    async def process(self, job):
        report_start(job.args["n"])
        await asyncio.sleep(job.args["seconds"])
        report_end(job.args["n"])


WORKERS = {"noop": Noop, "probe": Probe, "nap": Nap}


def _args(kind: str, n: int, seconds: float) -> dict:
    return {"n": n, "seconds": seconds} if kind == "nap" else {"n": n}


class ObanPeer(Peer):
    name = "oban-py"
    label = "oban-py"
    store = "PostgreSQL"
    package = "oban"
    handler = "async"
    database = "bench_oban"
    recovery = ("the leader's lifeline makes jobs executing longer than rescue_after available again "
                "(defaults 300 s, checked every 60 s; set to 5 s and 1 s here)")

    def __init__(self) -> None:
        self.config: str | None = None

    def settings(self):
        return ("`oban start --dsn URL --queues default:N` (its defaults: pool of 10, LISTEN/NOTIFY on insert, "
                "stager every 1 s), async workers; `Worker.enqueue`, bulk `oban.enqueue_many`")

    def setup(self):
        from psycopg_pool import AsyncConnectionPool

        self.url = recreate_database(self.database)
        self.loop = asyncio.new_event_loop()

        async def start():
            pool = AsyncConnectionPool(self.url, open=False)
            await pool.open()
            await install(pool)
            return pool

        self.pool = self.loop.run_until_complete(start())
        self.oban = Oban(pool=self.pool)  # client mode: no queues, it only enqueues
        self.counter = psycopg.connect(self.url, autocommit=True)

    def enqueue_one(self, kind, numbers, seconds=0.0):
        async def each():
            for n in numbers:
                await WORKERS[kind].enqueue(_args(kind, n, seconds))

        self.loop.run_until_complete(each())

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        async def bulk():
            for chunk in chunks(numbers):
                await self.oban.enqueue_many([WORKERS[kind].new(_args(kind, n, seconds)) for n in chunk])

        self.loop.run_until_complete(bulk())

    def worker_argv(self, concurrency, index):
        return [venv_bin("oban"), "start", "--dsn", self.url, "--queues", f"default:{concurrency}",
                "--log-level", "WARNING", *(["--config", self.config] if self.config else [])]

    def crash_settings(self):
        path = scratch("oban") / "oban.toml"
        path.write_text("[lifeline]\ninterval = 1.0\nrescue_after = 5.0\n")
        self.config = str(path)
        return {}

    def count_done(self):
        return self.counter.execute("SELECT count(*) FROM oban_jobs WHERE state = 'completed'").fetchone()[0]

    def teardown(self):
        self.config = None
        self.counter.close()
        self.loop.run_until_complete(self.pool.close())
        self.loop.close()
        drop_database(self.database)
