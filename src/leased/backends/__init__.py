"""Storage backends, chosen by the database URL. Each lives in its own package with its SQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlsplit

from leased.backends.ports import Backend
from leased.backends.urls import redacted
from leased.errors import ConfigurationError

if TYPE_CHECKING:
    from leased.backends.sql.migrate import Migrator

URL_HELP = "use sqlite:///path/to/jobs.db, postgresql://user@host/dbname or mariadb://user@host/dbname"
SCHEMES = {"sqlite": "sqlite", "postgresql": "postgres", "postgres": "postgres", "mariadb": "mariadb",
           "mysql": "mariadb"}


class DatabaseUrl(NamedTuple):
    kind: str  # "sqlite", "postgres" or "mariadb"
    url: str
    sqlite_path: str | None = None


def parse_database_url(url: object) -> DatabaseUrl:
    """Which backend a URL names, without connecting: a mistake is refused where it was written
    (Leased(...)), not at the first enqueue."""
    if not isinstance(url, str):
        raise ConfigurationError(f"invalid database URL: a {type(url).__name__}, not a string; {URL_HELP}")
    if "://" not in url:
        raise ConfigurationError(f"invalid database URL {redacted(url)!r}: {URL_HELP}")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as error:  # an unclosed [ of an IPv6 address
        raise ConfigurationError(f"invalid database URL {redacted(url)!r} ({error}): {URL_HELP}") from None
    kind = SCHEMES.get(scheme)
    if kind is None:
        raise ConfigurationError(f"unsupported database URL scheme {scheme!r} in {redacted(url)!r}: {URL_HELP}")
    if kind != "sqlite":
        return DatabaseUrl(kind, url)
    path = url[len("sqlite://"):]
    if path.startswith("/"):
        path = path[1:]  # sqlite:///jobs.db is relative, sqlite:////var/jobs.db absolute
    if not path or path == ":memory:":
        raise ConfigurationError(
            f"invalid database URL {redacted(url)!r}: SQLite needs a file that every worker and thread can open "
            "(e.g. sqlite:///jobs.db, or a temporary file in tests)")
    return DatabaseUrl(kind, url, path)


def connect(url: str) -> Backend:
    """Open the backend a database URL names. Imports a driver only when its backend is used."""
    parsed = parse_database_url(url)
    if parsed.kind == "sqlite":
        from leased.backends.sqlite import SQLiteBackend

        return SQLiteBackend(parsed.sqlite_path)
    if parsed.kind == "postgres":
        try:
            from leased.backends.postgres import PostgresBackend
        except ImportError as error:
            raise ConfigurationError(
                f"PostgreSQL needs psycopg: pip install 'leased[postgres]' ({error})") from None
        return PostgresBackend(url)
    if parsed.kind == "mariadb":
        try:
            from leased.backends.mariadb import MariaDBBackend
        except ImportError as error:  # no driver: the error says which to install
            raise ConfigurationError(f"cannot use MariaDB: {error}") from None
        return MariaDBBackend(url)
    raise AssertionError(f"no backend for {parsed.kind!r}")


def migrator(kind: str) -> Migrator:
    """The migration runner of a kind of database ("sqlite", "postgres" or "mariadb"; or a URL
    scheme, or Django's vendor name, such as "postgresql" and "mysql"), to apply leased's schema on
    a connection of the caller's, as Django's migrations do. Imports that backend's driver."""
    backend = SCHEMES.get(kind, kind)
    if backend == "sqlite":
        from leased.backends.sqlite.backend import MIGRATOR
    elif backend == "postgres":
        from leased.backends.postgres.backend import MIGRATOR
    elif backend == "mariadb":
        from leased.backends.mariadb.backend import MIGRATOR
    else:
        raise ConfigurationError(f"leased supports SQLite, PostgreSQL and MariaDB, not {kind}")
    return MIGRATOR
