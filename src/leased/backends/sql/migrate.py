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

from leased.backends.sql.scripts import Migration, statements
from leased.errors import ConfigurationError


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
    # Held instead of `lock` while migrations that run outside a transaction apply: each of their
    # statements commits on its own, and a transaction's lock would end with the first.
    session_lock: Callable[[Any], AbstractContextManager[None]] = _no_lock

    def apply(self, connection: Any, up_to: int | None = None, outside_transaction: bool = False) -> list[int]:
        """Apply the migrations up to version `up_to` (all: None) that are not recorded yet, on
        `connection`, in the transaction it has open if it has one (ours, or Django's migration's;
        MariaDB commits DDL on its own, so there each version is recorded as soon as applied).
        Returns the versions applied.

        A migration that runs outside a transaction (scripts.OUTSIDE_A_TRANSACTION) is applied only
        when the caller says `connection` is in none (`outside_transaction`), and then only such
        migrations are: where the other kind comes next, apply stops and returns what it applied,
        for the caller to go on on a connection of that kind (a backend's migrate() applies one
        version at a time); where it comes first, it is refused, naming the version."""
        with (self.session_lock if outside_transaction else self.lock)(connection):
            self.run(connection, self.create_version_table)
            done = {version for (version,) in self.run(connection, self.applied_versions)}
            applied: list[int] = []
            for migration in self.migrations:
                if migration.version in done or (up_to is not None and migration.version > up_to):
                    continue
                if migration.outside_transaction != outside_transaction:
                    if applied:
                        break
                    raise ConfigurationError(_other_kind(migration))
                whole = self.whole_scripts and not migration.outside_transaction
                for statement in [migration.sql] if whole else statements(migration.sql):
                    self.run(connection, statement)
                self.run(connection, self._record(migration))
                applied.append(migration.version)
        return applied

    def script(self) -> str:
        """Every migration, and the statement recording it, as one script (`leased migrate --sql`)."""
        parts = [self.create_version_table + ";"]
        for migration in self.migrations:
            parts.append(f"-- {migration.version:04d}_{migration.name}\n{migration.sql.strip()}")
            parts.append(self._record(migration) + ";")
        return "\n\n".join(parts) + "\n"

    def _record(self, migration: Migration) -> str:
        return f"INSERT INTO leased_schema_version (version, applied_at) VALUES ({migration.version}, {self.now_sql})"


def _other_kind(migration: Migration) -> str:
    named = f"migration {migration.version:04d} ({migration.name})"
    if migration.outside_transaction:
        return (f"{named} runs outside a transaction (PostgreSQL builds an index without blocking writes only so, "
                "CREATE INDEX CONCURRENTLY), and this connection is in one: apply it on a connection of its own, "
                "as `leased migrate APP` does (in Django, the migration that applies it has atomic = False)")
    return (f"{named} runs in a transaction, and this connection is in none: apply it in one, "
            "as `leased migrate APP` does")
