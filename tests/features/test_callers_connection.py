"""task.using(connection=...): the first use inside the caller's transaction, a lock that stays
held, and connections that cannot be the app's (another kind, another database)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _POSTGRES_PROBLEM, POSTGRES_URL, REQUIRE_POSTGRES
from leased import ConfigurationError, DatabaseLocked, JobStatus, Leased
from paths import TESTS

# The app's first use is an enqueue inside the caller's open transaction, which has written a row
# (so on SQLite it holds the write lock). Prints the job's id, or the error in one line.
FIRST_USE = """
import sys
sys.path.insert(0, sys.argv[2])
from connections import connect, execute
from leased import Leased, LeasedError

url = sys.argv[1]
app = Leased(url)


@app.task(name="t")
def t(n): ...


connection = connect(url)
execute(connection, "CREATE TABLE IF NOT EXISTS orders (id integer)")
connection.commit()
execute(connection, "INSERT INTO orders VALUES (1)")
try:
    job = t.using(connection=connection).enqueue(1)
except LeasedError as error:
    print(f"{type(error).__name__}: {error}")
    connection.rollback()
    app.migrate()  # what the message says to do; then the same transaction works
    execute(connection, "INSERT INTO orders VALUES (1)")
    job = t.using(connection=connection).enqueue(1)
connection.commit()
print(job.id)
"""


def _first_use(database_url: str) -> list[str]:
    process = subprocess.run([sys.executable, "-c", FIRST_USE, database_url, str(TESTS)],
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 0 and process.stderr == "", process.stderr
    return process.stdout.splitlines()


def test_first_use_inside_callers_transaction_with_the_schema_in_place_waits_for_nothing(database_url):
    Leased(database_url).counts()  # the schema, created by an earlier process
    (job_id,) = _first_use(database_url)  # a write lock on the schema check would wait on the caller
    app = Leased(database_url)
    assert app.get_job(int(job_id)).status is JobStatus.PENDING
    app.close()


def test_first_use_inside_callers_transaction_without_the_schema(database_url, capabilities):
    lines = _first_use(database_url)
    if capabilities.single_writer:  # creating it would wait for the caller's own write lock: say what to do
        error, job_id = lines
        assert error.startswith("SchemaNotReady: the leased schema is missing") and "leased migrate" in error
    else:  # the caller's transaction holds no lock of ours: created on a connection of our own
        (job_id,) = lines
    app = Leased(database_url)
    assert app.get_job(int(job_id)).status is JobStatus.PENDING
    app.close()


def test_a_write_lock_held_past_the_busy_timeout_is_a_leased_error_naming_the_holder(tmp_path, monkeypatch):
    from leased.backends.sqlite import queries as sqlite_queries

    monkeypatch.setattr(sqlite_queries, "BUSY_TIMEOUT_MS", 200)  # read where it is defined, at each use
    app = Leased(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.task(name="t")
    def t(n): ...

    app.migrate()
    holder = sqlite3.connect(tmp_path / "jobs.db")
    holder.execute("BEGIN IMMEDIATE")  # the caller's own transaction, on another connection
    with pytest.raises(DatabaseLocked, match=r"another connection held its write lock for .* s .*commit or roll"):
        t.enqueue(1)
    with pytest.raises(DatabaseLocked, match="write lock"):
        app.retry_failed()
    holder.rollback()
    assert t.enqueue(2).status is JobStatus.PENDING
    holder.close()
    app.close()


def test_a_connection_of_the_other_kind_is_named_with_its_module(app, backend_name):
    if backend_name == "sqlite":
        if _POSTGRES_PROBLEM:  # the psycopg connection needs a server
            pytest.fail(_POSTGRES_PROBLEM) if REQUIRE_POSTGRES else pytest.skip(_POSTGRES_PROBLEM)
        import psycopg

        other, named = psycopg.connect(POSTGRES_URL), "got psycopg.Connection"
    else:
        other, named = sqlite3.connect(":memory:"), "got sqlite3.Connection"

    @app.task(name="t")
    def t(n): ...

    with pytest.raises(ConfigurationError, match=named):
        t.using(connection=other).enqueue(1)
    other.close()


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
def test_a_postgres_connection_to_another_database_or_schema_is_refused(app):
    import psycopg

    @app.task(name="t")
    def t(n): ...

    app.migrate()
    same = app.database_url.replace("127.0.0.1", "localhost")  # addressed differently, the same table
    with psycopg.connect(same) as connection:
        assert t.using(connection=connection).enqueue(1).status is JobStatus.PENDING
    other_database = psycopg.conninfo.make_conninfo(app.database_url, dbname="postgres")
    with psycopg.connect(other_database) as connection:
        with pytest.raises(ConfigurationError, match="reaches database 'postgres', not this app's"):
            t.using(connection=connection).enqueue(1)
    with psycopg.connect(POSTGRES_URL) as connection:  # the same database, without the app's search_path
        with pytest.raises(ConfigurationError, match="search_path that finds"):
            t.using(connection=connection).enqueue(1)

    async def enqueue_on_another_database():
        async with await psycopg.AsyncConnection.connect(other_database) as connection:
            await t.using(connection=connection).aenqueue(1)

    with pytest.raises(ConfigurationError, match="reaches database 'postgres'"):
        asyncio.run(enqueue_on_another_database())


def _another_apps_database(backend_name: str, tmp_path: Path):
    """A database of its own with leased's schema in it: another app's, where no worker of ours looks."""
    if backend_name == "sqlite":
        from contextlib import nullcontext

        return nullcontext(f"sqlite:///{tmp_path / 'other.db'}")
    if backend_name == "mariadb":
        from conftest import mariadb_database

        return mariadb_database()
    from conftest import postgres_schema

    return postgres_schema()


def test_a_connection_to_another_apps_database_is_refused_before_writing(app, backend_name, tmp_path):
    """The rule of every backend: connection= must reach the app's own jobs table. Otherwise the job
    would commit, created=True, where no worker of this app ever looks."""
    import connections

    @app.task(name="t")
    def t(n): ...

    app.migrate()
    with _another_apps_database(backend_name, tmp_path) as other_url:
        other_app = Leased(other_url)
        other_app.migrate()
        connection = connections.connect(other_url)
        with pytest.raises(ConfigurationError, match=r"^connection= reaches .*, not this app's .*no worker of this "
                                                     r"app looks\. Pass a connection to the app's own database"):
            t.using(connection=connection).enqueue(1)
        connection.commit()
        connection.close()
        assert other_app.counts() == {} and app.counts() == {}, "nothing was written anywhere"
        other_app.close()


@pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)
def test_sqlite_knows_its_file_however_the_path_is_spelled(app, tmp_path, monkeypatch):
    @app.task(name="t")
    def t(n): ...

    app.migrate()
    path = Path(app.database_url[len("sqlite:///"):])
    (tmp_path / "link.db").symlink_to(path)
    monkeypatch.chdir(path.parent)
    for spelling in (path.name, str(tmp_path / "link.db"), str(path)):  # relative, a symlink, absolute
        with sqlite3.connect(spelling) as connection:
            assert t.using(connection=connection).enqueue(spelling).created
    assert app.counts()["default"]["pending"] == 3
    memory = sqlite3.connect(":memory:")
    with pytest.raises(ConfigurationError, match=r"reaches an in-memory or temporary SQLite database.*pass "
                                                 r"sqlite3.connect\(.*\), in tests too"):
        t.using(connection=memory).enqueue(1)


@pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)
def test_sqlite_refuses_another_file_on_the_async_path(app, tmp_path):
    aiosqlite = pytest.importorskip("aiosqlite")

    @app.task(name="t")
    def t(n): ...

    app.migrate()
    Leased(f"sqlite:///{tmp_path / 'other.db'}").migrate()

    async def enqueue_on(path):
        async with aiosqlite.connect(path) as connection:
            return await t.using(connection=connection).aenqueue(1)

    with pytest.raises(ConfigurationError, match="reaches SQLite file '.*other.db', not this app's"):
        asyncio.run(enqueue_on(tmp_path / "other.db"))
    assert asyncio.run(enqueue_on(app.database_url[len("sqlite:///"):])).created


@pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
def test_mariadb_knows_its_server_however_it_is_addressed(app):
    import connections

    @app.task(name="t")
    def t(n): ...

    app.migrate()
    for url in (app.database_url, app.database_url.replace("127.0.0.1", "localhost")):  # TCP, then the socket
        connection = connections.connect(url)
        assert t.using(connection=connection).enqueue(1).created
        connection.commit()
        connection.close()
    assert app.counts()["default"]["pending"] == 2
