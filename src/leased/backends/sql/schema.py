"""The schema, one part over a database (database.py): whether this code runs on it, and the
numbered migrations applied through the one runner (migrate.py), each version in a transaction of
its own on the dialect's migration connection. The migrations are the dialect's (`migrator`).
"""

from __future__ import annotations

import time
from typing import Any

from leased.backends.sql.database import Database
from leased.backends.sql.scripts import schema_problem
from leased.errors import DatabaseConflict, SchemaNotReady

# How long `leased migrate` (and a first use) keeps trying a version whose locks another session holds.
MIGRATION_PATIENCE_SECONDS = 120.0


class Schema:
    def __init__(self, database: Database):
        self._database = database
        self._dialect = database.dialect

    def applied_versions(self) -> set[int]:
        """The versions recorded as applied, read without a lock (none before the first migration)."""
        try:
            return {row["version"] for row in self._database.rows("applied_versions")}
        except Exception as error:
            if isinstance(error, SchemaNotReady) or self._database.is_missing_table(error):
                return set()
            raise

    def _schema_compatibility(self, applied: set[int]) -> dict[int, int]:
        """{version: oldest code version that runs on it} (migration 0022), read only for a schema
        with versions this code does not know: a current one costs no round trip."""
        if not applied - {migration.version for migration in self._dialect.migrator.migrations}:
            return {}
        try:
            return {row["version"]: row["oldest_code_version"] for row in self._database.rows("schema_compatibility")}
        except Exception as error:
            if isinstance(error, SchemaNotReady) or self._database.is_missing_table(error):  # a branch's before 0022
                return {}
            raise

    def _schema_problem(self, applied: set[int]) -> str | None:
        if not applied:  # no version table where the database looks: the dialect says where that was
            return schema_problem(applied, self._dialect.migrator.migrations, self._dialect.where_schema_is_missing())
        return schema_problem(applied, self._dialect.migrator.migrations, self._database.where,
                              self._schema_compatibility(applied))

    def check_schema(self, callers_connection: Any = None) -> None:
        """Raises SchemaNotReady unless this code runs on the schema: exactly its own, or a newer one
        whose versions say older code runs on them (no lock taken)."""
        problem = self._schema_problem(self.applied_versions())
        if problem:
            raise SchemaNotReady(problem)

    def migrate(self, callers_connection: Any = None) -> list[int]:
        """Apply what is missing. Finding the schema current takes no lock; a newer one is refused
        unless this code runs on it (see check_schema), and then nothing is applied."""
        migrations = self._dialect.migrator.migrations
        applied = self.applied_versions()
        if applied - {migration.version for migration in migrations}:
            problem = self._schema_problem(applied)
            if problem:
                raise SchemaNotReady(problem)
        done: list[int] = []
        for migration in migrations:
            if migration.version not in applied:
                done += self._apply_up_to(migration.version)
        return done

    def _apply_up_to(self, version: int) -> list[int]:
        """One version in a transaction of its own: a version's locks are held only while it runs,
        and one version never upgrades a lock another took (0018's CREATE TRIGGER, then 0019's DROP
        INDEX, in one transaction deadlocked with running workers). A dialect that bounds its lock
        waits (PostgreSQL's lock_timeout) gives way to the workers queued behind it and tries again,
        for MIGRATION_PATIENCE_SECONDS at most."""
        deadline = time.monotonic() + MIGRATION_PATIENCE_SECONDS
        tries = 0
        outside = any(m.version == version and m.outside_transaction for m in self._dialect.migrator.migrations)
        while True:
            try:
                with self._dialect.migration_connection(outside) as connection:
                    return self._dialect.migrator.apply(connection, up_to=version, outside_transaction=outside)
            except DatabaseConflict as error:
                tries += 1
                if time.monotonic() >= deadline:
                    raise DatabaseConflict(
                        f"migration {version} could not take the locks it needs in {MIGRATION_PATIENCE_SECONDS:.0f} s "
                        f"({tries} tries; the last: {error}): a long transaction holds leased's tables? `leased why` "
                        "on a pending job, or pg_stat_activity, names it") from error
                time.sleep(min(0.1 * tries, 1.0))  # room for the claims and enqueues that queued behind it

    def migration_sql(self) -> str:
        return self._dialect.migrator.script()
