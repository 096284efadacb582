"""What every adapter and workload shares: settings, worker processes, counting, statistics."""

from __future__ import annotations

import os
import signal
import socket
import threading
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / "work"  # per-run scratch: SQLite files, worker logs (gitignored)

PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
PG_ADMIN_URL = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/postgres"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379


def leased_commit() -> str:
    """The checkout being measured, as `git describe` names it (-dirty with uncommitted changes)."""
    try:
        return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def pg_url(database: str) -> str:
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


def recreate_database(name: str) -> str:
    """A fresh, empty PostgreSQL database for one library's run; returns its URL."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return pg_url(name)


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _Stopped(BaseException):
    """SIGTERM during autovacuum_on's block: unwinds it like Ctrl-C, so the setting is put back."""


@contextmanager
def autovacuum_on(log: Callable[[str], None] = print) -> Iterator[None]:
    """The shared PostgreSQL server with autovacuum on for the block, as every production server
    runs: the test machine's conf.d/90-ci.conf turns it off. ALTER SYSTEM writes
    postgresql.auto.conf, which the server reads after every other file, so it overrides conf.d;
    SHOW in a fresh session checks that it did. On the way out (an exception, Ctrl-C, SIGTERM) the
    setting is put back as it was: RESET when postgresql.auto.conf did not set it before, its old
    value there otherwise. Harmless to others using the server meanwhile: autovacuum only vacuums
    and analyzes."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        before, source_file = connection.execute(
            "SELECT setting, coalesce(sourcefile, '') FROM pg_settings WHERE name = 'autovacuum'").fetchone()
        connection.execute("ALTER SYSTEM SET autovacuum = on")
        connection.execute("SELECT pg_reload_conf()")
    _wait_for_autovacuum("on")
    log(f"autovacuum on (was {before}, set in {source_file or 'the defaults'})")
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        handlers[signal.SIGTERM] = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        yield
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            if source_file.endswith("postgresql.auto.conf"):  # someone's ALTER SYSTEM before ours
                connection.execute(f"ALTER SYSTEM SET autovacuum = {'on' if before == 'on' else 'off'}")
            else:
                connection.execute("ALTER SYSTEM RESET autovacuum")
            connection.execute("SELECT pg_reload_conf()")
        _wait_for_autovacuum(before)
        log(f"autovacuum {before} again")
        for number, handler in handlers.items():
            signal.signal(number, handler)


def _raise_stopped(signum, frame) -> None:
    raise _Stopped(f"signal {signum}")


def _wait_for_autovacuum(value: str, timeout: float = 10.0) -> None:
    """pg_reload_conf() only signals the postmaster; a new session sees the file once it has read it."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as fresh:
            shown = fresh.execute("SHOW autovacuum").fetchone()[0]
        if shown == value:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"SHOW autovacuum says {shown!r} {timeout:g}s after the reload, not {value!r}")
        time.sleep(0.05)


MARIADB_HOST, MARIADB_PORT, MARIADB_USER = "127.0.0.1", 3306, "root"


def mariadb_connect(database: str | None = None):
    """A connection to the MariaDB server (root, empty password), autocommitting, by leased's driver."""
    from leased.backends.mariadb.driver import DRIVER

    return DRIVER.connect(host=MARIADB_HOST, port=MARIADB_PORT, user=MARIADB_USER, autocommit=True,
                          **({"database": database} if database else {}))


def recreate_mariadb_database(name: str) -> str:
    """A fresh, empty MariaDB database for one run; returns its URL."""
    connection = mariadb_connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"CREATE DATABASE `{name}`")
    finally:
        connection.close()
    return f"mariadb://{MARIADB_USER}@{MARIADB_HOST}:{MARIADB_PORT}/{name}"


def drop_mariadb_database(name: str) -> None:
    connection = mariadb_connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        connection.close()


def remove_sqlite(path: Path | str) -> None:
    """A SQLite database file and its WAL and shared-memory files, those that exist."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def fresh_database(backend: str, name: str, folder: str) -> tuple[str, Path | None]:
    """A fresh, empty database for one measurement: its URL, and its file on SQLite (WORK/folder)."""
    if backend == "sqlite":
        path = WORK / folder / f"{name}.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{path}", path
    if backend == "postgres":
        return recreate_database(name), None
    return recreate_mariadb_database(name), None


def drop_fresh_database(backend: str, name: str, path: Path | None) -> None:
    if backend == "sqlite":
        remove_sqlite(path)
    elif backend == "postgres":
        drop_database(name)
    else:
        drop_mariadb_database(name)


class Failed(Exception):
    """A peer (or leased) could not complete a workload; the reason goes into the report."""


# Worker processes.
@dataclass
class Workers:
    processes: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def check_alive(self) -> None:
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                raise Failed(f"worker exited with code {process.returncode}: {tail(log)}")

    def kill(self, index: int = 0) -> None:
        """SIGKILL one worker process and everything it started (forked children too)."""
        process = self.processes[index]
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def stop(self, grace: float = 10.0) -> None:
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # the group too: RQ's work horses, Celery's children
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    # The caller's PYTHONPATH after BENCH: run from /work/venv with PYTHONPATH=src, the workers
    # import this checkout's leased, as the parent does.
    inherited = [os.path.abspath(entry) for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    path = os.pathsep.join([str(BENCH), *inherited])
    full_env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **env}
    with open(log, "wb") as out:
        # A session of its own, so stop() can end the worker and its children by process group.
        return subprocess.Popen(argv, env=full_env, stdout=out, stderr=subprocess.STDOUT, cwd=str(BENCH),
                                start_new_session=True)


def tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:])[-400:]


def venv_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


# Counting completions in the store.
@dataclass
class Drained:
    done: int
    seconds: float  # from the first completion seen to the last
    timed_out: bool

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else float("nan")


def wait_for_done(count: Callable[[], int], target: int, timeout: float, workers: Workers | None = None,
                  poll: float = 0.1, baseline: int = 0) -> Drained:
    """Poll the store's count of finished jobs until `target` more than `baseline` are done.

    The clock starts at the first poll that sees a completion (so worker start-up is not
    counted) and the jobs done by then are left out of the rate.
    """
    started = time.monotonic()
    first_at, first_done, done = None, 0, 0
    while True:
        done = count() - baseline
        now = time.monotonic()
        if first_at is None and done > 0:
            first_at, first_done = now, done
        if done >= target:
            return Drained(done - first_done, now - first_at, False)
        if now - started > timeout:
            if first_at is None:
                return Drained(0, 0.0, True)
            return Drained(done - first_done, now - first_at, True)
        if workers is not None:
            workers.check_alive()
        time.sleep(poll)


# Latency probes: a job that reports its start time on a loopback datagram.
class ProbeReceiver:
    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Room for thousands of reports: 500 slots start and end within a millisecond or two, faster
        # than this process reads, and the default buffer (about 200 datagrams) drops the rest.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.started: dict[int, float] = {}

    def collect(self, wanted: set[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not wanted <= self.started.keys():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.socket.settimeout(remaining)
            try:
                data = self.socket.recv(64)
            except TimeoutError:
                return
            number, at = data.decode().split()
            self.started.setdefault(int(number), float(at))

    def close(self) -> None:
        self.socket.close()


# Statistics.
def median_range(values: list[float]) -> dict[str, float] | None:
    values = [v for v in values if v == v]  # drop NaN
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = (len(ordered) - 1) * q
    low, high = int(index), min(int(index) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (index - low)
