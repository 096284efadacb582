"""A database password is never shown: not by repr(), not in an error about its URL, not by the CLI.

Terminals are recorded, logs are shipped, error reports pasted into tickets; a URL is shown with
its password as ***, for every kind of URL leased takes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import postgres_schema
from leased import Leased
from leased.backends import connect
from leased.errors import ConfigurationError
from paths import SRC

SECRET = "s3cret"


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://ada:s3cret@db.example:5432/shop", "postgresql://ada:***@db.example:5432/shop"),
    ("mariadb://ada:s3cret@db.example/shop", "mariadb://ada:***@db.example/shop"),
    ("mysql://ada:s3cret@db.example/shop", "mysql://ada:***@db.example/shop"),
    ("sqlite:///var/jobs.db", "sqlite:///var/jobs.db"),  # nothing to hide: shown as given
])
def test_repr_of_the_app_hides_the_password(url, shown):
    assert repr(Leased(url)) == f"Leased({shown!r})"


@pytest.mark.parametrize("url", [
    "postgresql://ada:s3cret@db.example/shop", "mariadb://ada:s3cret@db.example/shop",
])
def test_repr_of_the_backend_hides_the_password(url):
    backend = connect(url)  # connects only at first use
    assert SECRET not in repr(backend) and "db.example" in repr(backend)


@pytest.mark.parametrize("url", [
    "oracle://ada:s3cret@db.example/shop",  # an unknown scheme
    "ada:s3cret@db.example/shop",  # no scheme at all
    "mariadb://ada:s3cret@db.example",  # no database named
    "postgresql://ada:pa%zz-s3cret@db.example/shop",  # a password libpq cannot decode
    "postgresql://ada:s3cret@[db.example/shop",  # a broken address
    "mariadb://ada:s3cret@db.example:port/shop",  # a port that is not a number: a ValueError traceback
    "mariadb://ada:s3cret@db.example:99999/shop",  # a port out of range
])
def test_an_error_about_a_url_hides_its_password(url):
    with pytest.raises(ConfigurationError) as raised:
        connect(url)
    message = str(raised.value)
    assert SECRET not in message and "ada" in message, message


def test_an_error_about_a_sqlite_url_still_shows_it():
    with pytest.raises(ConfigurationError, match="'sqlite:///:memory:'"):
        Leased("sqlite:///:memory:")


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://ada@db.example/shop", "postgresql://ada@db.example/shop"),
    ("postgresql://ada:@db.example/shop", "postgresql://ada:***@db.example/shop"),
    ("postgresql://ada:s%40cret@db.example/shop", "postgresql://ada:***@db.example/shop"),
    ("postgresql://db.example/shop?user=ada&password=s3cret&sslmode=require",
     "postgresql://db.example/shop?user=ada&password=***&sslmode=require"),
    ("postgresql://ada:s3cret@pgbouncer/shop?listen_url=postgresql://ada:s3cret@db.example/shop",
     "postgresql://ada:***@pgbouncer/shop?listen_url=postgresql://ada:***@db.example/shop"),
    # Unescaped reserved characters make the URL malformed, and an error shows it: still hidden.
    ("mariadb://ada:s3/c?r@t@db.example/shop", "mariadb://ada:***@db.example/shop"),
    ("ada:s3cret@db.example/shop", "ada:***@db.example/shop"),
    ("sqlite:////var/jobs.db", "sqlite:////var/jobs.db"),
])
def test_redacted_hides_every_password_in_a_url(url, shown):
    from leased.backends.urls import redacted

    assert redacted(url) == shown


def run_cli(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "LEASED_DATABASE_URL"}
    env["PYTHONPATH"] = str(SRC)
    return subprocess.run([sys.executable, "-m", "leased.cli.main", *arguments], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_command_line_hides_a_password_in_a_bad_url(tmp_path):
    result = run_cli("stats", "--database", "oracle://ada:s3cret@db.example/shop", cwd=tmp_path)
    assert result.returncode == 1 and "oracle://ada:***@db.example/shop" in result.stderr
    assert SECRET not in result.stdout + result.stderr


# PostgreSQL's trust authentication takes any password; SQLite has none, and MariaDB's root would refuse one.
@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
def test_demo_on_a_database_with_a_password_hides_it(tmp_path, backend_name):
    with postgres_schema() as url:
        with_password = url.replace("://postgres@", f"://postgres:{SECRET}@", 1)
        assert with_password != url
        result = run_cli("demo", "--database", with_password, "--jobs", "4", "--seed", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert SECRET not in result.stdout + result.stderr
    assert "postgres:***@" in result.stdout and "LEASED_DATABASE_URL" in result.stdout


@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
def test_why_names_the_database_without_its_password(tmp_path, backend_name):
    with postgres_schema() as url:
        app = Leased(url)
        try:
            app.task(name="boom", max_attempts=1)(lambda: 1 / 0)
            job = app.get_task("boom").enqueue()
            app.run_until_empty()
            with_password = url.replace("://postgres@", f"://postgres:{SECRET}@", 1)
            result = run_cli("why", "--database", with_password, str(job.id), cwd=tmp_path)
        finally:
            app.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert SECRET not in result.stdout and "leased retry --database" in result.stdout


def test_a_relative_sqlite_path_is_named_absolute(tmp_path, monkeypatch):
    """`sqlite:///shop.db` names another file from another directory: start lines and errors say
    which file, whole, so a worker started in the wrong place shows it."""
    monkeypatch.chdir(tmp_path)
    app = Leased("sqlite:///shop.db")
    assert app.backend.where == f"SQLite database '{tmp_path / 'shop.db'}'"
    app.close()
