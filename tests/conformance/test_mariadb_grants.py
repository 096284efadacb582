"""The least a MariaDB user needs to run leased (docs/reliability.md, "Least privilege"): a worker,
a producer and the dashboard under exactly the documented grants, on a database another user
migrated; and a missing grant said in one line naming it, not a traceback. The PostgreSQL twin is
tests/conformance/test_postgres_grants.py.
"""

from __future__ import annotations

import logging
import uuid
import warnings

import pytest

from conftest import _MARIADB_PROBLEM, REQUIRE_MARIADB, _mariadb_connection, mariadb_database
from leased import ConfigurationError, JobStatus, Leased

if _MARIADB_PROBLEM:
    if REQUIRE_MARIADB:
        raise RuntimeError(f"{_MARIADB_PROBLEM}, and LEASED_REQUIRE_MARIADB=1 forbids skipping")
    pytest.skip(_MARIADB_PROBLEM, allow_module_level=True)

# What docs/reliability.md says to grant a user that runs leased (not one that migrates it).
RUNNING_GRANTS = "GRANT SELECT, INSERT, UPDATE, DELETE ON `{database}`.* TO '{user}'@'%'"


@pytest.fixture
def database_url():
    with mariadb_database() as url:
        Leased(url).migrate()  # by the owner, as a deploy's migration step would
        yield url


def as_user(url: str, grants: str):
    """A user of its own with `grants` on the URL's database; returns it and its URL."""
    user = f"leased_app_{uuid.uuid4().hex[:8]}"
    database = url.rsplit("/", 1)[-1]
    connection = _mariadb_connection()
    try:
        cursor = connection.cursor()
        cursor.execute(f"CREATE USER '{user}'@'%'")
        for statement in filter(str.strip, grants.format(database=database, user=user).split(";")):
            cursor.execute(statement)
    finally:
        connection.close()
    scheme, rest = url.split("://", 1)
    return user, f"{scheme}://{user}@{rest.split('@', 1)[-1]}"


def drop_user(user: str) -> None:
    connection = _mariadb_connection()
    try:
        connection.cursor().execute(f"DROP USER '{user}'@'%'")
    finally:
        connection.close()


def test_a_worker_producer_and_dashboard_run_under_the_documented_grants(database_url, caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from leased.web import dashboard

    user, url = as_user(database_url, RUNNING_GRANTS)
    app = Leased(url)
    try:
        double = app.task(name="double")(lambda n: n * 2)
        jobs = double.enqueue_many([(n,) for n in range(1, 301)])
        keyed = double.using(idempotency_key="once").enqueue(0)
        assert double.using(idempotency_key="once").enqueue(0).id == keyed.id
        caplog.set_level(logging.WARNING)
        assert app.run_until_empty(concurrency=8).done == 301
        assert all(app.get_job(job.id).status is JobStatus.DONE for job in jobs[:5])
        assert app.backend.reclaim_expired() == 0
        assert isinstance(app.prune(older_than=1), dict)
        assert "denied" not in caplog.text, caplog.text
        client = TestClient(dashboard(app))
        for path in ("/", "/jobs", f"/jobs/{keyed.id}", "/schedules", "/metrics"):
            assert client.get(path).status_code == 200, path
    finally:
        app.close()
        drop_user(user)


def test_a_missing_grant_is_one_line_naming_it(database_url):
    user, url = as_user(database_url, "GRANT SELECT, INSERT ON `{database}`.* TO '{user}'@'%'")
    app = Leased(url)
    try:
        app.task(name="t")(lambda: None).enqueue()
        with pytest.raises(ConfigurationError) as refused:
            app.run_until_empty()  # a claim is an UPDATE
        message = str(refused.value)
        assert "\n" not in message and "UPDATE command denied" in message, message
        assert "GRANT SELECT, INSERT, UPDATE, DELETE ON" in message and "Least privilege" in message, message
    finally:
        app.close()
        drop_user(user)


MIGRATING_GRANTS = ("GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX ON `{database}`.* "
                    "TO '{user}'@'%'")


def test_a_user_with_the_documented_migrating_grants_builds_the_schema():
    with mariadb_database() as url:
        user, user_url = as_user(url, MIGRATING_GRANTS)
        app = Leased(user_url)
        try:
            app.migrate()
            app.task(name="t")(lambda: 7).enqueue()
            assert app.run_until_empty().done == 1
        finally:
            app.close()
            drop_user(user)
