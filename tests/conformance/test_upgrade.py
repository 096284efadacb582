"""Upgrading a PostgreSQL database under load: `leased migrate` while the previous release's workers
and producers run. Each version is applied in a transaction of its own, and a version waits for its
locks at most briefly (migration_lock_timeout), giving way to the statements queued behind it and
trying again, rather than holding up every claim and enqueue until a long transaction ends.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from conftest import _POSTGRES_PROBLEM, REQUIRE_POSTGRES, postgres_schema, wait_for
from leased import Leased
from leased.backends import migrator
from leased.backends.ports import ClaimRequest

if _POSTGRES_PROBLEM:
    if REQUIRE_POSTGRES:
        raise RuntimeError(f"{_POSTGRES_PROBLEM}, and LEASED_REQUIRE_POSTGRES=1 forbids skipping")
    pytest.skip(_POSTGRES_PROBLEM, allow_module_level=True)

BEFORE_THE_DUE_SET = 17
ENQUEUE_AS_0017 = ("INSERT INTO leased_jobs (task_name, queue_name, status, max_attempts, lease_seconds) "
                   "VALUES ('t', 'default', 'pending', 3, 30)")


def waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as connection:
        return bool(connection.execute("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND wait_event_type = 'Lock'").fetchall())


@pytest.mark.alone  # waiting_on_a_lock reads every session of the database
def test_a_migration_waiting_for_its_locks_gives_way_to_the_producers_behind_it():
    """An older release's producer holds a transaction open on leased_jobs; migrate's first version
    (0018's CREATE TRIGGER) must wait for it. Meanwhile another enqueue of that release, which
    used to queue behind the migration's lock request until the transaction ended, goes through."""
    with postgres_schema() as url:
        with psycopg.connect(url, autocommit=True) as connection:
            migrator("postgres").apply(connection, up_to=BEFORE_THE_DUE_SET)
        app = Leased(url, migrate=False)
        failures: list[BaseException] = []

        def migrate() -> None:
            try:
                app.migrate()
            except BaseException as error:
                failures.append(error)

        with psycopg.connect(url) as open_transaction:
            open_transaction.execute(ENQUEUE_AS_0017)  # ROW EXCLUSIVE on leased_jobs until the commit
            migrating = threading.Thread(target=migrate)
            migrating.start()
            wait_for(lambda: waiting_on_a_lock(url), message="the migration to wait for its lock")
            with psycopg.connect(url, autocommit=True) as producer:
                producer.execute("SET statement_timeout = '10s'")  # before the change: held until the commit
                producer.execute(ENQUEUE_AS_0017)
            assert migrating.is_alive()  # still trying: the open transaction still holds leased_jobs
            open_transaction.commit()
        migrating.join(timeout=60)
        assert not migrating.is_alive() and not failures, failures
        with psycopg.connect(url, autocommit=True) as connection:
            versions = {version for (version,) in connection.execute("SELECT version FROM leased_schema_version")}
        # Every version this release has: numbers merged from branches may leave a gap (0028 before 0026).
        assert versions == {migration.version for migration in migrator("postgres").migrations}
        app.task(name="t")(lambda: None)
        assert len(app.backend.claim(ClaimRequest("w", ("t",), None, 10))) == 2  # both in the due set
        app.close()
