"""SQLAlchemy Sessions and Connections, sync and async, as connection=: the job joins the open
transaction (commit: job and row; rollback: neither), on SQLite and PostgreSQL with every driver
we claim: pysqlite and aiosqlite, psycopg (sync and async) and asyncpg."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from conftest import raw_scalar, raw_sql
from leased import ConfigurationError, Leased
from paths import SRC


def engine_options(database_url: str, driver: str) -> tuple[str, dict]:
    """The app's test database as a SQLAlchemy URL for `driver`, on the test's own schema."""
    if database_url.startswith("sqlite"):
        return database_url.replace("sqlite://", f"sqlite+{driver}://" if driver != "pysqlite" else "sqlite://"), {}
    if database_url.startswith("mariadb"):
        return database_url.replace("mariadb://", f"mysql+{driver}://", 1), {}
    parts = urlsplit(database_url)
    schema = parse_qs(parts.query)["options"][0].split("=", 1)[1]
    base = f"postgresql+{driver}://{parts.netloc}{parts.path}"
    if driver == "asyncpg":
        return base, {"server_settings": {"search_path": schema}}
    return base, {"options": f"-csearch_path={schema}"}


# MariaDB: PyMySQL, the driver leased[mariadb] installs (SQLAlchemy's mysql+mysqldb needs mysqlclient).
SYNC_DRIVERS = {"sqlite": ["pysqlite"], "postgres": ["psycopg"], "mariadb": ["pymysql"]}
ASYNC_DRIVERS = {"sqlite": ["aiosqlite"], "postgres": ["psycopg", "asyncpg"]}
# An AsyncSession needs an async driver: none is claimed on MariaDB (its aenqueue runs the sync driver on a thread).
with_async_drivers = pytest.mark.parametrize("backend_name", list(ASYNC_DRIVERS), indirect=True)


@pytest.fixture
def shop(app) -> Leased:
    app.migrate()  # at start-up: a first use inside the caller's transaction cannot create the schema on SQLite
    raw_sql(app, "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)")

    @app.task(name="confirm")
    def confirm(order_id: int) -> int:
        return order_id

    return app


@pytest.fixture
def engine(shop, backend_name) -> Engine:
    url, connect_args = engine_options(shop.database_url, SYNC_DRIVERS[backend_name][0])
    engine = create_engine(url, connect_args=connect_args)
    yield engine
    engine.dispose()


def orders_and_jobs(app: Leased) -> tuple[int, int]:
    return raw_scalar(app, "SELECT count(*) FROM orders"), app.count_jobs()


@pytest.mark.parametrize("kind", ["session", "connection"])
def test_a_sync_session_or_connection_commits_and_rolls_back_the_job_with_the_row(shop, engine, kind):
    confirm = shop.tasks["confirm"]

    def write(item: str, fail: bool) -> None:
        if kind == "session":
            with Session(engine) as session, session.begin():
                session.execute(text("INSERT INTO orders (id, item) VALUES (:id, :item)"),
                                {"id": len(item), "item": item})
                confirm.using(connection=session).enqueue(len(item))
                if fail:
                    raise RuntimeError("the request failed")
        else:
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO orders (id, item) VALUES (:id, :item)"),
                                   {"id": len(item), "item": item})
                confirm.using(connection=connection).enqueue(len(item))
                if fail:
                    raise RuntimeError("the request failed")

    with pytest.raises(RuntimeError):
        write("rolled back", fail=True)
    assert orders_and_jobs(shop) == (0, 0)
    write("kept", fail=False)
    assert orders_and_jobs(shop) == (1, 1)
    assert shop.run_until_empty().done == 1


@with_async_drivers
@pytest.mark.parametrize("kind", ["session", "connection"])
def test_an_async_session_or_connection_commits_and_rolls_back_the_job_with_the_row(shop, backend_name, kind):
    confirm = shop.tasks["confirm"]

    async def write(engine, order_id: int, fail: bool) -> None:
        insert = text("INSERT INTO orders (id, item) VALUES (:id, 'x')")
        if kind == "session":
            async with AsyncSession(engine) as session, session.begin():
                await session.execute(insert, {"id": order_id})
                job = await confirm.using(connection=session).aenqueue(order_id)
                if fail:
                    raise RuntimeError("the request failed")
        else:
            async with engine.begin() as connection:
                await connection.execute(insert, {"id": order_id})
                job = await confirm.using(connection=connection).aenqueue(order_id)
                if fail:
                    raise RuntimeError("the request failed")
        assert job.created and job.args == [order_id]

    async def each_driver() -> None:
        for number, driver in enumerate(ASYNC_DRIVERS[backend_name], start=1):
            url, connect_args = engine_options(shop.database_url, driver)
            engine = create_async_engine(url, connect_args=connect_args)
            try:
                with pytest.raises(RuntimeError):
                    await write(engine, 100 + number, fail=True)
                assert orders_and_jobs(shop) == (number - 1, number - 1), driver
                await write(engine, number, fail=False)
                assert orders_and_jobs(shop) == (number, number), driver
            finally:
                await engine.dispose()

    asyncio.run(each_driver())
    assert shop.run_until_empty().done == len(ASYNC_DRIVERS[backend_name])


@with_async_drivers
def test_an_idempotency_key_held_by_a_pending_job_returns_it_on_every_async_driver(shop, backend_name):
    confirm = shop.tasks["confirm"]
    first = confirm.using(idempotency_key="order:1").enqueue(1)

    async def again(driver: str):
        url, connect_args = engine_options(shop.database_url, driver)
        engine = create_async_engine(url, connect_args=connect_args)
        try:
            async with AsyncSession(engine) as session, session.begin():
                return await confirm.using(connection=session, idempotency_key="order:1").aenqueue(1)
        finally:
            await engine.dispose()

    for driver in ASYNC_DRIVERS[backend_name]:
        job = asyncio.run(again(driver))
        assert (job.id, job.created, job.args, job.status) == (first.id, False, [1], "pending"), driver


def test_a_session_not_in_a_transaction_is_refused(shop, engine):
    confirm = shop.tasks["confirm"]
    with Session(engine) as session:
        with pytest.raises(ConfigurationError, match=r"^connection= got a SQLAlchemy Session that is not in a "
                                                     r"transaction.*enqueue inside `with session.begin\(\):`"):
            confirm.using(connection=session).enqueue(1)
    with engine.connect() as connection:
        with pytest.raises(ConfigurationError, match="SQLAlchemy Connection that is not in a transaction"):
            confirm.using(connection=connection).enqueue(1)
    assert shop.count_jobs() == 0


@with_async_drivers  # half of it is about AsyncSessions
def test_wrong_kinds_of_sqlalchemy_objects_are_one_line_errors(shop, engine, backend_name):
    confirm = shop.tasks["confirm"]
    with pytest.raises(ConfigurationError, match=r"not an sqlalchemy\.Engine: with no transaction of yours"):
        confirm.using(connection=engine).enqueue(1)
    with Session(engine) as session, session.begin():
        with pytest.raises(ConfigurationError, match=r"^aenqueue\(\) got a sync SQLAlchemy Session"):
            asyncio.run(confirm.using(connection=session).aenqueue(1))

    async def async_session_to_sync_enqueue() -> None:
        url, connect_args = engine_options(shop.database_url, ASYNC_DRIVERS[backend_name][0])
        async_engine = create_async_engine(url, connect_args=connect_args)
        try:
            async with AsyncSession(async_engine) as session, session.begin():
                with pytest.raises(ConfigurationError, match=r"got a SQLAlchemy AsyncSession: enqueue with `await"):
                    confirm.using(connection=session).enqueue(1)
        finally:
            await async_engine.dispose()

    asyncio.run(async_session_to_sync_enqueue())
    with pytest.raises(ConfigurationError, match=r"^connection= needs a .*got builtins.str"):
        confirm.using(connection="postgresql://elsewhere").enqueue(1)
    assert shop.count_jobs() == 0


def test_the_core_never_imports_contrib():
    """Unwrapping a Session is the core's (leased.backends.sqlalchemy_sessions, imported when one is
    given): contrib builds on the core, never the other way round."""
    import ast

    package = SRC / "leased"
    reaching = []
    for path in sorted(package.rglob("*.py")):
        if "contrib" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            reaching += [f"{path.relative_to(package)}:{node.lineno} {name}" for name in names
                         if name.startswith("leased.contrib")]
    assert reaching == []
