"""Migrations and the SQL files: concurrent migrators, printed SQL equal to applied SQL, no missing query."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from leased import Leased
from schemas import apply_script, empty_database, leased_schema
from leased.backends import DIALECTS as DIALECT_ROWS, connect
from leased.backends.sql import scripts
from paths import SRC

BACKENDS_DIR = SRC / "leased" / "backends"
EVERY_VERSION = [int(path.name[:4]) for path in sorted((BACKENDS_DIR / "sqlite" / "migrations").glob("[0-9]*.sql"))]


def test_migrate_is_idempotent(database_url):
    app = Leased(database_url, migrate=False)
    assert app.migrate() == EVERY_VERSION
    assert app.migrate() == []
    app.close()


def test_concurrent_migrators_all_succeed_with_one_schema(database_url):
    script = "import sys; from leased import Leased; print(Leased(sys.argv[1], migrate=False).migrate())"
    processes = [subprocess.Popen([sys.executable, "-c", script, database_url], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [process.communicate(timeout=60) for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, outputs
    # Each version in a transaction of its own: the migrators may share the work, never repeat it.
    applied = [version for out, _ in outputs for version in ast.literal_eval(out.strip())]
    assert sorted(applied) == EVERY_VERSION


def test_printed_sql_builds_the_schema_that_migrate_builds(backend_name, tmp_path):
    with (empty_database(backend_name, tmp_path, "migrated.db") as migrated,
          empty_database(backend_name, tmp_path, "printed.db") as printed):
        Leased(migrated, migrate=False).migrate()
        apply_script(printed, Leased(printed, migrate=False).migration_sql())
        schema = leased_schema(migrated)
        assert schema and leased_schema(printed) == schema
        assert Leased(printed, migrate=False).migrate() == []  # the versions were recorded too


DIALECTS = sorted(path.parent.name for path in BACKENDS_DIR.glob("*/queries.sql"))


# A query's name in double quotes, or in single ones where ast.unparse wrote the shared code out.
_QUERY_USES = (r'QUERIES\[["\'](\w+)["\']\]', r'\b_?(?:run|rows|read_rows|read|fetch_one|one|all)\(\s*["\'](\w+)["\']',
               r'\b_?(?:execute|all)\(\w+, ["\'](\w+)["\']')


def _query_names(code: str) -> set[str]:
    return {name for pattern in _QUERY_USES for name in re.findall(pattern, code)}


def _shared_code_for(capabilities: object) -> str:
    """The shared parts' code (backends/sql/) as this dialect runs it: every part serves every
    dialect, but for a branch on a capability (`if not ....capabilities.update_returning:`) the
    dialect's own declaration decides, and the branch it never takes is left out."""
    code = []
    for path in sorted((BACKENDS_DIR / "sql").glob("*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.If):
                test, negated = (node.test.operand, True) if isinstance(node.test, ast.UnaryOp) \
                    and isinstance(node.test.op, ast.Not) else (node.test, False)
                if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Attribute) \
                        and test.value.attr == "capabilities":
                    taken = getattr(capabilities, test.attr) != negated
                    node.body, node.orelse = (node.body, node.orelse) if taken else (node.orelse, [ast.Pass()])
                    node.test = ast.Constant(True)
        code.append(ast.unparse(tree))
    return "".join(code)


@pytest.mark.parametrize("backend", DIALECTS)
def test_every_query_used_is_defined_and_every_query_defined_is_used(backend):
    folder = BACKENDS_DIR / backend
    defined = set(scripts.load_queries(folder / "queries.sql"))
    own = "".join(path.read_text() for path in folder.glob("*.py"))
    code = own + _shared_code_for(DIALECT_ROWS[backend].capabilities)
    used = _query_names(code)
    assert used - defined == set(), "queries used but not defined"
    mentioned = set(re.findall(r'["\'](\w+)["\']', code))
    assert defined - mentioned == set(), "queries defined but never used"


def test_migrations_are_numbered_once_each_from_one(tmp_path):
    for name in ["0001_a.sql", "0001_b.sql"]:
        (tmp_path / name).write_text("SELECT 1;")
    with pytest.raises(ValueError, match="each once"):
        scripts.load_migrations(tmp_path)


def test_a_migration_merged_later_into_a_gap_is_still_applied(database_url):
    """Branches reserve numbers ahead (0006 while 0003-0005 are elsewhere); whichever merges last,
    a database migrated before it still gets its migration."""
    from leased.backends.sql.scripts import Migration

    app = Leased(database_url, migrate=False)
    dialect_class = type(connect(database_url).dialect)  # the class: the migrations are its
    migrator = dialect_class.migrator
    migrations = migrator.migrations
    last = migrations[-1].version
    early = Migration(last + 2, "merged_early", "CREATE TABLE leased_merged_early (id integer);")
    late = Migration(last + 1, "merged_late", "CREATE TABLE leased_merged_late (id integer);")
    try:
        dialect_class.migrator = replace(migrator, migrations=[*migrations, early])
        assert app.migrate() == [m.version for m in migrations] + [early.version]
        dialect_class.migrator = replace(migrator, migrations=[*migrations, late, early])
        assert app.migrate() == [late.version]
        assert app.migrate() == []
    finally:
        dialect_class.migrator = migrator
        app.close()


def test_the_runner_migrates_a_callers_connection_up_to_a_version_and_leaves_the_rest(database_url):
    """What Django's migrations do: the one runner (leased.backends.sql.migrate) on a connection of the
    caller's, in its transaction, up to one version; `leased migrate` then applies only the rest."""
    from connections import connect as callers_connect
    from leased.backends import migrator, parse_database_url

    runner = migrator(parse_database_url(database_url).kind)
    first_two = [version for version in EVERY_VERSION if version <= 2]
    connection = callers_connect(database_url)  # in a transaction until its commit
    try:
        assert runner.apply(connection, up_to=2) == first_two
        assert runner.apply(connection, up_to=2) == []
        connection.commit()
    finally:
        connection.close()
    app = Leased(database_url, migrate=False)
    try:
        assert app.migrate() == [version for version in EVERY_VERSION if version > 2]
        assert app.migrate() == []
    finally:
        app.close()


def test_the_upgrade_to_counted_finishes_carries_over_what_was_counted(database_url):
    """0011: what the pruner had rolled up and the finished jobs still in the table become the
    per-minute counts the readers use from then on; cancelled and unfinished jobs are not counted."""
    from conftest import raw_sql, time_literal

    app = Leased(database_url, migrate=False)
    dialect_class = type(connect(database_url).dialect)  # the class: the migrations are its
    migrator = dialect_class.migrator
    try:
        dialect_class.migrator = replace(migrator, migrations=[m for m in migrator.migrations if m.version < 11])
        app.migrate()
    finally:
        dialect_class.migrator = migrator
    minute = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=5)
    at = time_literal(app, minute + timedelta(seconds=30))
    for status, finished in (("done", at), ("done", at), ("failed", at), ("cancelled", at), ("pending", "NULL")):
        raw_sql(app, "INSERT INTO leased_jobs (task_name, queue_name, status, args, kwargs, attempt, max_attempts, "
                     f"lease_seconds, run_after, created_at, finished_at) VALUES ('t', 'q', '{status}', '[]', '{{}}', "
                     f"1, 3, 30, {at}, {at}, {finished})")
    raw_sql(app, "INSERT INTO leased_throughput (minute, queue_name, task_name, done, failed) "
                 f"VALUES ({time_literal(app, minute)}, 'q', 't', 5, 1)")
    try:
        assert app.migrate() == [version for version in EVERY_VERSION if version >= 11]
        assert [(row.minute, row.queue_name, row.task_name, row.done, row.failed)
                for row in app.throughput(timedelta(hours=1))] == [(minute, "q", "t", 7, 2)]
        assert app.overview().queues[0].done_recently == 7
    finally:
        app.close()


# A database without leased's schema (migrate=False, or a DBA who has not migrated yet), with the
# schema older than the code, or newer: every entry point says so in one line, and what to run.
MISSING = r"leased's schema is missing from .*: run `leased migrate APP` \(or app.migrate\(\) in your code\)"


def test_without_the_schema_the_first_use_says_to_migrate(database_url, capabilities):
    from leased import SchemaNotReady

    app = Leased(database_url, migrate=False)
    expected = (r"SQLite database '.*' does not exist .*run `leased migrate APP`" if capabilities.file_database
                else MISSING)
    for first_use in (app.counts, lambda: app.get_job(1), lambda: app.task(name="t")(lambda: None).enqueue()):
        with pytest.raises(SchemaNotReady, match=expected):
            first_use()
    if capabilities.file_database:  # opening it would have created an empty file where the path (a typo?) points
        assert not Path(database_url[len("sqlite:///"):]).exists()
    assert app.migrate() == EVERY_VERSION  # what the message says to do; then the same app works
    assert app.counts() == {}
    app.close()


@pytest.mark.needs("schemas_in_url")
def test_on_postgres_a_search_path_without_the_schema_is_named(backend_name, database_url):
    from leased import SchemaNotReady

    elsewhere = database_url.replace("search_path%3D", "search_path%3Dnowhere_") \
        .replace("search_path=", "search_path=nowhere_")
    assert elsewhere != database_url
    app = Leased(elsewhere, migrate=False)
    try:
        with pytest.raises(SchemaNotReady, match=r"leased's schema is missing from PostgreSQL database '.*' on .* "
                                                 r"with search_path 'nowhere_\w+': run `leased migrate APP`"):
            app.counts()
    finally:
        app.close()


def test_a_schema_dropped_under_a_running_app_is_not_an_outage_to_wait_out(app):
    from conftest import raw_sql
    from leased import SchemaNotReady

    app.counts()
    raw_sql(app, "DROP TABLE leased_throughput")  # e.g. a DBA's cleanup, or a restore of an older dump
    with pytest.raises(SchemaNotReady, match=MISSING):
        app.throughput(timedelta(minutes=5))


def test_a_schema_older_than_the_code_says_to_migrate(database_url):
    from conftest import raw_sql
    from leased import SchemaNotReady

    Leased(database_url).migrate()
    app = Leased(database_url, migrate=False)
    raw_sql(app, f"DELETE FROM leased_schema_version WHERE version = {EVERY_VERSION[-1]}")
    with pytest.raises(SchemaNotReady, match=rf"older than this leased \(version {EVERY_VERSION[-1]} not applied\): "
                                             r"run `leased migrate APP`"):
        app.counts()
    app.close()


def test_a_schema_newer_than_the_code_is_refused_with_or_without_migrate(database_url):
    from conftest import raw_sql
    from leased import SchemaNotReady

    Leased(database_url).migrate()
    raw_sql(Leased(database_url, migrate=False),
            f"INSERT INTO leased_schema_version (version, applied_at) VALUES (9999, {_now_literal(database_url)})")
    for app in (Leased(database_url), Leased(database_url, migrate=False)):
        with pytest.raises(SchemaNotReady, match=r"newer than this leased \(it has version 9999, this leased knows up "
                                                 rf"to {EVERY_VERSION[-1]}, and version 9999 needs newer code\): "
                                                 "upgrade leased"):
            app.counts()
        with pytest.raises(SchemaNotReady, match="newer than this leased"):
            app.migrate()
        app.close()


def test_a_newer_schema_runs_older_code_where_its_versions_say_it_may(database_url):
    """A rolling deploy: the database migrated by the next release, this release's processes
    restarted on it. A version saying code of this release runs on it (migration 0022's table) is
    run on, migrate applying nothing; one saying it needs newer code is refused, named."""
    from leased import SchemaNotReady
    from leased.backends.sql.scripts import Migration

    current = EVERY_VERSION[-1]
    additive = Migration(current + 1, "additive", "CREATE TABLE leased_additive (id integer);\n"
                         "INSERT INTO leased_schema_compatibility (version, oldest_code_version) "
                         f"VALUES ({current + 1}, {current});")
    breaking = Migration(current + 2, "breaking", "CREATE TABLE leased_breaking (id integer);\n"
                         "INSERT INTO leased_schema_compatibility (version, oldest_code_version) "
                         f"VALUES ({current + 2}, {current + 2});")
    dialect_class = type(connect(database_url).dialect)
    migrator = dialect_class.migrator
    try:
        dialect_class.migrator = replace(migrator, migrations=[*migrator.migrations, additive])
        Leased(database_url).migrate()  # the next release migrates
    finally:
        dialect_class.migrator = migrator
    older = Leased(database_url)  # this release, restarted: it runs, and has nothing to apply
    assert older.migrate() == [] and older.counts() is not None
    try:
        dialect_class.migrator = replace(migrator, migrations=[*migrator.migrations, additive, breaking])
        Leased(database_url).migrate()  # the release after that
    finally:
        dialect_class.migrator = migrator
    with pytest.raises(SchemaNotReady, match=rf"version {current + 2} needs newer code"):
        older.backend.check_schema()  # what a process of this release checks when it starts
    older.close()
    restarted = Leased(database_url, migrate=False)
    with pytest.raises(SchemaNotReady, match=rf"version {current + 2} needs newer code"):
        restarted.counts()
    restarted.close()


def test_every_migration_from_0022_says_which_older_code_runs_on_it():
    for backend in ("sqlite", "postgres", "mariadb"):
        for migration in scripts.load_migrations(BACKENDS_DIR / backend / "migrations"):
            if migration.version >= 22:
                assert re.search(r"INSERT INTO leased_schema_compatibility \(version, oldest_code_version\) "
                                 rf"VALUES \({migration.version}, \d+\)", migration.sql), (backend, migration.name)


def _now_literal(url: str) -> str:
    return "unixepoch()" if url.startswith("sqlite") else "now()"


def test_a_script_splits_into_statements_where_each_ends():
    script = ("-- leading comment\nCREATE TABLE a (x text DEFAULT 'a;b');\n\n-- between\nCREATE TRIGGER t AFTER "
              "INSERT ON a BEGIN\n  UPDATE a SET x = 'c;';\n  DELETE FROM a;\nEND;\n-- trailing comment\n")
    assert scripts.statements(script) == [
        "-- leading comment\nCREATE TABLE a (x text DEFAULT 'a;b')",
        "-- between\nCREATE TRIGGER t AFTER INSERT ON a BEGIN\n  UPDATE a SET x = 'c;';\n  DELETE FROM a;\nEND"]
