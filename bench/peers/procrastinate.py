"""procrastinate on PostgreSQL: async handlers (its docs: concurrency is for async jobs), sync defer
from the producer, `batch_defer` for bulk, `procrastinate worker --concurrency N` (LISTEN/NOTIFY on).
"""

from __future__ import annotations

import asyncio
import os

import procrastinate
from common import drop_database, recreate_database, venv_bin

from peers.base import Peer, chunks
from peers.probe import report_end, report_start

app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=os.environ.get("BENCH_PROCRASTINATE_URL", "")))


@app.task(name="bench.noop")
async def noop(n: int) -> None:
    return None


@app.task(name="bench.probe")
async def probe(n: int) -> None:
    report_start(n)


@app.task(name="bench.nap")
async def nap(n: int, seconds: float) -> None:
    report_start(n)
    await asyncio.sleep(seconds)
    report_end(n)


TASKS = {"noop": noop, "probe": probe, "nap": nap}

if os.environ.get("BENCH_PROCRASTINATE_STALLED") == "1":
    # procrastinate's recipe for jobs of a crashed worker: a periodic task that retries the jobs of
    # workers silent for 30 s (their heartbeat is every 10 s). The docs run it every 10 minutes;
    # here every 5 seconds, so that recovery fits the workload's wait.
    @app.periodic(cron="* * * * * */5")
    @app.task(name="recovery.retry_stalled_jobs", queueing_lock="retry_stalled_jobs", pass_context=True)
    async def retry_stalled_jobs(context, timestamp):
        for job in await app.job_manager.get_stalled_jobs():
            await app.job_manager.retry_job(job)


class ProcrastinatePeer(Peer):
    name = "procrastinate"
    label = "procrastinate"
    store = "PostgreSQL"
    package = "procrastinate"
    handler = "async"
    database = "bench_procrastinate"
    recovery = ("not built in: the docs' periodic task that retries stalled jobs (workers silent 30 s), "
                "run every 5 s")

    def settings(self):
        return "`procrastinate worker --concurrency N`, async handlers, LISTEN/NOTIFY, sync `defer` / `batch_defer`"

    def setup(self):
        self.url = recreate_database(self.database)
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=self.url),
                                     import_paths=[])
        self.app.open()
        self.app.schema_manager.apply_schema()
        self.tasks = {kind: self.app.task(name=task.name)(task.func) for kind, task in TASKS.items()}

    @staticmethod
    def _kwargs(kind, n, seconds):
        return {"n": n, "seconds": seconds} if kind == "nap" else {"n": n}

    def enqueue_one(self, kind, numbers, seconds=0.0):
        task = self.tasks[kind]
        for n in numbers:
            task.defer(**self._kwargs(kind, n, seconds))

    def enqueue_bulk(self, kind, numbers, seconds=0.0):
        task = self.tasks[kind]
        for chunk in chunks(numbers):
            task.batch_defer(*(self._kwargs(kind, n, seconds) for n in chunk))

    def worker_argv(self, concurrency, index):
        return [venv_bin("procrastinate"), "--app=peers.procrastinate.app", "--log-level", "warning", "worker",
                "--concurrency", str(concurrency), "--name", f"bench-{index}"]

    def worker_env(self):
        return {"BENCH_PROCRASTINATE_URL": self.url}

    def crash_settings(self):
        return {"BENCH_PROCRASTINATE_STALLED": "1"}

    def count_done(self):
        connector = self.app.connector.get_sync_connector()
        row = connector.execute_query_one(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'succeeded' AND task_name LIKE 'bench.%%'")
        return row["n"]

    def teardown(self):
        self.app.close()
        drop_database(self.database)
