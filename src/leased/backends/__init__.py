"""Storage backends, chosen by the database URL. Each lives in its own package with its SQL.

DIALECTS is the one table of the databases leased supports: their URL schemes, drivers, extras,
Django vendor names and capabilities. connect(), migrator(), parse_database_url(), the Django
integration, the pytest plugin and the test matrix all read it; adding a database adds a row.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple
from urllib.parse import urlsplit

from leased.backends import capabilities
from leased.backends.capabilities import Capabilities
from leased.backends.ports import Backend
from leased.backends.urls import redacted
from leased.errors import ASYNC_TRANSACTIONS_NOT_ON_MARIADB, ConfigurationError

if TYPE_CHECKING:
    from leased.backends.sql.migrate import Migrator


class DatabaseUrl(NamedTuple):
    kind: str  # a name in DIALECTS: "sqlite", "postgres" or "mariadb"
    url: str
    sqlite_path: str | None = None  # the file, where the database is one (Capabilities.file_database)

    @property
    def dialect(self) -> DatabaseKind:
        return DIALECTS[self.kind]


def _open_sqlite(url: DatabaseUrl) -> Backend:
    from leased.backends.sqlite import SQLiteBackend

    return SQLiteBackend(url.sqlite_path)


def _open_postgres(url: DatabaseUrl) -> Backend:
    from leased.backends.postgres import PostgresBackend

    return PostgresBackend(url.url)


def _open_mariadb(url: DatabaseUrl) -> Backend:
    from leased.backends.mariadb import MariaDBBackend

    return MariaDBBackend(url.url)


def _sqlite_migrator() -> Migrator:
    from leased.backends.sqlite.backend import MIGRATOR

    return MIGRATOR


def _postgres_migrator() -> Migrator:
    from leased.backends.postgres.backend import MIGRATOR

    return MIGRATOR


def _mariadb_migrator() -> Migrator:
    from leased.backends.mariadb.backend import MIGRATOR

    return MIGRATOR


@dataclass(frozen=True, slots=True)
class DatabaseKind:
    """One database leased supports, and everything outside its package needs to know of it."""

    name: str  # DatabaseUrl.kind, and the test matrix's backend_name
    title: str  # as people name it, in messages
    schemes: tuple[str, ...]  # URL schemes that name it; the first is the one leased writes
    driver: str  # the module its backend imports, only when the backend is used
    extra: str  # pip install 'leased[<extra>]' installs the driver ("": Python has it)
    django_vendor: str  # Django's connection.vendor for it
    capabilities: Capabilities
    open: Callable[[DatabaseUrl], Backend]  # imports the backend's package (and its driver)
    load_migrator: Callable[[], Migrator]
    # An async transactional handler's connection comes from this module, where not from `driver`
    # (aiosqlite over sqlite3), installed by this extra.
    async_driver: str | None = None
    async_extra: str | None = None
    # What its migrations make besides tables, dropped after them when a framework unapplies the
    # schema (Django's first migration, reversed).
    drop_after_tables: tuple[str, ...] = ()

    def driver_missing(self, error: ImportError) -> ConfigurationError:
        if "pip install" in str(error):  # the backend's own error says what to install (MariaDB's two drivers)
            return ConfigurationError(f"cannot use {self.title}: {error}")
        return ConfigurationError(f"{self.title} needs {self.driver}: pip install 'leased[{self.extra}]' ({error})")

    def check_async_transactions(self) -> None:
        """At an async transactional task's declaration: this database can run one, and the driver
        it will need is there (found, not imported)."""
        if not self.capabilities.async_transactions:
            raise ConfigurationError(ASYNC_TRANSACTIONS_NOT_ON_MARIADB)
        if self.async_driver is not None and importlib.util.find_spec(self.async_driver) is None:
            raise ConfigurationError(
                f"an async transactional handler on {self.title} writes through an {self.async_driver} connection: "
                f"pip install {self.async_driver} (or 'leased[{self.async_extra}]'), or define the handler with def")


DIALECTS: dict[str, DatabaseKind] = {kind.name: kind for kind in (
    DatabaseKind(name="sqlite", title="SQLite", schemes=("sqlite",), driver="sqlite3", extra="",  # in Python
                 django_vendor="sqlite", capabilities=capabilities.SQLITE, open=_open_sqlite,
                 load_migrator=_sqlite_migrator, async_driver="aiosqlite", async_extra="aiosqlite"),
    DatabaseKind(name="postgres", title="PostgreSQL", schemes=("postgresql", "postgres"), driver="psycopg",
                 extra="postgres", django_vendor="postgresql", capabilities=capabilities.POSTGRES,
                 open=_open_postgres, load_migrator=_postgres_migrator, drop_after_tables=(
                     # made by migrations 0018, 0020 and 0021
                     "DROP SEQUENCE IF EXISTS leased_due_current, leased_reclaim_turn_at",
                     "DROP FUNCTION IF EXISTS leased_due_generation_for, leased_due_inserted, leased_due_changed, "
                     "leased_rotate_due, leased_reclaim_turn, leased_due_truncated, leased_mend_due, "
                     "leased_due_generation_holds_a_job, leased_truncate_drained_due, leased_refused_row")),
    # The driver is PyMySQL, or mysqlclient (MySQLdb) where installed: backends/mariadb/driver.py.
    DatabaseKind(name="mariadb", title="MariaDB", schemes=("mariadb", "mysql"), driver="pymysql",
                 extra="mariadb", django_vendor="mysql", capabilities=capabilities.MARIADB, open=_open_mariadb,
                 load_migrator=_mariadb_migrator),
)}
SCHEMES = {scheme: kind.name for kind in DIALECTS.values() for scheme in kind.schemes}
_URL_EXAMPLES = [f"{kind.schemes[0]}://{'/path/to/jobs.db' if kind.capabilities.file_database else 'user@host/dbname'}"
                 for kind in DIALECTS.values()]
URL_HELP = f"use {', '.join(_URL_EXAMPLES[:-1])} or {_URL_EXAMPLES[-1]}"


def dialect_named(name: str) -> DatabaseKind | None:
    """The database a name means: its name in DIALECTS, a URL scheme, or Django's vendor name."""
    if name in DIALECTS:
        return DIALECTS[name]
    if name in SCHEMES:
        return DIALECTS[SCHEMES[name]]
    return next((kind for kind in DIALECTS.values() if kind.django_vendor == name), None)


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
    if not DIALECTS[kind].capabilities.file_database:
        return DatabaseUrl(kind, url)
    path = url[len(f"{scheme}://"):]
    if path.startswith("/"):
        path = path[1:]  # sqlite:///jobs.db is relative, sqlite:////var/jobs.db absolute
    if not path or path == ":memory:":
        raise ConfigurationError(
            f"invalid database URL {redacted(url)!r}: {DIALECTS[kind].title} needs a file that every worker and "
            "thread can open (e.g. sqlite:///jobs.db, or a temporary file in tests)")
    return DatabaseUrl(kind, url, path)


def connect(url: str) -> Backend:
    """Open the backend a database URL names. Imports a driver only when its backend is used."""
    parsed = parse_database_url(url)
    try:
        return parsed.dialect.open(parsed)
    except ImportError as error:  # no driver: the error says which to install
        raise parsed.dialect.driver_missing(error) from None


def migrator(kind: str) -> Migrator:
    """The migration runner of a kind of database ("sqlite", "postgres" or "mariadb"; or a URL
    scheme, or Django's vendor name, such as "postgresql" and "mysql"), to apply leased's schema on
    a connection of the caller's, as Django's migrations do. Imports that backend's driver."""
    dialect = dialect_named(kind)
    if dialect is None:
        supported = ", ".join(kind.title for kind in DIALECTS.values())
        raise ConfigurationError(f"leased supports {supported}, not {kind}")
    return dialect.load_migrator()
