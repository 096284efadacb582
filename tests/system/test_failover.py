"""Workers and a producer carry on across the promotion of a streaming standby.

The test makes its own primary and standby (tests/standby.py: Debian's pg_createcluster, a
pg_basebackup -R standby, synchronous replication), starts three real `leased worker` processes and
a producer that enqueues inside its own transactions at a steady rate, all on one multi-host URL;
kills the primary's postmaster with SIGKILL, promotes the standby, and checks what leased promises
(docs/reliability.md, "Failover"). A last test shows what asynchronous replication loses instead.
Without the tools the tests skip, unless
LEASED_REQUIRE_STANDBY=1 (CI sets it) makes that a failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

import standby
from conftest import wait_for
from leased import Leased
from leased.errors import DatabaseUnavailable
from paths import PROGRAMS, pythonpath

pytestmark = [pytest.mark.slow, pytest.mark.system]
WORKERS = 3
ORDERS_PER_SECOND = 40
RESUME_SECONDS = 3.0  # the promise: workers start jobs again within this long of the promote
OUTAGE_RETRIES = 7  # claims each worker retries before the promote

_PROBLEM = standby.missing()
if _PROBLEM:
    if os.environ.get("LEASED_REQUIRE_STANDBY") == "1":
        raise RuntimeError(f"{_PROBLEM}, and LEASED_REQUIRE_STANDBY=1 forbids skipping")
    pytest.skip(_PROBLEM, allow_module_level=True)


class Producer(threading.Thread):
    """An app's request handler: each order and its job in one transaction of its own connection,
    at a steady rate; through the outage it reconnects and goes on. Remembers the orders whose
    commit returned, and what failed."""

    def __init__(self, app: Leased, url: str):
        super().__init__(name="producer", daemon=True)
        self.ship = app.task(name="ship", lease=3.0)(lambda order_id: order_id)
        self.url = url
        self.committed: list[int] = []
        self.failures: list[BaseException] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        connection: psycopg.Connection | None = None
        while not self.stopping.is_set():
            try:
                connection = connection or psycopg.connect(self.url, connect_timeout=3)
                with connection.transaction():
                    order_id = connection.execute("INSERT INTO orders DEFAULT VALUES RETURNING id").fetchone()[0]
                    job = self.ship.using(connection=connection).enqueue(order_id)
                    connection.execute("UPDATE orders SET job_id = %s WHERE id = %s", (job.id, order_id))
                self.committed.append(order_id)
            except (psycopg.Error, DatabaseUnavailable) as error:
                self.failures.append(error)
                if connection is not None:
                    connection.close()
                connection = None
            time.sleep(1 / ORDERS_PER_SECOND)  # the producer's pace, not a wait for a condition
        if connection is not None:
            connection.close()


class DashboardProbe(threading.Thread):
    """Asks the dashboard's front page over and over; remembers each status."""

    def __init__(self, app: Leased):
        super().__init__(name="dashboard-probe", daemon=True)
        with warnings.catch_warnings():  # Starlette prefers httpx2 and warns about httpx; either serves here
            warnings.simplefilter("ignore")
            from starlette.testclient import TestClient

        from leased.web import dashboard

        self.client = TestClient(dashboard(app), raise_server_exceptions=False)
        self.statuses: list[int] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.05):
            self.statuses.append(self.client.get("/").status_code)


def start_worker(url: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "LEASED_DATABASE_URL": url,
           "PYTHONPATH": pythonpath()}
    return subprocess.Popen([sys.executable, "-m", "leased.cli.main", "worker", "failover_app:app",
                             "--concurrency", "4", "--poll-interval", "0.2s"],
                            cwd=PROGRAMS, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def alive(workers: list[subprocess.Popen], logs: list[Path]) -> bool:
    """True while every worker runs; a worker's death fails the test with its log."""
    for worker, log in zip(workers, logs, strict=True):
        assert worker.poll() is None, f"a worker died:\n{log.read_text()[-3000:]}"
    return True


def scalar(url: str, query: str, params: tuple = ()) -> object:
    with psycopg.connect(url, connect_timeout=3) as connection:
        return connection.execute(query, params).fetchone()[0]


def jobs_done(url: str) -> int:
    return scalar(url, "SELECT count(*) FROM leased_jobs WHERE status = 'done'")


@pytest.fixture
def clusters():
    with standby.primary_and_standby(synchronous=True) as pair:
        yield pair


@pytest.mark.parametrize("session_attrs", ["read-write", None])
def test_workers_and_producers_carry_on_across_a_promoted_standby(clusters, session_attrs, tmp_path):
    """kill -9 of the primary's postmaster, then the standby promoted. With target_session_attrs
    new connections wait for a primary; without it they reach the standby while it is read-only,
    which is an outage too. Either way: nothing committed is lost, nothing is stuck, no worker dies."""
    primary, replica = clusters
    url = f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{replica.port}/{standby.DATABASE}"
    if session_attrs:
        url += f"?target_session_attrs={session_attrs}"
    app = Leased(url)
    app.migrate()
    with psycopg.connect(primary.url, autocommit=True) as connection:
        connection.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, job_id bigint)")
    logs = [tmp_path / f"worker-{n}.log" for n in range(WORKERS)]
    workers = [start_worker(url, log) for log in logs]
    producer, probe = Producer(app, url), DashboardProbe(app)
    try:
        producer.start()
        probe.start()
        wait_for(lambda: jobs_done(primary.url) >= 60, message="jobs done before the failover")

        primary.kill_postmaster()
        # The outage is seen everywhere before the promote: each worker has retried its claim
        # OUTAGE_RETRIES times (a few seconds; the backoff would have grown long by then), the
        # producer has failed.
        wait_for(lambda: all(log.read_text().count("database unavailable") >= OUTAGE_RETRIES
                             for log in logs if alive(workers, logs)), timeout=60,
                 message="every worker to retry through the outage")
        wait_for(lambda: producer.failures, message="the producer to see the outage")
        if session_attrs:  # the command line's one line gives each host's reason
            stats = subprocess.run([sys.executable, "-m", "leased.cli.main", "stats", "--database", url],
                                   cwd=PROGRAMS, capture_output=True, text=True, timeout=60)
            assert stats.returncode != 0 and len(stats.stderr.strip().splitlines()) == 1, stats.stderr
            assert f"127.0.0.1:{primary.port}: Connection refused" in stats.stderr, stats.stderr
            assert f"127.0.0.1:{replica.port}: session is read-only" in stats.stderr, stats.stderr
        replica.promote()
        promoted_at = scalar(replica.url, "SELECT now()")
        committed_at_promote = len(producer.committed)

        wait_for(lambda: len(producer.committed) >= committed_at_promote + 80, timeout=60,
                 message="orders committed after the promote")
        producer.stopping.set()
        producer.join()
        committed = set(producer.committed)
        wait_for(lambda: scalar(replica.url, "SELECT count(*) FROM leased_jobs WHERE status <> 'done'") == 0,
                 timeout=60, message="every job done")
        probe.stopping.set()
        probe.join()

        # Every order committed has its job, done; no job without its order, nothing stuck.
        with psycopg.connect(replica.url) as connection:
            orders = dict(connection.execute("SELECT id, job_id FROM orders").fetchall())
            jobs = dict(connection.execute("SELECT id, status FROM leased_jobs").fetchall())
            attempts = connection.execute(
                "SELECT worker_id, started_at, outcome FROM leased_attempts WHERE started_at >= %s",
                (promoted_at,)).fetchall()
        assert committed <= set(orders), "orders whose commit returned are missing"
        assert all(orders[order] in jobs for order in orders) and len(jobs) == len(orders)
        assert set(jobs.values()) == {"done"}
        # Every attempt claimed after the promote ran to its end: none lost its lease as it was claimed.
        assert attempts and {outcome for _, _, outcome in attempts} == {"done"}
        first_start = {}
        for worker_id, started_at, _ in attempts:
            first_start[worker_id] = min(started_at, first_start.get(worker_id, started_at))
        assert len(first_start) == WORKERS, f"not every worker started jobs after the promote: {first_start}"
        assert max(first_start.values()) - promoted_at < timedelta(seconds=RESUME_SECONDS), first_start
        # leased's own pool answered every enqueue: the producer failed only on its own connection.
        assert not [error for error in producer.failures if isinstance(error, DatabaseUnavailable)]
        assert set(probe.statuses) <= {200, 503} and 200 in probe.statuses, probe.statuses

        for worker in workers:
            assert worker.poll() is None, "a worker died"
            worker.terminate()
        for worker, log in zip(workers, logs, strict=True):
            assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
            text = log.read_text()
            assert "Traceback" not in text and "failed; stopping" not in text, text[-3000:]
            assert "error connecting in" not in text, "psycopg_pool's own warnings reached the log"
    finally:
        producer.stopping.set()
        probe.stopping.set()
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        app.close()


def replayed_jobs(url: str) -> int:
    try:
        return scalar(url, "SELECT count(*) FROM leased_jobs")
    except psycopg.errors.UndefinedTable:  # not even the schema replayed yet
        return 0


def enqueue_orders(url: str, ship, count: int) -> list[int]:
    """`count` orders, each with its job in one transaction; the job ids."""
    job_ids = []
    with psycopg.connect(url) as connection:
        for _ in range(count):
            with connection.transaction():
                order_id = connection.execute("INSERT INTO orders DEFAULT VALUES RETURNING id").fetchone()[0]
                job = ship.using(connection=connection).enqueue(order_id)
                connection.execute("UPDATE orders SET job_id = %s WHERE id = %s", (job.id, order_id))
            job_ids.append(job.id)
    return job_ids


def test_asynchronous_replication_loses_the_last_commits_with_their_jobs_and_hands_their_ids_out_again():
    """What docs/reliability.md says async replication costs: the commits the standby had not
    received when the primary died are gone, each order with its job, and the new primary hands
    their job ids out again. The walsender is stopped (SIGSTOP) while the last orders commit, so
    that the standby surely lacks them."""
    with standby.primary_and_standby(synchronous=False) as (primary, replica):
        app = Leased(primary.url)
        app.migrate()
        ship = app.task(name="ship")(lambda order_id: order_id)
        with psycopg.connect(primary.url, autocommit=True) as connection:
            connection.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, job_id bigint)")
        kept = enqueue_orders(primary.url, ship, 10)
        wait_for(lambda: replayed_jobs(replica.url) == len(kept), message="the standby to replay the first orders")
        walsender = scalar(primary.url, "SELECT pid FROM pg_stat_replication")
        os.kill(walsender, signal.SIGSTOP)
        lost = enqueue_orders(primary.url, ship, 50)  # acknowledged: asynchronous commits wait for no standby
        app.close()
        primary.kill_postmaster(walsender)
        replica.promote()

        promoted = Leased(replica.url)
        with psycopg.connect(replica.url) as connection:
            orders = dict(connection.execute("SELECT id, job_id FROM orders").fetchall())
            jobs = {row[0] for row in connection.execute("SELECT id FROM leased_jobs")}
        assert sorted(orders.values()) == sorted(jobs) == sorted(kept)  # gone together: no order without its job
        promoted_ship = promoted.task(name="ship")(lambda order_id: order_id)
        again = enqueue_orders(replica.url, promoted_ship, 50)
        assert set(again) & set(lost), "no job id was handed out again"
        promoted.close()
