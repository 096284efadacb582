"""The PostgreSQL backend through what a failover shows it, each on the shared test server (the
whole failover, with a standby the test makes itself, is tests/system/test_failover.py): a server that
refuses writes, pooled connections whose server closed them, a claim that waited for a connection,
and a multi-host URL that reaches no host.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from conftest import _POSTGRES_PROBLEM, POSTGRES_URL, REQUIRE_POSTGRES, postgres_schema, running_worker, wait_for
from leased import Leased, Outcome
from leased.errors import DatabaseConflict, DatabaseUnavailable

if _POSTGRES_PROBLEM:
    if REQUIRE_POSTGRES:
        raise RuntimeError(f"{_POSTGRES_PROBLEM}, and LEASED_REQUIRE_POSTGRES=1 forbids skipping")
    pytest.skip(_POSTGRES_PROBLEM, allow_module_level=True)


@pytest.fixture
def url():
    with postgres_schema() as schema_url:
        yield schema_url


def with_url_parameters(url: str, options: str = "", **parameters: str) -> str:
    """The URL with more libpq parameters, and `options` appended to the ones it has."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if options:
        query["options"] = f"{query.get('options', '')} {options}".strip()
    return urlunsplit(parts._replace(query=urlencode({**query, **parameters}, quote_via=quote)))


def test_a_server_that_refuses_writes_is_an_outage_the_worker_waits_out(url, caplog):
    """A standby in recovery refuses every write (SQLSTATE 25006); so does a session whose
    transactions are read-only, as here. leased says so in one line and the worker waits."""
    Leased(url).migrate()
    app = Leased(with_url_parameters(url, "-cdefault_transaction_read_only=on"))
    noop = app.task(name="noop")(lambda: None)
    with pytest.raises(DatabaseUnavailable, match="read-only") as raised:
        noop.enqueue()
    assert "\n" not in str(raised.value) and "target_session_attrs=read-write" in str(raised.value)
    caplog.set_level(logging.WARNING, logger="leased.worker")
    with running_worker(app) as worker:  # raises on exit if the worker stopped on the error
        wait_for(lambda: "refused a write" in caplog.text, message="the worker to retry")
        assert not worker.stopping
    app.close()


def test_pooled_connections_closed_by_their_server_never_reach_a_call(url):
    """A crash, a restart or a failover closes every pooled connection: the next enqueue takes a
    sound one (or connects) instead of failing on a dead one."""
    name = f"leased_stale_{uuid.uuid4().hex[:8]}"
    app = Leased(with_url_parameters(url, application_name=name))
    noop = app.task(name="noop")(lambda: None)
    noop.enqueue()
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,))
        wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                       (name,)).fetchone()[0] == 0, message="the sessions to end")
    noop.enqueue()
    with psycopg.connect(url) as theirs:
        noop.using(connection=theirs).enqueue()
    assert app.counts()["default"]["pending"] == 3
    app.close()


class RenewalsHeldBack:
    """The real backend, except that renewals wait until released: only the claim's own lease counts."""

    def __init__(self, backend):
        self._backend = backend
        self.released = threading.Event()

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def renew(self, leases, wait_seconds=None, progress=None):
        self.released.wait(60)
        return self._backend.renew(leases, wait_seconds, progress)


def test_a_claim_that_waited_for_a_connection_keeps_its_whole_lease(url):
    """The lease runs from the claim statement, not from the call: a claim that waited longer than
    a lease for a pooled connection (a busy pool; a failover) still runs its job to the end."""
    app = Leased(url)
    backend = app._backend = RenewalsHeldBack(app.backend)

    @app.task(name="brief", lease=1.0)
    def brief() -> str:
        time.sleep(0.3)  # longer than the watchdog's beat, well within the lease
        return "ran"

    job = brief.enqueue()
    pool = backend.connections.pools.open_claims_pool()
    held = [pool.getconn() for _ in range(pool.max_size)]
    try:
        with running_worker(app):
            wait_for(lambda: pool.get_stats().get("requests_waiting", 0) >= 1, message="the claim to wait")
            time.sleep(1.5)  # the claim waits for a connection, here for longer than the lease
            for connection in held:
                pool.putconn(connection)
            wait_for(lambda: app.get_job(job.id).status == "done", message="the job to be done")
            backend.released.set()  # so that the worker stops at once
    finally:
        backend.released.set()
    assert [attempt.outcome for attempt in app.get_job(job.id).history] == [Outcome.DONE]
    app.close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe is closed


def test_a_multi_host_url_that_reaches_no_host_gives_each_hosts_reason_in_one_line():
    first, second = _closed_port(), _closed_port()
    app = Leased(f"postgresql://postgres@127.0.0.1:{first},127.0.0.1:{second}/test?connect_timeout=2")
    with pytest.raises(DatabaseUnavailable) as raised:
        app.counts()
    message = str(raised.value)
    assert "\n" not in message, message
    assert f"127.0.0.1:{first}: Connection refused" in message and f"127.0.0.1:{second}: Connection refused" in message


@pytest.mark.parametrize("setting", ["lock_timeout = '100ms'", "statement_timeout = '300ms'"])
def test_a_dbas_timeout_on_the_role_is_an_outage_the_worker_rides_out(url, setting, caplog):
    """DBAs set lock_timeout and statement_timeout on roles. A table lock held past them used to kill
    every worker with a traceback (LockNotAvailable, QueryCanceled) and hand producers the raw
    error: now the producer gets a DatabaseConflict naming the timeout, and the worker waits it out."""
    Leased(url).migrate()
    role = f"leased_dba_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
        admin.execute(f"ALTER ROLE {role} SET {setting}")
    app = Leased(urlunsplit(urlsplit(url)._replace(netloc=f"{role}@{urlsplit(url).hostname}:{urlsplit(url).port}")))
    try:
        ran: list[int] = []
        count = app.task(name="count")(ran.append)
        count.enqueue_many([(n,) for n in range(20)])
        caplog.set_level(logging.WARNING, logger="leased.worker")
        with psycopg.connect(url) as holder:
            holder.execute("LOCK TABLE leased_jobs IN ACCESS EXCLUSIVE MODE")  # held until the rollback below
            with pytest.raises(DatabaseConflict, match="timeout") as raised:
                count.enqueue(99)
            assert "\n" not in str(raised.value) and "nothing was written" in str(raised.value)
            with running_worker(app) as worker:  # raises on exit if the worker stopped on the error
                wait_for(lambda: "canceling statement" in caplog.text, message="the worker to meet the timeout")
                holder.rollback()
                wait_for(lambda: len(ran) == 20, message="the jobs to run once the lock is gone")
                assert not worker.stopping
        assert sorted(ran) == list(range(20)) and app.job_counts().totals["done"] == 20
    finally:
        app.close()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")
