"""A worker's own connections on PostgreSQL: the worker pool's one, the claims pool's one and the
listener, whatever its handlers do. A handler's own calls (an enqueue) take the app's pool, which
grows for them and not for the worker (leased.backends.worker_calls). The same count across hosts
and concurrencies is tests/system/test_hosts.py's.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from conftest import _POSTGRES_PROBLEM, REQUIRE_POSTGRES, postgres_schema, running_worker, wait_for
from leased import Leased
from test_postgres_outages import with_url_parameters

if _POSTGRES_PROBLEM:
    if REQUIRE_POSTGRES:
        raise RuntimeError(f"{_POSTGRES_PROBLEM}, and LEASED_REQUIRE_POSTGRES=1 forbids skipping")
    pytest.skip(_POSTGRES_PROBLEM, allow_module_level=True)

HANDLERS = 20


# What only the worker sends (queries.sql): its claim, its ends, its row, its LISTEN; and what an enqueue sends.
WORKER_STATEMENTS = ("-- Jobs without a key", "-- Once a second, after a claim", "-- Whether claims must",
                     "-- The session settings of the connections that claim", "-- A batch of attempts' ends",
                     "INSERT INTO leased_workers", "LISTEN ")
ENQUEUE_STATEMENT = "-- One job, as insert_jobs would insert it"


class Sessions(threading.Thread):
    """Samples the sessions of one application name every 10 ms: which server processes ran the
    worker's statements, and which an enqueue (an idle session shows the last one it ran)."""

    def __init__(self, url: str, name: str):
        super().__init__(name="sessions", daemon=True)
        self.url, self.name, self.stopping = url, name, threading.Event()
        self.worker_pids: set[int] = set()
        self.enqueue_pids: set[int] = set()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as connection:
            while not self.stopping.wait(0.01):
                for pid, query in connection.execute(
                        "SELECT pid, query FROM pg_stat_activity WHERE application_name = %s", (self.name,)):
                    if query.startswith(WORKER_STATEMENTS):
                        self.worker_pids.add(pid)
                    elif query.startswith(ENQUEUE_STATEMENT):
                        self.enqueue_pids.add(pid)


def test_handlers_that_enqueue_take_the_apps_connections_not_the_workers():
    with postgres_schema() as url:
        name = f"leased-connections-{uuid.uuid4().hex[:8]}"
        app = Leased(with_url_parameters(url, application_name=name))
        together = threading.Barrier(HANDLERS, timeout=60)
        child = app.task(name="child")(lambda n: n)

        @app.task(name="fan_out")
        def fan_out(n):
            together.wait()  # every handler enqueues at once: the app's pool grows for them
            child.enqueue(n)

        fan_out.enqueue_many([(n,) for n in range(HANDLERS)])
        observer = Leased(url)
        sampler = Sessions(url, name)
        sampler.start()
        try:
            with running_worker(app, concurrency=HANDLERS):
                wait_for(lambda: observer.counts()["default"]["done"] == 2 * HANDLERS, timeout=60,
                         message="every job and its child done")
        finally:
            sampler.stopping.set()
            sampler.join()
        print(f"\nthe worker's sessions: {len(sampler.worker_pids)}; "
              f"the handlers' enqueues': {len(sampler.enqueue_pids)}")
        assert len(sampler.worker_pids) == 3  # the worker pool's, the claims pool's, the listener
        assert len(sampler.enqueue_pids) > 1, "the handlers' enqueues took connections of the app's pool"
        assert not sampler.worker_pids & sampler.enqueue_pids, "no handler enqueued on the worker's connections"
        app.close()
        observer.close()
