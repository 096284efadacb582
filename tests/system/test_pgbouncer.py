"""leased through a real PgBouncer (Debian's 1.18), in transaction and in session pooling mode.

The test starts pgbouncer itself (tests/pgbouncer.py), in front of the test PostgreSQL, with a role
and a schema of its own. Without a pgbouncer binary the tests skip, unless LEASED_REQUIRE_PGBOUNCER=1
(CI sets it) makes that a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

import pgbouncer
from conftest import _POSTGRES_PROBLEM, POSTGRES_URL, REQUIRE_POSTGRES, wait_for
from leased import Leased, Outcome
from leased.backends.postgres.url import own_parameters
from leased.errors import ConfigurationError
from leased.testing import advance
from paths import PROGRAMS, SRC, pythonpath

pytestmark = [pytest.mark.slow, pytest.mark.system]
JOBS = 2_000

_PROBLEM = _POSTGRES_PROBLEM or pgbouncer.missing()
if _PROBLEM:
    if os.environ.get("LEASED_REQUIRE_PGBOUNCER") == "1" or (REQUIRE_POSTGRES and _POSTGRES_PROBLEM):
        raise RuntimeError(f"{_PROBLEM}, and LEASED_REQUIRE_PGBOUNCER=1 (or LEASED_REQUIRE_POSTGRES=1) "
                           "forbids skipping")
    pytest.skip(_PROBLEM, allow_module_level=True)


@pytest.fixture(params=["transaction", "session"])
def bouncer(request) -> Iterator[pgbouncer.PgBouncer]:
    with pgbouncer.running(POSTGRES_URL, request.param) as running:
        yield running


@pytest.fixture
def transaction_bouncer() -> Iterator[pgbouncer.PgBouncer]:
    with pgbouncer.running(POSTGRES_URL, "transaction") as running:
        yield running


def start_worker(url: str, log: Path, **env: str) -> subprocess.Popen:
    env = {**os.environ, "LEASED_DATABASE_URL": url,
           "PYTHONPATH": pythonpath(), **env}
    return subprocess.Popen([sys.executable, "-m", "leased.cli.main", "worker", "pgbouncer_app:app",
                             "--concurrency", "10", "--poll-interval", "0.1s"],
                            cwd=PROGRAMS, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def cli(*arguments: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "leased.cli.main", *arguments], env=env, cwd=PROGRAMS,
                          capture_output=True, text=True, timeout=60)


def server_settings(bouncer: pgbouncer.PgBouncer, names: list[str]) -> list[tuple[str, ...]]:
    """What every server connection of the pool has for `names`: one client per server connection,
    each holding a transaction open, so that the pooler hands each a different one."""
    with ExitStack() as stack:
        clients = [stack.enter_context(psycopg.connect(bouncer.url, prepare_threshold=None)) for _ in range(4)]
        for client in clients:
            client.execute("SELECT 1")  # each stays in its transaction, on its own server connection
        return [tuple(client.execute(f"SHOW {name}").fetchone()[0] for name in names) for client in clients]


def test_two_workers_and_a_kill_through_pgbouncer_lose_nothing(bouncer, tmp_path):
    """2,000 jobs; one worker process killed with SIGKILL midway, holding jobs (one for certain: its
    handler hangs in that worker); they are done by the other after the lease."""
    producer = Leased(bouncer.url)
    bounce = producer.task(name="bounce", lease=3.0)(lambda n: n)
    # Push through the pooler needs a session: the first worker LISTENs on a listen_url (direct; in
    # session mode the pooler's own URL serves), the second polls and says so.
    listen_url = bouncer.direct_url if bouncer.pool_mode == "transaction" else bouncer.url
    pushed = start_worker(f"{bouncer.url}?listen_url={listen_url}", tmp_path / "pushed.log", PGBOUNCER_APP_HANG="1")
    polling = None
    try:
        held = bounce.enqueue(-1)  # the first worker holds it until it is killed
        wait_for(lambda: producer.get_job(held.id).lease_owner is not None, message="the first worker to claim")
        polling = start_worker(bouncer.url, tmp_path / "polling.log")
        bounce.enqueue_many([(n,) for n in range(JOBS // 2)])
        for n in range(JOBS // 2, JOBS - 1):  # one statement at a time, past psycopg's prepare threshold
            bounce.enqueue(n)
        wait_for(lambda: producer.counts()["default"]["done"] >= JOBS // 3, message="a third done")
        pushed.kill()
        pushed.wait()
        wait_for(lambda: producer.counts()["default"]["done"] == JOBS, timeout=120, message="all done")
        counts = producer.counts()["default"]
        assert (counts["pending"], counts["running"], counts["failed"]) == (0, 0, 0)
        first_worker = producer.get_job(held.id).history[0].worker_id
        assert [(attempt.worker_id == first_worker, attempt.outcome) for attempt in producer.get_job(held.id).history
                ] == [(True, Outcome.EXPIRED), (False, Outcome.DONE)]

        # The command line and the dashboard, through the same pooler.
        stats = cli("stats", "--database", bouncer.url, "--json", "--exact")
        assert stats.returncode == 0, stats.stderr
        assert json.loads(stats.stdout)
        listed = cli("jobs", "--database", bouncer.url, "--status", "done", "--limit", "5")
        assert listed.returncode == 0 and len(listed.stdout.splitlines()) >= 5, listed.stderr
        from starlette.testclient import TestClient

        from leased.web import dashboard

        client = TestClient(dashboard(producer))
        job_id = producer.list_jobs(limit=1)[0].id
        for page in ["/", "/jobs", "/jobs?status=done", f"/jobs/{job_id}", "/schedules", "/metrics"]:
            assert client.get(page).status_code == 200, page
    finally:
        for process in filter(None, (pushed, polling)):
            process.kill()
            process.wait()
        producer.close()
    pushed_log, polling_log = (tmp_path / "pushed.log").read_text(), (tmp_path / "polling.log").read_text()
    assert "Traceback" not in pushed_log + polling_log, pushed_log + polling_log
    assert "wake-ups fall back to polling" not in pushed_log and "listener lost" not in pushed_log
    assert polling_log.count("wake-ups fall back to polling") == 1, polling_log
    if bouncer.pool_mode == "transaction":
        # Nothing leased set stayed on a server connection, where the next client would get it.
        assert set(server_settings(bouncer, ["synchronous_commit", "enable_seqscan", "jit"])) == {("on", "on", "on")}


def test_the_pooler_is_found_and_a_direct_connection_is_not(transaction_bouncer):
    through, direct = Leased(transaction_bouncer.url), Leased(transaction_bouncer.direct_url)
    try:
        through.migrate()
        assert (through.backend.behind_pooler, direct.backend.behind_pooler) == (True, False)
        assert through.backend.listener() is None and "listen_url" in through.backend.polling_reason
        assert direct.backend.listener() is not None and direct.backend.polling_reason is None
    finally:
        through.close()
        direct.close()


def test_one_pruner_at_a_time_through_a_transaction_pooler(transaction_bouncer):
    """A session lock would stay on a server connection the next client gets: the second pruner
    would take it again there, and the lock would outlive the pass."""
    first, second = Leased(transaction_bouncer.url), Leased(transaction_bouncer.url)
    try:
        first.migrate()
        with first.backend.pruning() as locked:
            assert locked
            with second.backend.pruning() as also_locked:
                assert not also_locked
        with second.backend.pruning() as locked_after:
            assert locked_after
    finally:
        first.close()
        second.close()


def test_a_listen_url_that_reaches_another_jobs_table_is_refused(transaction_bouncer):
    app = Leased(f"{transaction_bouncer.url}?listen_url={POSTGRES_URL}")  # the postgres role: another search_path
    try:
        app.migrate()
        listener = app.backend.listener()
        with pytest.raises(ConfigurationError, match="listen_url reaches"):
            listener.wait(0.01)
        listener.close()
    finally:
        app.close()


def test_the_clock_seam_is_refused_through_a_pooler(transaction_bouncer):
    app = Leased(transaction_bouncer.url)
    try:
        app.migrate()
        advance(app, 60)
        with pytest.raises(ConfigurationError, match="clock seam"):
            app.counts()
    finally:
        app.close()


def test_leased_url_parameters_are_taken_out_and_the_rest_kept_byte_for_byte():
    url = "postgresql://u@h:6432/db?options=-c%20a%3Db+c&listen_url=postgresql%3A%2F%2Fu%40d%2Fdb&sslmode=disable"
    assert own_parameters(url) == ("postgresql://u@h:6432/db?options=-c%20a%3Db+c&sslmode=disable",
                                    {"listen_url": "postgresql://u@d/db"})
    assert own_parameters("postgresql://u@h/db?sslmode=disable") == ("postgresql://u@h/db?sslmode=disable", {})


def test_a_producers_own_connection_through_the_pooler_enqueues_in_its_transaction(transaction_bouncer):
    """Enqueues on a caller's connection through PgBouncer (opened with prepare_threshold=None, as
    any psycopg connection through transaction pooling must be) are written at its commit only."""
    app = Leased(transaction_bouncer.url)
    task = app.task(name="bounce")(lambda n: n)
    try:
        with psycopg.connect(transaction_bouncer.url, prepare_threshold=None) as connection:
            for n in range(10):  # past psycopg's prepare threshold
                task.using(connection=connection).enqueue(n)
            assert app.counts().get("default", {}).get("pending", 0) == 0  # not committed yet
        assert app.counts()["default"]["pending"] == 10
    finally:
        app.close()
