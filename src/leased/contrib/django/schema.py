"""leased's schema, created by Django migrations with leased's own migration SQL.

Each Django migration applies leased's numbered migrations up to one version, on the migration's
connection and inside its transaction, and records them in leased_schema_version, as `leased
migrate` does: the two give the same schema, and whichever runs second has nothing left to do.
"""

from __future__ import annotations

from typing import Any, Callable

from leased.backends.sql import statements

# Dropping, for `manage.py migrate leased zero`: children first.
LEASED_TABLES = ("leased_schedule_ticks", "leased_schedules", "leased_starts", "leased_queue_limits",
                 "leased_throughput", "leased_queues", "leased_attempts", "leased_workers", "leased_jobs",
                 "leased_schema_version")


def apply_leased_migrations(up_to: int) -> Callable[[Any, Any], None]:
    """A RunPython function applying leased's migrations 1..up_to that are not applied yet."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        connection.ensure_connection()
        if connection.vendor == "sqlite":
            _sqlite(connection.connection, up_to)
        elif connection.vendor == "postgresql":
            _postgres(connection.connection, up_to)
        elif connection.vendor == "mysql":
            _mariadb(connection.connection, up_to)
        else:
            raise RuntimeError(f"leased supports SQLite, PostgreSQL and MariaDB, not {connection.vendor}")

    return forwards


def drop_leased_tables(apps: Any, schema_editor: Any) -> None:
    for table in LEASED_TABLES:
        schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(table)}")


def _sqlite(raw: Any, up_to: int) -> None:
    from leased.backends.sqlite.backend import MIGRATIONS, QUERIES, prepare_connection

    prepare_connection(raw)  # record_version takes the time from leased_now()
    cursor = raw.cursor()
    cursor.execute(QUERIES["create_version_table"])
    applied = {version for (version,) in cursor.execute(QUERIES["applied_versions"])}
    for migration in MIGRATIONS:
        if migration.version <= up_to and migration.version not in applied:
            for statement in statements(migration.sql):
                cursor.execute(statement)
            cursor.execute(QUERIES["record_version"], {"version": migration.version})


def _postgres(raw: Any, up_to: int) -> None:
    from psycopg.rows import tuple_row

    from leased.backends.postgres.backend import MIGRATIONS, QUERIES

    with raw.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(QUERIES["migration_lock"])  # as `leased migrate`: concurrent migrators queue here
        cursor.execute(QUERIES["create_version_table"])
        applied = {version for (version,) in cursor.execute(QUERIES["applied_versions"]).fetchall()}
        for migration in MIGRATIONS:
            if migration.version <= up_to and migration.version not in applied:
                cursor.execute(migration.sql)
                cursor.execute(QUERIES["record_version"], {"version": migration.version})


def _mariadb(raw: Any, up_to: int) -> None:
    from leased.backends.mariadb.backend import MIGRATIONS, QUERIES

    # DDL commits on its own here (Django runs this migration outside a transaction): as `leased
    # migrate`, concurrent migrators take turns under a named lock, and each version is recorded
    # once applied. One statement per call: the driver runs no more.
    with raw.cursor() as cursor:
        cursor.execute(QUERIES["migration_lock"])
        if not cursor.fetchone()[0]:
            raise RuntimeError("another migrator held leased's migration lock for 60 s")
        try:
            cursor.execute(QUERIES["create_version_table"])
            cursor.execute(QUERIES["applied_versions"])
            applied = {version for (version,) in cursor.fetchall()}
            for migration in MIGRATIONS:
                if migration.version <= up_to and migration.version not in applied:
                    for statement in statements(migration.sql):
                        cursor.execute(statement)
                    cursor.execute(QUERIES["record_version"], {"version": migration.version})
        finally:
            cursor.execute(QUERIES["migration_unlock"])
            cursor.fetchall()
