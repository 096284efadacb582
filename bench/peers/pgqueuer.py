"""pgqueuer on PostgreSQL, as its docs show: asyncpg, async entrypoints, `pgqueuer.run(factory)` (what `pgq run` calls),
list arguments to `Queries.enqueue` for bulk. Payloads are bytes (the job number as text)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import asyncpg
import pgqueuer
from common import drop_database, recreate_database
from pgqueuer import AsyncpgDriver, PgQueuer
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from peers.base import Peer, chunks
from peers.probe import report_end, report_start

ENTRYPOINTS = {"noop": "bench.noop", "probe": "bench.probe", "nap": "bench.nap"}


@asynccontextmanager
async def create_pgqueuer() -> AsyncIterator[PgQueuer]:
    """The factory pgqueuer.run() enters in each worker process."""
    connection = await asyncpg.connect(os.environ["BENCH_PGQUEUER_URL"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint(ENTRYPOINTS["noop"])
    async def noop(job: Job) -> None:
        return None

    @pgq.entrypoint(ENTRYPOINTS["probe"])
    async def probe(job: Job) -> None:
        report_start(int(job.payload))

    @pgq.entrypoint(ENTRYPOINTS["nap"])
    async def nap(job: Job) -> None:
        n, seconds = job.payload.split(b" ")
        report_start(int(n))
        await asyncio.sleep(float(seconds))
        report_end(int(n))

    try:
        yield pgq
    finally:
        await connection.close()


def _payload(kind: str, n: int, seconds: float) -> bytes:
    return f"{n} {seconds}".encode() if kind == "nap" else str(n).encode()


class PgQueuerPeer(Peer):
    name = "pgqueuer"
    label = "pgqueuer"
    store = "PostgreSQL"
    package = "pgqueuer"
    handler = "async"
    database = "bench_pgqueuer"
    recovery = ("automatic: a job whose heartbeat is older than heartbeat_timeout (set to 5 s) is re-picked at "
                "the next dequeue (dequeue_timeout 30 s when idle)")

    def __init__(self) -> None:
        self.heartbeat_timeout: float | None = None

    def settings(self):
        return ("`pgqueuer.run(batch_size=B, max_concurrent_tasks=N)` (B = N/2, the largest it allows), "
                "asyncpg, async entrypoints, LISTEN/NOTIFY")

    def setup(self):
        self.url = recreate_database(self.database)
        self.loop = asyncio.new_event_loop()
        self.connection = self.loop.run_until_complete(asyncpg.connect(self.url))
        self.queries = Queries(AsyncpgDriver(self.connection))
        self.loop.run_until_complete(self.queries.install())

    def enqueue_one(self, kind, numbers, seconds=0.0):
        async def each():
            for n in numbers:
                await self.queries.enqueue(ENTRYPOINTS[kind], _payload(kind, n, seconds))

        self.loop.run_until_complete(each())

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        async def bulk():
            for chunk in chunks(numbers):
                await self.queries.enqueue([ENTRYPOINTS[kind]] * len(chunk),
                                           [_payload(kind, n, seconds) for n in chunk], [0] * len(chunk))

        self.loop.run_until_complete(bulk())

    def worker_argv(self, concurrency, index):
        # `pgq run` 1.6.0 fails at start with typer 0.29 (its log-level option arrives as a str), so
        # the worker calls the documented pgqueuer.run() with the same options; see main() below.
        return [sys.executable, "-m", "peers.pgqueuer", str(max(2, concurrency)), str(max(1, concurrency // 2)),
                str(self.heartbeat_timeout or 30.0)]

    def worker_env(self):
        return {"BENCH_PGQUEUER_URL": self.url}

    def crash_settings(self):
        self.heartbeat_timeout = 5.0
        return {}

    def count_done(self):
        return self.loop.run_until_complete(self.connection.fetchval(
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"))

    def teardown(self):
        self.heartbeat_timeout = None
        self.loop.run_until_complete(self.connection.close())
        self.loop.close()
        drop_database(self.database)


def main() -> None:
    max_concurrent_tasks, batch_size, heartbeat_timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    asyncio.run(pgqueuer.run(create_pgqueuer, max_concurrent_tasks=max_concurrent_tasks, batch_size=batch_size,
                             heartbeat_timeout=timedelta(seconds=heartbeat_timeout)))


if __name__ == "__main__":
    main()
