"""leased on each MariaDB driver installed here (PyMySQL always: it is what `leased[mariadb]`
installs; mysqlclient where it was built), through the one seam, leased.backends.mariadb.driver.

The rest of the suite runs on whichever driver the seam picks (mysqlclient when installed, or
LEASED_MARIADB_DRIVER; CI sets pymysql, as a fresh machine has only it); these tests run the paths
where the drivers differ (errors, lost connections, a caller's connection) on each of them."""

from __future__ import annotations

import tomllib

import pytest

from conftest import _mariadb_connection
from leased.backends.ports import AttemptEnd, ClaimRequest
from leased.backends.mariadb import driver
from leased.backends.mariadb.backend import connect_arguments
from leased.errors import DatabaseUnavailable, InvalidTransition
from leased.jobs import Outcome
from paths import ROOT

on_mariadb = pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
DRIVERS = {installed.name: installed for installed in driver.installed_drivers()}


@pytest.fixture(params=sorted(DRIVERS))
def on_driver(request, monkeypatch):
    """Each installed driver in turn as the one leased's own connections use."""
    monkeypatch.setattr(driver, "DRIVER", DRIVERS[request.param])
    return DRIVERS[request.param]


def test_the_extra_installs_pymysql_and_the_suite_has_it():
    # A fresh machine builds nothing for `pip install 'leased[mariadb]'`: its driver is a wheel.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [requirement.split(">")[0] for requirement in extras["mariadb"]] == ["PyMySQL"]
    assert "PyMySQL" in DRIVERS


def test_pyproject_and_the_docs_agree_that_mysql_is_refused():
    # The code refuses a MySQL server (server_problem); no extra or comment may say it works.
    pyproject, guide = (ROOT / "pyproject.toml").read_text(), (ROOT / "docs" / "howto" / "mariadb.md").read_text()
    assert "mysql" not in tomllib.loads(pyproject)["project"]["optional-dependencies"]
    assert "MySQL 8" not in pyproject and "a MySQL server is refused" in pyproject
    assert "**MySQL is not supported.**" in guide


@on_mariadb
def test_jobs_run_end_to_end_on_each_driver(app, on_driver):
    @app.task(name="double")
    def double(n: int) -> int:
        return 2 * n

    job = double.enqueue(21)
    app.run_until_empty()
    assert (app.get_job(job.id).status, app.get_job(job.id).result) == ("done", 42)
    assert type(app.backend.connection()) is on_driver.connection_class


@on_mariadb
def test_the_drivers_errors_become_leased_errors(app, on_driver):
    @app.task(name="keyed")
    def keyed() -> None: ...

    first = keyed.using(idempotency_key="k").enqueue()
    app.cancel(first.id)
    keyed.using(idempotency_key="k").enqueue()  # a new pending job holds the key now
    with pytest.raises(InvalidTransition, match="holds its idempotency key"):  # the driver's IntegrityError
        app.retry(first.id)
    app.backend.close()
    with _mariadb_connection(app.database_url) as connection, connection.cursor() as cursor:
        cursor.execute("DROP TABLE leased_attempts")
    with pytest.raises(Exception) as raised:  # the driver's "no such table", told apart from the others
        app.get_job(first.id)
    dialect = app.backend.dialect
    assert dialect.is_missing_table(raised.value) or dialect.is_missing_table(raised.value.__cause__)


@on_mariadb
def test_a_killed_connection_is_unavailable_once_then_opened_again(app, on_driver):
    @app.task(name="t")
    def t() -> None: ...

    t.enqueue()
    own = app.backend.connection()
    with own.cursor() as cursor:
        cursor.execute("SELECT CONNECTION_ID()")
        (connection_id,) = cursor.fetchone()
    killer = _mariadb_connection(app.database_url)
    try:
        killer.cursor().execute(f"KILL {connection_id}")
    finally:
        killer.close()
    with pytest.raises(DatabaseUnavailable, match="lost the connection"):
        app.backend.claim(ClaimRequest("w", ("t",), None, 5))
    claimed = app.backend.claim(ClaimRequest("w", ("t",), None, 5))  # a new connection
    assert len(claimed) == 1
    assert app.backend.finish([AttemptEnd(claimed[0].lease, Outcome.DONE, "null")]) == [True]


@on_mariadb
@pytest.mark.parametrize("callers_driver", sorted(DRIVERS))
def test_a_callers_connection_of_either_driver_takes_the_job_in_its_transaction(app, on_driver, callers_driver):
    # Django's connection may be mysqlclient's while leased's own are PyMySQL's, or the reverse.
    @app.task(name="t")
    def t(n: int) -> None: ...

    arguments, _ = connect_arguments(app.database_url)
    connection = DRIVERS[callers_driver].connect(**{**arguments, "autocommit": False})
    try:
        connection.begin()
        job = t.using(connection=connection).enqueue(1)
        assert app.count_jobs() == 0  # not committed yet
        connection.commit()
    finally:
        connection.close()
    assert app.get_job(job.id).status == "pending"
