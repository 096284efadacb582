"""A real PgBouncer (Debian's /usr/sbin/pgbouncer) in front of the test PostgreSQL, started and
stopped by the test or benchmark that needs it. Imports no pytest (bench/pgbouncer_latency.py uses it).

Each run gets a role and a schema of its own: PgBouncer 1.18 forwards no `options` startup
parameter, so the role's own `search_path` setting points its sessions at the schema. That survives
the pooler: RESET ALL (DISCARD ALL, session mode's reset query) goes back to the role's default.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psycopg
from psycopg.conninfo import conninfo_to_dict

from servers import free_port

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
START_TIMEOUT = 10.0


def missing() -> str | None:
    """Why PgBouncer cannot run here, or None."""
    return None if os.access(BINARY, os.X_OK) else f"no pgbouncer binary at {BINARY} (apt-get install pgbouncer)"


@contextmanager
def schema_role(server_url: str) -> Iterator[tuple[str, str]]:
    """(role, schema): a login role whose search_path is a fresh schema it owns; both dropped after."""
    name = f"leased_bouncer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f'CREATE ROLE "{name}" LOGIN')
        connection.execute(f'CREATE SCHEMA "{name}" AUTHORIZATION "{name}"')
        connection.execute(f'ALTER ROLE "{name}" SET search_path = "{name}"')
    try:
        yield name, name
    finally:
        with psycopg.connect(server_url, autocommit=True) as connection:
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,))
            connection.execute(f'DROP SCHEMA "{name}" CASCADE')
            connection.execute(f'DROP ROLE "{name}"')


class PgBouncer:
    """One pgbouncer process; `url` reaches the test database through it as `role`."""

    def __init__(self, server_url: str, role: str, pool_mode: str):
        server = conninfo_to_dict(server_url)
        self.role, self.pool_mode = role, pool_mode
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="leased-pgbouncer-"))
        database = server.get("dbname", "test")
        (self.directory / "users.txt").write_text(f'"{role}" ""\n')
        # Transaction pooling's point is a pool smaller than its clients (two workers, the producer,
        # the CLI and the dashboard open more than 4); in session mode each client holds its server
        # connection until it leaves, so the pool must be as large as the clients.
        pool_size = 4 if pool_mode == "transaction" else 60
        (self.directory / "pgbouncer.ini").write_text(f"""\
[databases]
{database} = host={server.get('host', '127.0.0.1')} port={server.get('port', '5432')} dbname={database}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir = {self.directory}
pidfile = {self.directory}/pgbouncer.pid
logfile = {self.directory}/pgbouncer.log
auth_type = trust
auth_file = {self.directory}/users.txt
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 200
""")
        self.url = f"postgresql://{role}@127.0.0.1:{self.port}/{database}"
        # The same role and database straight to PostgreSQL (the role's search_path picks the schema).
        self.direct_url = (f"postgresql://{role}@{server.get('host', '127.0.0.1')}:{server.get('port', '5432')}"
                           f"/{database}")
        self._process: subprocess.Popen | None = None

    def start(self) -> "PgBouncer":
        command = [BINARY, str(self.directory / "pgbouncer.ini")]
        if os.geteuid() == 0:  # pgbouncer refuses to run as root; -u drops to another user
            user = "postgres" if _user_exists("postgres") else "nobody"
            os.chmod(self.directory, 0o755)
            shutil.chown(self.directory, user)
            command[1:1] = ["-u", user]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2, prepare_threshold=None) as connection:
                    connection.execute("SELECT 1")
                return self
            except psycopg.OperationalError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@contextmanager
def running(server_url: str, pool_mode: str = "transaction") -> Iterator[PgBouncer]:
    """A PgBouncer in `pool_mode` before server_url's database, with a fresh role and schema."""
    with schema_role(server_url) as (role, _schema):
        bouncer = PgBouncer(server_url, role, pool_mode)
        try:
            yield bouncer.start()
        finally:
            bouncer.stop()
