"""Every behavioural test runs once per backend, against a real database.

SQLite gets a fresh file per test; PostgreSQL a fresh schema per test in $LEASED_TEST_POSTGRES_URL
(default postgresql://postgres@127.0.0.1:5432/test), whose database is created (through the
server's `postgres` database) if it does not exist yet. Without a reachable PostgreSQL the
PostgreSQL half is skipped, unless LEASED_REQUIRE_POSTGRES=1 (CI sets it) makes that an error.
MariaDB likewise: a fresh database per test on $LEASED_TEST_MARIADB_URL (default
mariadb://root@127.0.0.1:3306/test), skipped if unreachable unless LEASED_REQUIRE_MARIADB=1.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

import connections
import databases
from paths import LAYERS, PROGRAMS, SRC, TESTS, pythonpath
from run_alone import RunAlone
from leased import Leased
from leased.backends import DIALECTS, parse_database_url
from leased.backends.capabilities import Capabilities
from leased.engine.worker import Worker

# Property tests draw the same examples on every run, so that the suite is deterministic (a red run
# is a bug to fix, never a draw to retry), and a loaded machine that draws slowly is not a failure.
# HYPOTHESIS_PROFILE=explore draws new examples each run, to look for what the fixed ones miss.
settings.register_profile("suite", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

POSTGRES_URL = os.environ.get("LEASED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_POSTGRES = os.environ.get("LEASED_REQUIRE_POSTGRES") == "1"
MARIADB_URL = os.environ.get("LEASED_TEST_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test")
REQUIRE_MARIADB = os.environ.get("LEASED_REQUIRE_MARIADB") == "1"
BACKENDS = list(DIALECTS)

# Subprocesses (the CLI, crash and README tests) import leased from this tree, as this process does:
# a relative PYTHONPATH=src would not hold in their working directories, and they would quietly
# import whatever leased is installed.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])

# The test programs (tests/programs) are imported by the tests too, as the producer's view of the
# tasks a worker process runs; a test may import another layer's test module for its helpers
# (test_timeouts reads test_readme's section_code). pytest puts a test's own folder on sys.path only
# once it collects a file there, so a file run alone would not find them: all are put there at once.
sys.path[:0] = [folder for folder in map(str, (PROGRAMS, *(TESTS / layer for layer in LAYERS)))
                if folder not in sys.path]

# xdist's workers start with COLUMNS=80 and LINES=24 that the run's own environment did not set: the
# CLI would then fit its tables to 80 columns, cutting what the tests read. As without xdist, unset.
if os.environ.get("PYTEST_XDIST_WORKER") and (os.environ.get("COLUMNS"), os.environ.get("LINES")) == ("80", "24"):
    del os.environ["COLUMNS"], os.environ["LINES"]


def _postgres_problem() -> str | None:
    try:
        import psycopg

        try:
            with psycopg.connect(POSTGRES_URL, connect_timeout=3):
                return None
        except psycopg.OperationalError as error:
            if "does not exist" not in str(error):
                raise
        _create_database_if_missing(POSTGRES_URL)
        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except Exception as error:  # missing driver or unreachable server
        return f"PostgreSQL not available at {POSTGRES_URL}: {error}"


def _create_database_if_missing(url: str) -> None:
    """A fresh server has no `test` database: make it, through the `postgres` one, so that the
    README's test command works on a new machine without a createdb step."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = conninfo_to_dict(url).get("dbname")
    if not name or name == "postgres":
        return
    with psycopg.connect(make_conninfo(url, dbname="postgres"), connect_timeout=3, autocommit=True) as connection:
        if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            try:
                connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.DuplicateDatabase:  # another test run made it meanwhile
                pass


_POSTGRES_PROBLEM = _postgres_problem()

# The suite makes and drops a schema or a database for most PostgreSQL tests. On a server with
# autovacuum off (the CI machine's is) their catalog rows stay dead run after run, and every new
# session reads past them: about 300,000 dead rows in pg_attribute after a day of runs here.
CHURNED_CATALOGS = ("pg_attribute", "pg_depend", "pg_class", "pg_index", "pg_type", "pg_constraint",
                    "pg_attrdef", "pg_trigger", "pg_proc", "pg_namespace", "pg_statistic")


def _vacuum_catalogs(url: str) -> None:
    import psycopg

    with psycopg.connect(url, connect_timeout=3, autocommit=True) as connection:
        if connection.execute("SHOW autovacuum").fetchone()[0] == "off":
            connection.execute("VACUUM " + ", ".join(f"pg_catalog.{name}" for name in CHURNED_CATALOGS))


def pytest_sessionstart(session) -> None:
    if _POSTGRES_PROBLEM is None:
        _vacuum_catalogs(POSTGRES_URL)


def pytest_configure(config) -> None:
    """leased's pytest plugin, as users get it through the pytest11 entry point (this checkout
    may run without being installed, and then the entry point is not there)."""
    import leased.testing.plugin as plugin

    if not config.pluginmanager.is_registered(plugin) and not config.pluginmanager.has_plugin("leased"):
        config.pluginmanager.register(plugin, "leased")


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A URL whose search_path is a schema of its own, dropped afterwards (as the plugin's fixture makes one)."""
    from leased.testing.plugin import postgres_schema as throwaway_schema

    with throwaway_schema(POSTGRES_URL) as url:
        yield url


def _mariadb_connection(url: str = MARIADB_URL):
    from leased.backends.mariadb.backend import connect_arguments
    from leased.backends.mariadb.driver import DRIVER

    arguments, _ = connect_arguments(url)
    return DRIVER.connect(**{**arguments, "connect_timeout": 3})


def _mariadb_problem() -> str | None:
    try:
        _mariadb_connection().close()
        return None
    except Exception as error:  # missing driver or unreachable server
        return f"MariaDB not available at {MARIADB_URL}: {error}"


_MARIADB_PROBLEM = _mariadb_problem()


@contextmanager
def mariadb_database() -> Iterator[str]:
    """A URL of a database of its own on the MariaDB server, dropped afterwards (as the plugin's fixture makes one)."""
    from leased.testing.plugin import mariadb_database as throwaway_database

    with throwaway_database(MARIADB_URL) as url:
        yield url


# MariaDB shows no application name: the workers of the fault tests connect as a user of their own,
# with every right on the tests' databases, and are found by it.
MARIADB_WORKER_USER = "leased_crash_worker"


def mariadb_user_url(url: str, user: str) -> str:
    """The URL as `user` (without a password), made once on the server with the tests' rights."""
    connection = _mariadb_connection()
    try:
        cursor = connection.cursor()
        cursor.execute(f"CREATE USER IF NOT EXISTS '{user}'@'%'")
        cursor.execute(f"GRANT ALL ON `leased\\_test\\_%`.* TO '{user}'@'%'")
    finally:
        connection.close()
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}@{rest.split('@', 1)[-1]}"


def kill_mariadb_sessions(url: str, user: str) -> int:
    """KILL CONNECTION every session of `user` on the URL's database: how many there were."""
    database = url.rsplit("/", 1)[-1].split("?")[0]
    connection = _mariadb_connection()
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT id FROM information_schema.processlist WHERE user = %s AND db = %s", (user, database))
        killed = 0
        for (session,) in cursor.fetchall():
            try:
                cursor.execute(f"KILL CONNECTION {int(session)}")
                killed += 1
            except Exception:  # it ended meanwhile
                pass
        return killed
    finally:
        connection.close()


def kill_worker_sessions(app: Leased) -> int:
    """The server ends the worker processes' sessions (worker_processes'), as a DBA's kill or a
    failover does: how many."""
    if connections.is_mariadb(app.database_url):
        return kill_mariadb_sessions(app.database_url, MARIADB_WORKER_USER)
    import psycopg

    with psycopg.connect(app.database_url, autocommit=True) as connection:
        return connection.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'leased-crash-worker' AND pid <> pg_backend_pid()").fetchone()[0]


_PROBLEMS = {"postgres": (_POSTGRES_PROBLEM, REQUIRE_POSTGRES), "mariadb": (_MARIADB_PROBLEM, REQUIRE_MARIADB)}


@pytest.fixture(params=BACKENDS)
def backend_name(request) -> str:
    problem, required = _PROBLEMS.get(request.param, (None, False))
    if problem:
        if required:
            pytest.fail(problem)
        pytest.skip(problem)
    return request.param


def _run_alone(config) -> RunAlone | None:
    """The lock between this run's xdist workers (tests/run_alone.py), in the temporary root they
    share (each worker's basetemp is a folder of it); None without xdist."""
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None
    return RunAlone(Path(config.option.basetemp).parent)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked `alone` runs while no other test does; the others run beside each other. Taken
    around the whole protocol, outside pytest-timeout's clock: a wait for a long test that runs
    alone is not this test's time."""
    lock = _run_alone(item.config)
    if lock is None:
        yield
        return
    with lock.exclusive() if item.get_closest_marker("alone") else lock.shared():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Captured output and logs as text that xdist can send to its controller: a test may log a lone
    surrogate (tests/unit/test_logs.py does, on purpose), which execnet cannot encode, and the worker's
    report would crash the whole run."""
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, _sendable(text)) for title, text in report.sections]


def _sendable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.fixture(scope="session")
def migrated_databases(tmp_path_factory) -> Iterator[databases.MigratedDatabases]:
    migrated = databases.MigratedDatabases(tmp_path_factory.mktemp("migrated"), POSTGRES_URL, MARIADB_URL)
    yield migrated
    migrated.close()


@pytest.fixture
def capabilities(backend_name) -> Capabilities:
    """What the test's database can do: a test asks this (or @pytest.mark.needs), never its name."""
    return DIALECTS[backend_name].capabilities


_CAPABILITIES = {field.name for field in dataclasses.fields(Capabilities)}


def pytest_collection_modifyitems(config, items) -> None:
    """@pytest.mark.needs("listen_notify", ...): the test runs on the databases that can, and is
    not collected for the others (a test that does not apply is not a skip)."""
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("needs")
        backend = item.callspec.params.get("backend_name") if hasattr(item, "callspec") else None
        if marker is not None:
            unknown = set(marker.args) - _CAPABILITIES
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: no capability {', '.join(sorted(unknown))} "
                                        "(see leased/backends/capabilities.py)")
        if marker is not None and backend is not None and not all(
                getattr(DIALECTS[backend].capabilities, name) for name in marker.args):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def database_url(backend_name, tmp_path, request) -> Iterator[str]:
    """The one fixture a backend adds to run the whole behavioural suite: a fresh database URL.

    With the `app` fixture, whose first use would migrate it, the database comes migrated (a copy of
    one migrated once per session: tests/databases.py); otherwise it is empty, for the tests of
    migrating and of a missing schema."""
    if "app" in request.fixturenames:
        with request.getfixturevalue("migrated_databases").borrowed(backend_name, tmp_path) as url:
            yield url
    elif backend_name == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
    elif backend_name == "mariadb":
        with mariadb_database() as url:
            yield url
    else:
        with postgres_schema() as url:
            yield url


@pytest.fixture
def app(database_url) -> Iterator[Leased]:
    application = Leased(database_url)
    yield application
    application.close()


def wait_for(condition: Callable[[], object], timeout: float = 30.0, message: str = "condition",
             interval: float = 0.01) -> object:
    """Poll a condition until it holds; the timeout only bounds a failing test."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@contextmanager
def running_worker(app: Leased, worker: Worker | None = None, **options) -> Iterator:
    """A worker (app.worker(**options) unless given) on a background thread, stopped (gracefully,
    unless the test stopped it) and joined on exit."""
    options.setdefault("poll_interval", 0.05)
    worker = worker or app.worker(**options)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="test-worker")
    thread.start()
    wait_for(lambda: worker.running or failure or not thread.is_alive(), message="worker start")
    try:
        yield worker
    finally:
        if not worker.stopping:
            worker.stop()
        thread.join(timeout=60)
        assert not thread.is_alive(), "worker did not stop"
        if failure:
            raise failure[0]


def callers_connection(app: Leased, autocommit: bool = False):
    """A connection of the caller's own to the app's database, of its driver's kind (sqlite3, psycopg,
    the MariaDB driver): what a user hands to `task.using(connection=...)`, or an operator's SQL shell."""
    return connections.connect(app.database_url, autocommit)


def raw_rows(app: Leased, statement: str, params: tuple = ()) -> list[tuple]:
    """Rows read (or changed) behind leased's back, as an operator's SQL shell would; `?` placeholders."""
    connection = callers_connection(app, autocommit=True)
    try:
        return connections.execute(connection, statement, params)
    finally:
        connection.close()


def raw_sql(app: Leased, statement: str) -> None:
    """Change rows behind leased's back, as another program (or a person with a SQL shell) would."""
    raw_rows(app, statement)


def raw_scalar(app: Leased, query: str) -> object:
    """One value read behind leased's back, as an operator's SQL shell would."""
    return raw_rows(app, query)[0][0]


def _epoch_times(app: Leased) -> bool:
    """Whether the app's database holds times as epoch seconds, not a timestamp type of its own."""
    return not parse_database_url(app.database_url).dialect.capabilities.typed_times_and_json


def seconds_before(app: Leased, column: str, seconds: float) -> str:
    """SQL for a time column moved some seconds back, as the app's database holds times."""
    return f"{column} - {seconds}" if _epoch_times(app) else f"{column} - interval '{seconds} seconds'"


def time_literal(app: Leased, when: datetime) -> str:
    """A time as a SQL literal for the app's database."""
    return f"{when.timestamp()}" if _epoch_times(app) else f"'{when.isoformat()}'"


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def needs_faketime() -> None:
    """Skip the test without libfaketime, unless LEASED_REQUIRE_FAKETIME=1 (CI sets it) fails it."""
    if not os.path.exists(LIBFAKETIME):
        if os.environ.get("LEASED_REQUIRE_FAKETIME") == "1":
            pytest.fail("faketime is not installed")
        pytest.skip("needs libfaketime (apt-get install faketime)")


def faketime_env(clock: str) -> dict[str, str]:
    """A worker process's clock moved (`+1h`) by libfaketime, preloaded into the worker itself so that
    signals reach it; its monotonic clock untouched, as a skewed host's is."""
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": clock, "DONT_FAKE_MONOTONIC": "1"}


@pytest.fixture
def worker_processes(database_url, tmp_path):
    """start(script, worker_id, *args, clock=None, **env): a worker process running tests/programs/<script>
    (this checkout's leased, logging to tmp_path/<worker_id>.log); all are killed afterwards."""
    processes = []

    def start(script: str, worker_id: str, *arguments: str, clock: str | None = None,
              **extra_env: str) -> subprocess.Popen:
        log = open(tmp_path / f"{worker_id}.log", "w")
        # The application name (PostgreSQL) or user (MariaDB) lets the fault tests find the workers' sessions.
        if connections.is_mariadb(database_url):
            worker_url = mariadb_user_url(database_url, MARIADB_WORKER_USER)
        else:
            worker_url = f"{database_url}&application_name=leased-crash-worker" if "?" in database_url else database_url
        env = {**os.environ, "LEASED_DATABASE_URL": worker_url, "CRASH_MARKERS": str(tmp_path),
               # This checkout's leased, not whichever one the virtualenv has installed.
               "PYTHONPATH": pythonpath(), **extra_env}
        if clock:
            env.update(faketime_env(clock))
        process = subprocess.Popen([sys.executable, str(PROGRAMS / script), worker_id, *arguments], env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a SIGSTOPped one too
            process.kill()
        process.wait()
