"""The least a PostgreSQL role needs to run leased (docs/reliability.md, "Least privilege"): a
worker, a producer and the dashboard under exactly the documented grants, on a schema another
role migrated; and a missing grant said in one line naming it, not a traceback.
"""

from __future__ import annotations

import logging
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from conftest import _POSTGRES_PROBLEM, REQUIRE_POSTGRES, postgres_schema
from leased import ConfigurationError, JobStatus, Leased

if _POSTGRES_PROBLEM:
    if REQUIRE_POSTGRES:
        raise RuntimeError(f"{_POSTGRES_PROBLEM}, and LEASED_REQUIRE_POSTGRES=1 forbids skipping")
    pytest.skip(_POSTGRES_PROBLEM, allow_module_level=True)

# What docs/reliability.md says to grant a role that runs leased (not one that migrates it).
RUNNING_GRANTS = """
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA {schema} TO {role};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
"""


@pytest.fixture
def schema_url():
    with postgres_schema() as url:
        Leased(url).migrate()  # by the owner, as a deploy's migration step would
        yield url


def as_role(url: str, grants: str):
    """A role of its own with `grants` on the URL's schema; yields its URL, drops it after."""
    role = f"leased_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        schema = admin.execute("SELECT current_schema()").fetchone()[0]
        admin.execute(f"CREATE ROLE {role} LOGIN")
        for statement in filter(str.strip, grants.format(schema=schema, role=role).split(";")):
            admin.execute(statement)
    parts = urlsplit(url)
    return role, urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))


def drop_role(url: str, role: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")


def test_a_worker_producer_and_dashboard_run_under_the_documented_grants(schema_url, caplog):
    from starlette.testclient import TestClient

    from leased.web import dashboard

    role, url = as_role(schema_url, RUNNING_GRANTS)
    app = Leased(url)
    try:
        double = app.task(name="double")(lambda n: n * 2)
        jobs = double.enqueue_many([(n,) for n in range(1, 2001)])  # enough for the due set to rotate
        caplog.set_level(logging.WARNING)
        assert app.run_until_empty(concurrency=8).done == 2000
        assert all(app.get_job(job.id).status is JobStatus.DONE for job in jobs[:5])
        assert app.backend.reclaim_expired() == 0 and app.backend.reclaim_expired(skip_if_done_within=0.8) == 0
        assert "permission denied" not in caplog.text, caplog.text
        assert TestClient(dashboard(app)).get("/jobs").status_code == 200
    finally:
        app.close()
        drop_role(schema_url, role)


def test_a_missing_grant_is_one_line_naming_it(schema_url):
    role, url = as_role(schema_url, RUNNING_GRANTS + "REVOKE UPDATE ON ALL SEQUENCES IN SCHEMA {schema} FROM {role};")
    app = Leased(url)
    try:
        app.task(name="t")(lambda: None).enqueue()
        with pytest.raises(ConfigurationError) as refused:
            app.backend.reclaim_expired(skip_if_done_within=0.8)  # the turn is a sequence's setval
        message = str(refused.value)
        assert "\n" not in message and "permission denied for sequence" in message
        assert "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES" in message
    finally:
        app.close()
        drop_role(schema_url, role)
