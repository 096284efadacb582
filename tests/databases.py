"""Each database migrated once per test session (once per xdist worker), and a fresh copy per test.

Migrating from zero costs ~150 ms on PostgreSQL and ~270 ms on MariaDB (its DDL commits statement by
statement), several times that on a loaded machine, and most tests only want the schema in place.
So a test whose `app` migrates anyway gets a copy of a schema migrated once:

- SQLite: a migrated file, copied into the test's tmp_path.
- PostgreSQL: a pool of migrated schemas in the tests' database; MariaDB: a pool of migrated
  databases. After a test its slot is reset (the tables it wrote truncated, sequences and
  AUTO_INCREMENT back to where migrating left them) and handed to the next test. A test that changed
  the slot's structure (a column added, a trigger dropped, a table of its own) leaves a fingerprint
  that no longer matches: that slot is dropped, never reused, and the next test gets a new one.

Names start with `leased_test_` as the throwaway ones do (the fault tests' MariaDB user is granted
`leased\\_test\\_%`), with a random part, so that runs sharing the servers never meet; the pools are
dropped at the end of the session. Tests that migrate (or want no schema) still get an empty one.
"""

from __future__ import annotations

import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Protocol
from urllib.parse import quote, urlsplit, urlunsplit

from leased import Leased

# Written only by migrating: a copy keeps their rows, and a change to them spoils the slot.
SCHEMA_TABLES = ("leased_schema_version", "leased_schema_compatibility")


def throwaway_name() -> str:
    return f"leased_test_{uuid.uuid4().hex[:12]}"


def migrate(url: str) -> None:
    app = Leased(url)
    try:
        app.migrate()
    finally:
        app.close()


class Kind(Protocol):
    """How one server makes, resets and drops a migrated place for a test (a schema, a database)."""

    def create(self) -> tuple[str, str]:
        """A new migrated place: its name and its URL."""

    def fingerprint(self, url: str) -> str:
        """What the place's structure is (tables, columns, indexes, triggers, routines, migrations)."""

    def reset(self, url: str) -> None:
        """The rows a test wrote gone, counters back where migrating left them."""

    def drop(self, name: str) -> None: ...


@dataclass
class Slot:
    name: str
    url: str
    fingerprint: str


@dataclass
class Pool:
    """Migrated places of one kind, handed to one test at a time and reset between tests."""

    kind: Kind
    idle: list[Slot] = field(default_factory=list)
    made: list[str] = field(default_factory=list)

    @contextmanager
    def borrowed(self) -> Iterator[str]:
        slot = self.idle.pop() if self.idle else self._new_slot()
        yield slot.url
        try:
            self.kind.reset(slot.url)
            reusable = self.kind.fingerprint(slot.url) == slot.fingerprint
        except Exception:  # a session the test left holding a lock, a server the test restarted
            reusable = False
        if reusable:
            self.idle.append(slot)
        else:
            self._drop(slot.name)

    def _new_slot(self) -> Slot:
        name, url = self.kind.create()
        self.made.append(name)
        return Slot(name, url, self.kind.fingerprint(url))

    def _drop(self, name: str) -> None:
        self.made.remove(name)
        self.kind.drop(name)

    def close(self) -> None:
        self.idle.clear()
        for name in list(self.made):
            self._drop(name)


class PostgresSchemas:
    """Schemas in the tests' PostgreSQL database, reached through the URL's search_path (as the
    throwaway schemas are)."""

    FINGERPRINT = """
        SELECT md5(string_agg(item, ',' ORDER BY item)) FROM (
            SELECT c.relname::text || c.relkind::text || coalesce(c.relacl::text, '') || a.attname::text
                   || format_type(a.atttypid, a.atttypmod) || a.attnotnull::text AS item
              FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
             WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
            UNION ALL SELECT tgname::text || tgenabled::text || tgrelid::regclass::text FROM pg_trigger
             WHERE tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)
            UNION ALL SELECT proname::text || md5(prosrc) FROM pg_proc
             WHERE pronamespace = current_schema()::regnamespace
            UNION ALL SELECT conname::text || pg_get_constraintdef(oid) FROM pg_constraint
             WHERE connamespace = current_schema()::regnamespace
            UNION ALL SELECT 'version ' || version FROM leased_schema_version
            UNION ALL SELECT 'compatible ' || version || ' ' || oldest_code_version FROM leased_schema_compatibility
        ) AS structure"""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sequences: dict[str, str] = {}  # a slot's URL: the statement that puts its sequences back

    def create(self) -> tuple[str, str]:
        import psycopg

        name = throwaway_name()
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{name}"')
        url = f"{self.url}{'&' if '?' in self.url else '?'}options={quote(f'-csearch_path={name}')}"
        migrate(url)
        with psycopg.connect(url, autocommit=True) as connection:
            values = connection.execute(
                "SELECT format('setval(%L, %s, %s)', quote_ident(sequencename), "
                "coalesce(last_value, start_value), (last_value IS NOT NULL)::text) "
                "FROM pg_sequences WHERE schemaname = current_schema()").fetchall()
        self.sequences[url] = "SELECT " + ", ".join(value for (value,) in values) if values else ""
        return name, url

    def fingerprint(self, url: str) -> str:
        import psycopg

        with psycopg.connect(url, autocommit=True) as connection:
            return connection.execute(self.FINGERPRINT).fetchone()[0]

    def reset(self, url: str) -> None:
        import psycopg

        with psycopg.connect(url) as connection:
            # The slot is thrown away if the server dies: no need to wait for the WAL to reach the disk.
            connection.execute("SET lock_timeout = '10s'; SET synchronous_commit = off")
            tables = [name for (name,) in connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> ALL(%s)",
                (list(SCHEMA_TABLES),))]
            written = [name for (name,) in connection.execute(" UNION ALL ".join(
                f"SELECT '{table}' WHERE EXISTS (SELECT FROM \"{table}\")" for table in tables))] if tables else []
            if written:
                # No triggers: leased_jobs's TRUNCATE trigger would truncate leased_due again in the
                # same statement. TRUNCATE (not DELETE) leaves the tables as new: no dead rows, no
                # statistics, so the plan tests see what a fresh schema shows.
                connection.execute("SET LOCAL session_replication_role = replica")
                connection.execute(f"TRUNCATE {', '.join(f'{chr(34)}{name}{chr(34)}' for name in written)} CASCADE")
            if self.sequences.get(url):
                connection.execute(self.sequences[url])

    def drop(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute("SET lock_timeout = '30s'")
            connection.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


class MariaDBDatabases:
    """Databases of their own on the tests' MariaDB server."""

    FINGERPRINT = """
        SELECT md5(group_concat(item ORDER BY item SEPARATOR ',')) FROM (
            SELECT concat_ws(':', table_name, column_name, column_type, is_nullable, column_default,
                             generation_expression) AS item
              FROM information_schema.columns WHERE table_schema = DATABASE()
            UNION ALL SELECT concat_ws(':', table_name, index_name, seq_in_index, column_name, non_unique)
              FROM information_schema.statistics WHERE table_schema = DATABASE()
            UNION ALL SELECT concat_ws(':', trigger_name, md5(action_statement))
              FROM information_schema.triggers WHERE trigger_schema = DATABASE()
            UNION ALL SELECT concat_ws(':', routine_name, md5(routine_definition))
              FROM information_schema.routines WHERE routine_schema = DATABASE()
            UNION ALL SELECT concat('version ', version) FROM leased_schema_version
            UNION ALL SELECT concat_ws(' ', 'compatible', version, oldest_code_version) FROM leased_schema_compatibility
        ) AS structure"""

    def __init__(self, url: str) -> None:
        self.url = url

    def _connect(self, url: str):
        from leased.backends.mariadb.backend import connect_arguments
        from leased.backends.mariadb.driver import DRIVER

        arguments, _ = connect_arguments(url)
        connection = DRIVER.connect(**arguments)
        connection.autocommit(True)
        return connection

    def create(self) -> tuple[str, str]:
        name = throwaway_name()
        connection = self._connect(self.url)
        try:
            connection.cursor().execute(f"CREATE DATABASE `{name}`")
        finally:
            connection.close()
        url = urlunsplit(urlsplit(self.url)._replace(path=f"/{name}"))
        migrate(url)
        return name, url

    def fingerprint(self, url: str) -> str:
        connection = self._connect(url)
        try:
            cursor = connection.cursor()
            cursor.execute(self.FINGERPRINT)
            return cursor.fetchone()[0]
        finally:
            connection.close()

    def reset(self, url: str) -> None:
        connection = self._connect(url)
        try:
            cursor = connection.cursor()
            _end_other_sessions(cursor)  # a session left in a transaction would hold TRUNCATE for ever
            cursor.execute("SELECT table_name, auto_increment FROM information_schema.tables"
                           " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'")
            tables = {name: counter for name, counter in cursor.fetchall() if name not in SCHEMA_TABLES}
            cursor.execute(" UNION ALL ".join(
                f"SELECT '{table}' FROM DUAL WHERE EXISTS (SELECT 1 FROM `{table}`)" for table in tables))
            written = {name for (name,) in cursor.fetchall()}
            written |= {name for name, counter in tables.items() if counter is not None and counter > 1}
            cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in sorted(written):
                # TRUNCATE, not DELETE: AUTO_INCREMENT back to 1 and the statistics of a new table.
                cursor.execute(f"TRUNCATE TABLE `{table}`")
        finally:
            connection.close()

    def drop(self, name: str) -> None:
        connection = self._connect(urlunsplit(urlsplit(self.url)._replace(path=f"/{name}")))
        try:
            cursor = connection.cursor()
            _end_other_sessions(cursor)
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            connection.close()


def _end_other_sessions(cursor) -> None:
    cursor.execute("SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()")
    for (session,) in cursor.fetchall():
        try:
            cursor.execute(f"KILL CONNECTION {int(session)}")
        except Exception:  # it ended meanwhile
            pass


class SQLiteFile:
    """A migrated SQLite file, made on first use and copied for each test."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "migrated.db"
        self.made = False

    @contextmanager
    def borrowed(self, tmp_path: Path) -> Iterator[str]:
        if not self.made:
            migrate(f"sqlite:///{self.path}")
            self.made = True
        copy = tmp_path / "jobs.db"
        shutil.copyfile(self.path, copy)
        yield f"sqlite:///{copy}"

    def close(self) -> None:
        pass


class MigratedDatabases:
    """The session's migrated databases: `borrowed(backend_name, tmp_path)` is a fresh copy's URL."""

    def __init__(self, directory: Path, postgres_url: str, mariadb_url: str) -> None:
        self.sqlite = SQLiteFile(directory)
        self.pools = {"postgres": Pool(PostgresSchemas(postgres_url)), "mariadb": Pool(MariaDBDatabases(mariadb_url))}

    def borrowed(self, backend_name: str, tmp_path: Path):
        if backend_name == "sqlite":
            return self.sqlite.borrowed(tmp_path)
        return self.pools[backend_name].borrowed()

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()

