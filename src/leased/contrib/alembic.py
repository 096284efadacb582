"""leased's schema from an Alembic migration: run the SQL `leased migrate APP --sql` printed.

    # alembic/versions/0007_leased_jobs.py, next to leased_schema.sql from `leased migrate myapp:app --sql`
    from pathlib import Path
    from leased.contrib.alembic import run_leased_sql

    def upgrade() -> None:
        run_leased_sql(Path(__file__).with_name("leased_schema.sql").read_text())

It runs inside Alembic's transaction, online and in offline mode (`alembic upgrade head --sql`
prints it). The script records each version in leased_schema_version, so `Leased()` then finds its
schema current and migrates nothing.
"""

from __future__ import annotations

from leased.backends import dialect_named
from leased.backends.sql.scripts import statements


def run_leased_sql(script: str) -> None:
    """Execute `leased migrate --sql` output in the current Alembic migration."""
    from alembic import op
    from sqlalchemy import text

    # A driver that runs whole scripts takes it as it is, in one call; the others one statement at a time.
    dialect = dialect_named(op.get_context().dialect.name)
    batches = [script] if dialect is not None and dialect.capabilities.runs_whole_scripts else statements(script)
    for statement in batches:
        # Colons escaped: text() would read ":name" as a bind parameter (and "::" casts stay as they are).
        op.execute(text(statement.replace(":", r"\:")))
