"""The pytest plugin (entry point pytest11 `leased`): a throwaway app per test, and the helpers of
leased.testing as fixtures.

`leased_database_url` is a temporary SQLite file, or, when LEASED_TEST_DATABASE_URL names a
PostgreSQL database, a fresh schema in it, dropped after the test.
"""

from __future__ import annotations

import os
import uuid
from typing import Callable, Iterator
from urllib.parse import quote

import pytest

from leased import Leased
from leased import testing


@pytest.fixture
def leased_database_url(tmp_path) -> Iterator[str]:
    url = os.environ.get("LEASED_TEST_DATABASE_URL")
    if not url or url.startswith("sqlite"):
        yield url or f"sqlite:///{tmp_path / 'leased.db'}"
        return
    import psycopg

    schema = f"leased_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


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
