"""Two PostgreSQL 15 clusters of the test's own, a primary and its streaming standby, made with
Debian's tools and dropped afterwards. Imports no pytest.

Each cluster is `pg_createcluster 15 <name>` on a free port, its data directory in a temporary
directory, run as the `postgres` user (`runuser`); the standby is a `pg_basebackup -R` of the
primary into the second cluster's data directory. Never the shared cluster (`15 main`, port 5432):
every command names a cluster this module made.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg

from servers import free_port

VERSION = "15"
TOOLS = ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "pg_basebackup", "runuser")
START_TIMEOUT = 30.0
DATABASE = "leased"


def missing() -> str | None:
    """Why two clusters cannot be made here, or None."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"no {', '.join(absent)} (apt-get install postgresql-common postgresql-{VERSION})"
    if not Path(f"/usr/lib/postgresql/{VERSION}/bin/postgres").exists():
        return f"no PostgreSQL {VERSION} server (apt-get install postgresql-{VERSION})"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user to run the clusters as"
    if os.geteuid() != 0:
        return "making clusters as the postgres user needs root (runuser)"
    return None


def _as_postgres(*command: str) -> str:
    done = subprocess.run(["runuser", "-u", "postgres", "--", *command], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    return done.stdout


class Cluster:
    """One cluster this module made: `url` reaches its `leased` database as postgres."""

    def __init__(self, name: str, directory: Path):
        self.name, self.port = name, free_port()
        self.data_directory = directory / name
        self.config_directory = Path(f"/etc/postgresql/{VERSION}/{name}")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"
        self.made = False

    def create(self, settings: dict[str, str]) -> None:
        _as_postgres("pg_createcluster", VERSION, self.name, "-p", str(self.port), "-d", str(self.data_directory),
                     "--start-conf=manual")
        self.made = True
        settings_file = self.config_directory / "conf.d" / "leased-test.conf"
        settings_file.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
        shutil.chown(settings_file, "postgres", "postgres")
        (self.config_directory / "pg_hba.conf").write_text(
            "local all all trust\nlocal replication all trust\n"
            "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n")

    def start(self) -> None:
        _as_postgres("pg_ctlcluster", "--skip-systemctl-redirect", VERSION, self.name, "start")

    def wait_accepting(self, database: str = "postgres") -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/{database}", connect_timeout=2):
                    return
            except psycopg.OperationalError as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster {self.name} does not accept connections: {error}\n{self.log()}") \
                        from error
                time.sleep(0.05)

    def postmaster_pid(self) -> int:
        return int((self.data_directory / "postmaster.pid").read_text().split()[0])

    def kill_postmaster(self, *also: int) -> None:
        """kill -9 of the postmaster, as a crash does; its backends notice and exit on their own
        (processes in `also`, e.g. a stopped walsender, are killed with it)."""
        pid = self.postmaster_pid()
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        for process in also:
            _kill(process)
        deadline = time.monotonic() + START_TIMEOUT
        while any(_alive(child) for child in [pid, *children]):
            if time.monotonic() > deadline:
                for child in children:
                    _kill(child)
            time.sleep(0.01)

    def promote(self) -> None:
        """pg_ctl promote, which waits until the server accepts writes."""
        _as_postgres("pg_ctlcluster", "--skip-systemctl-redirect", VERSION, self.name, "promote")

    def log(self) -> str:
        path = Path(f"/var/log/postgresql/postgresql-{VERSION}-{self.name}.log")
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def drop(self) -> None:
        if not self.made:
            return
        try:
            _as_postgres("pg_dropcluster", "--stop", VERSION, self.name)
        except RuntimeError:  # a killed postmaster leaves a stale pid file: pg_ctl cannot stop it
            if (self.data_directory / "postmaster.pid").exists():
                pid = self.postmaster_pid()
                for child in [pid, *_children(pid)]:
                    _kill(child)
            _as_postgres("pg_dropcluster", VERSION, self.name)
        shutil.rmtree(self.config_directory, ignore_errors=True)  # with the settings file it did not make
        self.made = False


def _children(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                children.append(int(entry.name))
    return children


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def primary_and_standby(synchronous: bool = True) -> Iterator[tuple[Cluster, Cluster]]:
    """A primary with a `leased` database and a standby streaming from it, both dropped after.
    Synchronous: a commit returns once the standby has it (synchronous_commit = on), so a promoted
    standby has every commit the primary acknowledged. The standby's own settings name no
    synchronous standby: once promoted, it has none to wait for."""
    tag = uuid.uuid4().hex[:8]
    directory = Path(tempfile.mkdtemp(prefix="leased-standby-"))
    shutil.chown(directory, "postgres", "postgres")
    primary, standby = Cluster(f"leased_{tag}_primary", directory), Cluster(f"leased_{tag}_standby", directory)
    common = {"listen_addresses": "'127.0.0.1'", "max_connections": "100", "shared_buffers": "'32MB'",
              "fsync": "off",  # the tests crash processes, never the machine: the page cache survives
              "wal_level": "replica", "max_wal_senders": "4", "wal_keep_size": "'256MB'", "hot_standby": "on"}
    try:
        primary.create(common)
        primary.start()
        primary.wait_accepting()
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{primary.port}/postgres", autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")
        standby.create(common)
        shutil.rmtree(standby.data_directory)
        _as_postgres("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                     "-D", str(standby.data_directory), "-R", "-X", "stream", "--checkpoint=fast")
        standby.start()
        standby.wait_accepting(DATABASE)
        if synchronous:  # only now: until a standby streams, a synchronous commit waits for ever
            with psycopg.connect(primary.url, autocommit=True) as connection:
                connection.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                connection.execute("SELECT pg_reload_conf()")
        wait_streaming(primary, synchronous)
        yield primary, standby
    finally:
        for cluster in (standby, primary):
            try:
                cluster.drop()
            except RuntimeError:
                pass  # the other one still goes; the directory below too
        shutil.rmtree(directory, ignore_errors=True)


def wait_streaming(primary: Cluster, synchronous: bool) -> None:
    wanted = "sync" if synchronous else "async"
    deadline = time.monotonic() + START_TIMEOUT
    with psycopg.connect(primary.url, autocommit=True) as connection:
        while True:
            states = connection.execute("SELECT state, sync_state FROM pg_stat_replication").fetchall()
            if ("streaming", wanted) in states:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby is not streaming ({wanted}): {states}\n{primary.log()}")
            time.sleep(0.02)
