"""Which servers a mariadb:// or mysql:// URL may reach: MariaDB 10.6+, under either scheme. MySQL
(no server of it can run here) is refused by what SELECT VERSION() says, in one clear error."""

from __future__ import annotations

import re

import pytest

from leased import Leased
from leased.errors import DatabaseUnavailable
from leased.backends.ports import ClaimRequest
from leased.backends.mariadb.server import server_problem


@pytest.mark.parametrize("version", ["8.0.36", "8.4.3", "9.1.0-commercial"])
def test_mysql_is_refused_naming_what_it_lacks(version):
    problem = server_problem(version)
    assert problem and f"MySQL {version}" in problem
    assert "INSERT ... RETURNING" in problem and "use a MariaDB server" in problem


def test_mariadb_older_than_10_6_is_refused():
    assert "MariaDB 10.6 or newer" in server_problem("10.5.27-MariaDB-log")


@pytest.mark.parametrize("version", ["10.6.0-MariaDB", "10.11.19-MariaDB-0+deb12u1", "11.4.2-MariaDB-ubu2404"])
def test_mariadb_10_6_and_newer_is_accepted(version):
    assert server_problem(version) is None


@pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
def test_a_mysql_url_reaching_mariadb_works_as_mariadb_does(database_url):
    app = Leased("mysql://" + database_url.split("://", 1)[1])

    @app.task(name="t")
    def t(n): ...

    job = t.enqueue(1)
    assert [claimed.id for claimed in app.backend.claim(ClaimRequest("w", ("t",), None, 5))] == [job.id]
    assert app.backend.connections.server_checked
    app.close()


@pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
def test_a_batch_past_max_allowed_packet_is_one_clear_error_with_nothing_written(database_url):
    """The server refuses a statement larger than its max_allowed_packet and drops the connection:
    enqueue_many raised a raw OperationalError 1153 or "MySQL server has gone away", and the next call
    on the app met the dropped connection. Now it is one error naming the size and the setting,
    before anything is sent; nothing is written and the app goes on."""
    from leased import PayloadError
    from conftest import raw_scalar

    app = Leased(database_url)
    limit = int(raw_scalar(app, "SELECT @@max_allowed_packet"))
    if limit > 64 * 1024 * 1024:
        pytest.skip(f"max_allowed_packet is {limit} bytes: a batch past it would take too much memory here")
    task = app.task(name="t")(lambda text: None)
    task.enqueue("first")
    big = "x" * 900_000
    with pytest.raises(PayloadError) as refused:
        task.enqueue_many([(big,)] * (limit // 900_000 + 2))
    message = str(refused.value)
    assert "max_allowed_packet" in message and f"{limit:,}" in message and "\n" not in message, message
    assert raw_scalar(app, "SELECT count(*) FROM leased_jobs") == 1
    assert task.enqueue("after").id  # the app's connection still works
    # Where the size was not checked first (the estimate is short, say), the server's refusal is
    # the same error, and the connection it dropped is not used again. The server answers and
    # closes at once: under load the client may meet the closed socket before it reads the answer,
    # and then it can only say the connection was lost (inside the enqueue's transaction, so
    # nothing was written either way).
    app.backend.connections.max_packet = None
    with pytest.raises((PayloadError, DatabaseUnavailable)) as refused_late:
        task.enqueue_many([(big,)] * (limit // 900_000 + 2))
    if isinstance(refused_late.value, PayloadError):
        assert re.search("max_allowed_packet.*nothing was written", str(refused_late.value)), refused_late.value
    else:
        assert "lost the connection" in str(refused_late.value), refused_late.value
    assert task.enqueue("again").id
    assert raw_scalar(app, "SELECT count(*) FROM leased_jobs") == 3
    app.close()


def test_no_mariadb_statement_swallows_data_errors():
    """INSERT IGNORE turns every strict-mode error into a warning (a value cut or clamped to fit is
    stored, and reported whole); a key that is taken is caught by its index's name instead."""
    from leased.backends.mariadb.backend import QUERIES

    swallowing = [name for name, text in QUERIES.items() if "INSERT IGNORE" in "\n".join(
        line for line in text.upper().splitlines() if not line.lstrip().startswith("--"))]
    assert swallowing == []
