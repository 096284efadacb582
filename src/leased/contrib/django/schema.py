"""leased's schema, created by Django migrations with leased's own migration runner.

Each Django migration applies leased's numbered migrations up to one version, on the migration's
connection and inside its transaction (MariaDB commits DDL on its own: there Django runs it outside
one), and records them in leased_schema_version, as `leased migrate` does: the runner is the same
(leased.backends.sql.migrate), the two give the same schema, and whichever runs second has nothing
left to do.
"""

from __future__ import annotations

from typing import Any, Callable

from leased.backends import dialect_named, migrator

# Dropping, for `manage.py migrate leased zero`: children first.
LEASED_TABLES = ("leased_fair_keys", "leased_fairness_weights", "leased_fairness_defaults", "leased_due",
                 "leased_durable_steps", "leased_dependencies", "leased_steps", "leased_workflows",
                 "leased_schedule_ticks", "leased_schedules", "leased_starts", "leased_queue_limits", "leased_throughput",
                 "leased_queues", "leased_attempts", "leased_workers", "leased_jobs", "leased_schema_compatibility",
                 "leased_schema_version")


def apply_leased_migrations(up_to: int) -> Callable[[Any, Any], None]:
    """A RunPython function applying leased's migrations 1..up_to that are not applied yet."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        connection.ensure_connection()
        migrator(connection.vendor).apply(connection.connection, up_to)

    return forwards


def drop_leased_tables(apps: Any, schema_editor: Any) -> None:
    for table in LEASED_TABLES:
        schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(table)}")
    dialect = dialect_named(schema_editor.connection.vendor)
    for statement in dialect.drop_after_tables if dialect is not None else ():
        schema_editor.execute(statement)
