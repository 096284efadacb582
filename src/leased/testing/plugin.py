"""The pytest plugin (entry point pytest11 `leased`): a throwaway app per test, and the helpers of
leased.testing as fixtures.

`leased_database_url` is a throwaway database per test on the database that
LEASED_TEST_DATABASE_URL (or the `leased_database_url` ini option) names: on PostgreSQL a fresh
schema in it, on MariaDB a fresh database on its server, each dropped after the test; without
either, a temporary SQLite file (a sqlite:// URL is used as it is).
"""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from leased import Leased
from leased import testing
from leased.backends import parse_database_url

URL_VARIABLE = "LEASED_TEST_DATABASE_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("leased_database_url",
                  f"the database leased_app's throwaway databases are made in (${URL_VARIABLE} wins): a "
                  "postgresql:// URL (a schema per test) or a mariadb:// URL (a database per test); default: "
                  "a temporary SQLite file per test")


@pytest.fixture
def leased_database_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    url = os.environ.get(URL_VARIABLE) or request.config.getini("leased_database_url")
    if not url:
        yield f"sqlite:///{tmp_path / 'leased.db'}"
        return
    # A bad URL is refused here, naming the URL and the schemes.
    capabilities = parse_database_url(url).dialect.capabilities
    if capabilities.file_database:  # the file is the test's own already
        yield url
    elif capabilities.schemas_in_url:  # a schema of its own in the database the URL names
        with postgres_schema(url) as schema_url:
            yield schema_url
    else:  # a database of its own on the server
        with mariadb_database(url) as database_url:
            yield database_url


def _throwaway_name() -> str:
    return f"leased_test_{uuid.uuid4().hex[:12]}"


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    """A URL whose search_path is a schema of its own in the PostgreSQL database at `url`, dropped afterwards."""
    import psycopg

    schema = _throwaway_name()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def mariadb_database(url: str) -> Iterator[str]:
    """A URL of a database of its own on the MariaDB server at `url`, dropped afterwards."""
    from leased.backends.mariadb.backend import connect_arguments
    from leased.backends.mariadb.driver import DRIVER

    name = _throwaway_name()
    arguments, _ = connect_arguments(url)
    connection = DRIVER.connect(**arguments)
    try:
        connection.cursor().execute(f"CREATE DATABASE `{name}`")
    finally:
        connection.close()
    parts = urlsplit(url)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        connection = DRIVER.connect(**arguments)  # of its own: the test may have restarted the server
        try:
            cursor = connection.cursor()
            # A session left in a transaction (a failed test's connection, a killed worker's not yet
            # noticed by the server) holds a metadata lock that DROP DATABASE would wait on for
            # ever: end the sessions still in the throwaway database first.
            cursor.execute("SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
                           (name,))
            for (session,) in cursor.fetchall():
                try:
                    cursor.execute(f"KILL CONNECTION {int(session)}")
                except DRIVER.module.Error:  # it ended meanwhile
                    pass
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            connection.close()


@pytest.fixture
def leased_app(leased_database_url) -> Iterator[Leased]:
    """A Leased app of its own on the throwaway database; register tasks on it in the test."""
    app = Leased(leased_database_url)
    yield app
    app.close()


@pytest.fixture
def run_jobs() -> Callable[..., testing.RunSummary]:
    return testing.run_jobs


@pytest.fixture
def assert_enqueued() -> Callable[..., object]:
    return testing.assert_enqueued


@pytest.fixture
def assert_not_enqueued() -> Callable[..., None]:
    return testing.assert_not_enqueued


@pytest.fixture
def enqueued() -> Callable[..., list]:
    return testing.enqueued


@pytest.fixture
def advance() -> Callable[..., None]:
    return testing.advance
