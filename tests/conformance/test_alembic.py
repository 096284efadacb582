"""`leased migrate --sql` run from an Alembic migration builds the schema `leased migrate` builds,
and leaves nothing for Leased to migrate afterwards. A real Alembic environment, run by its command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from schemas import empty_database, leased_schema

from leased import Leased

ENV = '''
from alembic import context
from sqlalchemy import create_engine

url = context.config.get_main_option("sqlalchemy.url")
if context.is_offline_mode():
    context.configure(url=url, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, transactional_ddl=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
'''

REVISION = '''
from pathlib import Path

from leased.contrib.alembic import run_leased_sql

revision = "0001_leased"
down_revision = None


def upgrade() -> None:
    run_leased_sql(Path(__file__).with_name("leased_schema.sql").read_text())
'''


def alembic(project: Path, url: str, *args: str) -> str:
    (project / "alembic.ini").write_text(f"[alembic]\nscript_location = {project / 'migrations'}\n"
                                         f"sqlalchemy.url = {_sqlalchemy_url(url).replace('%', '%%')}\n")
    versions = project / "migrations" / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    (project / "migrations" / "env.py").write_text(ENV)
    (project / "migrations" / "script.py.mako").write_text("")
    (versions / "0001_leased.py").write_text(REVISION)
    printed = subprocess.run([sys.executable, "-m", "leased.cli.main", "migrate", "--database", url, "--sql"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    (versions / "leased_schema.sql").write_text(printed)
    run = subprocess.run([sys.executable, "-m", "alembic", "-c", str(project / "alembic.ini"), *args],
                         capture_output=True, text=True, timeout=120, cwd=project)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _sqlalchemy_url(url: str) -> str:
    """The same database as SQLAlchemy names it, with the driver `leased[mariadb]` installs."""
    for leased_scheme, sqlalchemy_scheme in (("postgresql://", "postgresql+psycopg://"),
                                             ("mariadb://", "mysql+pymysql://")):
        if url.startswith(leased_scheme):
            return sqlalchemy_scheme + url[len(leased_scheme):]
    return url


def test_an_alembic_migration_builds_the_schema_that_leased_migrate_builds(backend_name, tmp_path):
    with (empty_database(backend_name, tmp_path, "migrated.db") as migrated,
          empty_database(backend_name, tmp_path, "through_alembic.db") as through_alembic):
        Leased(migrated, migrate=False).migrate()
        alembic(tmp_path, through_alembic, "upgrade", "head")
        schema = leased_schema(migrated)
        assert schema and leased_schema(through_alembic) == schema
        app = Leased(through_alembic, migrate=False)
        try:
            assert app.migrate() == []  # the script recorded every version
        finally:
            app.close()


def test_offline_mode_prints_the_schema(tmp_path):
    printed = alembic(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", "upgrade", "head", "--sql")
    assert "CREATE TABLE leased_jobs" in printed and "INSERT INTO leased_schema_version" in printed
    assert not (tmp_path / "jobs.db").exists()
