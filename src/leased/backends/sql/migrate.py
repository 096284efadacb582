"""The one migration runner: every way leased's schema is made goes through it.

- a backend's migrate() (`leased migrate`, and `Leased()` on first use), on a connection of its own;
- Django's migrations (leased.contrib.django), on Django's connection, each up to one version;
- `leased migrate --sql` (migration_sql()), which prints the same statements as one script, for
  Alembic (leased.contrib.alembic runs it) and other migration tools.

Each applies the numbered migrations not yet recorded in leased_schema_version, every one of them
(a branch merged late fills a gap), in order, and records each once applied with the statement the
printed script has; so whichever runs second finds nothing left to do. Concurrent migrators take
turns under the dialect's migration lock: the second reads what the first recorded.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from leased.backends.sql.scripts import BODY_END, Migration, statements


def _no_lock(connection: Any) -> AbstractContextManager[None]:
    return nullcontext()


@dataclass(frozen=True)
class Migrator:
    """A dialect's schema, and what the runner needs to apply it (each dialect's MIGRATOR)."""

    migrations: Sequence[Migration]
    create_version_table: str  # CREATE TABLE IF NOT EXISTS leased_schema_version
    applied_versions: str  # SELECT version FROM leased_schema_version
    now_sql: str  # the database's now, written out: what a migration is recorded as applied at
    # One statement (or, with whole_scripts, a script) on a connection; its rows as tuples.
    run: Callable[[Any, str], list[tuple]]
    # Held on the connection while the runner reads and applies versions: no two migrators at once.
    # None needed where the transaction the connection is in already excludes the others (SQLite's).
    lock: Callable[[Any], AbstractContextManager[None]] = _no_lock
    whole_scripts: bool = False  # the driver runs a migration's script in one call (PostgreSQL)
    # The printed script wraps each trigger with a body between DELIMITER lines: the mysql client
    # cuts a script at every ';', a body's included (MariaDB).
    delimits_bodies: bool = False

    def apply(self, connection: Any, up_to: int | None = None) -> list[int]:
        """Apply the migrations up to version `up_to` (all: None) that are not recorded yet, on
        `connection`, in the transaction it has open if it has one (ours, or Django's migration's;
        MariaDB commits DDL on its own, so there each version is recorded as soon as applied).
        Returns the versions applied."""
        with self.lock(connection):
            self.run(connection, self.create_version_table)
            done = {version for (version,) in self.run(connection, self.applied_versions)}
            applied = []
            for migration in self.migrations:
                if migration.version not in done and (up_to is None or migration.version <= up_to):
                    for statement in [migration.sql] if self.whole_scripts else statements(migration.sql):
                        self.run(connection, statement)
                    self.run(connection, self._record(migration))
                    applied.append(migration.version)
        return applied

    def script(self) -> str:
        """Every migration, and the statement recording it, as one script (`leased migrate --sql`)."""
        parts = [self.create_version_table + ";"]
        for migration in self.migrations:
            sql = migration.sql.strip()
            if self.delimits_bodies and BODY_END in sql:
                sql = "\n".join(f"DELIMITER //\n{statement}//\nDELIMITER ;" if statement.endswith(BODY_END)
                                else f"{statement};" for statement in statements(sql))
            parts.append(f"-- {migration.version:04d}_{migration.name}\n{sql}")
            parts.append(self._record(migration) + ";")
        return "\n\n".join(parts) + "\n"

    def _record(self, migration: Migration) -> str:
        return f"INSERT INTO leased_schema_version (version, applied_at) VALUES ({migration.version}, {self.now_sql})"
