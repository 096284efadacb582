"""A transaction left open elsewhere holds back PostgreSQL's vacuum: dead rows stay and claims slow
down, and nothing else says so. `leased why` and the dashboard name it, from pg_stat_activity.

The transaction is real, on a second connection, idle in transaction; the threshold it must be
older than is the app's old_transaction_after (zero here, so that nothing waits a minute).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from leased import Leased
from leased.errors import ConfigurationError
from leased.horizon import OLD_TRANSACTION_AFTER

with warnings.catch_warnings():  # as test_web imports it: without httpx's deprecation warning
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from leased.web import dashboard

HOLDER = "leased-test-holder"
APP_SOURCE = """import os
from leased import Leased

app = Leased(os.environ["TEST_APP_URL"], old_transaction_after=0)
"""


def named(app: Leased, job_id: int, pid: int) -> list:
    return [reason for reason in app.why(job_id).reasons
            if reason.code == "old_transaction" and reason.data["pid"] == pid]


def test_why_and_the_dashboard_name_a_transaction_that_holds_back_vacuum(database_url, capabilities, tmp_path):
    app = Leased(database_url, old_transaction_after=0)
    if not capabilities.reports_old_transactions:  # SQLite has no such horizon; MariaDB's is not read
        job = app.task(name="waits")(lambda: None).enqueue()
        assert not [reason for reason in app.why(job.id).reasons if reason.code == "old_transaction"]
        assert app.overview().old_transactions == ()
        app.close()
        return
    import psycopg

    # A second connection with a transaction open, idle, holding an xid: what a forgotten session does.
    holder = psycopg.connect(database_url, application_name=HOLDER)
    holder.execute("SELECT txid_current()")  # BEGIN is implicit: psycopg does not autocommit
    try:
        job = app.task(name="waits")(lambda: None).enqueue()
        pid = holder.info.backend_pid
        (reason,) = named(app, job.id, pid)
        assert reason.data["application_name"] == HOLDER and reason.data["state"] == "idle in transaction"
        assert reason.data["query"] == "SELECT txid_current()" and reason.data["open_seconds"] >= 0
        assert reason.message.startswith("A transaction open for ")
        assert f"holds back vacuum: pid {pid} (" in reason.message
        assert "claims slow down" in reason.message and f"pg_terminate_backend({pid})" in reason.message

        (tmp_path / "horizon_app.py").write_text(APP_SOURCE)
        printed = subprocess.run([sys.executable, "-m", "leased.cli.main", "why", "horizon_app:app", str(job.id)],
                                 cwd=tmp_path, env={**os.environ, "TEST_APP_URL": database_url},
                                 capture_output=True, text=True, timeout=60)
        assert printed.returncode == 0, printed.stderr
        assert f"holds back vacuum: pid {pid} (" in printed.stdout and f"application {HOLDER}" in printed.stdout

        page = TestClient(dashboard(app)).get("/").text
        assert f'data-old-transaction="{pid}"' in page and f"application {HOLDER}" in page

        patient = Leased(database_url)  # the default threshold: a young transaction is not named
        try:
            assert patient.old_transaction_after == OLD_TRANSACTION_AFTER and not named(patient, job.id, pid)
        finally:
            patient.close()

        holder.rollback()  # once it ends, nothing is said about it
        assert not named(app, job.id, pid)
        assert f'data-old-transaction="{pid}"' not in TestClient(dashboard(app)).get("/").text
    finally:
        holder.close()
        app.close()


@pytest.mark.parametrize("value", [-1, "60", True, None])
def test_a_bad_threshold_is_refused_naming_the_field(value):
    with pytest.raises(ConfigurationError, match="old_transaction_after must be a number of seconds"):
        Leased("sqlite:///unused.db", old_transaction_after=value)


SECRET_STATEMENT = "SELECT txid_current(), 'token-s3cr3t' AS token, 4111111111111111 AS card, $$dollar s3cr3t$$ AS note"


@pytest.mark.needs("reports_old_transactions")
def test_another_sessions_statement_is_shown_without_its_literals(database_url):
    """pg_stat_activity holds other sessions' statements with their values: `leased why` and the
    dashboard printed them to anyone who could read the page (a password in an ALTER ROLE, a card
    number in an INSERT). The statement's shape is what tells an operator whose session it is."""
    import psycopg

    app = Leased(database_url, old_transaction_after=0)
    holder = psycopg.connect(database_url, application_name=HOLDER)
    holder.execute(SECRET_STATEMENT)
    try:
        job = app.task(name="waits")(lambda: None).enqueue()
        (reason,) = named(app, job.id, holder.info.backend_pid)
        assert reason.data["query"] == "SELECT txid_current(), ? AS token, ? AS card, ? AS note", reason.data["query"]
        page = TestClient(dashboard(app)).get("/").text
        assert "txid_current(), ? AS token" in page and "s3cr3t" not in page and "4111" not in page
    finally:
        holder.close()
        app.close()


@pytest.mark.parametrize("statement, shown", [
    ("UPDATE t SET a = 'x''y', b = E'z\\'' WHERE id = 42", "UPDATE t SET a = ?, b = ? WHERE id = ?"),
    ("ALTER ROLE app PASSWORD 'hunter2'", "ALTER ROLE app PASSWORD ?"),
    ("SELECT $tag$ a $ b $tag$, t1.c2 FROM t1", "SELECT ?, t1.c2 FROM t1"),
    ("SELECT * FROM t WHERE x = $1 AND y = -2.5e3", "SELECT * FROM t WHERE x = $1 AND y = -?"),
    ("INSERT INTO t VALUES ('cut short by track_activity_query_si", "INSERT INTO t VALUES (?"),
])
def test_literals_are_stripped_from_a_statement(statement, shown):
    from leased.horizon import without_literals

    assert without_literals(statement) == shown
