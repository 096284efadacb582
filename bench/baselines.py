"""What the databases themselves do on this machine, so every queue figure reads as a ratio.

- pgbench -N (the simple-update script without the contended branch/teller updates) in its own
  database, scale 1, 1 and 4 clients;
- one psycopg connection inserting a row and committing, in a loop (a commit per job is the
  floor of an enqueue-one-at-a-time API);
- SQLite in WAL mode, a row and a commit per loop, synchronous=NORMAL and FULL;
- one MySQLdb connection to MariaDB inserting a small row and committing, in a loop for a fixed time
  (InnoDB with the server's own durability settings, reported beside them).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time
import uuid

from common import (PG_HOST, PG_PORT, PG_USER, WORK, drop_database, drop_mariadb_database, mariadb_connect,
                    recreate_database, recreate_mariadb_database)

PGBENCH_DB = "pgbench_leased"


def pgbench_tps(clients: int, seconds: int) -> float:
    out = subprocess.run(
        ["pgbench", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-N", "-c", str(clients),
         "-j", str(min(clients, 2)), "-T", str(seconds), PGBENCH_DB],
        capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    match = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    if match is None:
        raise RuntimeError(f"no tps in pgbench output: {out[-300:]}")
    return float(match.group(1))


def pgbench_init() -> None:
    recreate_database(PGBENCH_DB)
    subprocess.run(["pgbench", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-i", "-s", "1", "-q",
                    PGBENCH_DB], capture_output=True, text=True, timeout=120, check=True)


def pgbench_cleanup() -> None:
    drop_database(PGBENCH_DB)


def psycopg_insert_commit(rows: int = 5_000) -> float:
    """Rows per second, one INSERT and one commit each, on one connection (the pgbench database)."""
    import psycopg

    with psycopg.connect(f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{PGBENCH_DB}", autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS insert_loop")
        connection.execute("CREATE TABLE insert_loop (id bigserial PRIMARY KEY, payload json NOT NULL)")
        started = time.perf_counter()
        for n in range(rows):
            connection.execute("INSERT INTO insert_loop (payload) VALUES (%s)", (f"[{n}]",))
        elapsed = time.perf_counter() - started
        connection.execute("DROP TABLE insert_loop")
    return rows / elapsed


def sqlite_commits(synchronous: str, rows: int = 5_000) -> float:
    """Rows per second in WAL mode, one INSERT and one commit each, on the same disk as the queues' files."""
    path = WORK / f"baseline-{uuid.uuid4().hex[:8]}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {synchronous}")
        connection.execute("CREATE TABLE insert_loop (id INTEGER PRIMARY KEY, payload TEXT NOT NULL)")
        started = time.perf_counter()
        for n in range(rows):
            connection.execute("INSERT INTO insert_loop (payload) VALUES (?)", (f"[{n}]",))
        return rows / (time.perf_counter() - started)
    finally:
        connection.close()
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)


MARIADB_DB = "leased_bench_baseline"


def mariadb_insert_commit(seconds: float = 5.0) -> float:
    """Commits per second on one MariaDB connection: INSERT of a small row, then COMMIT, for `seconds`."""
    recreate_mariadb_database(MARIADB_DB)
    connection = mariadb_connect(MARIADB_DB)
    try:
        connection.autocommit(False)
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE insert_loop (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload JSON NOT NULL)"
                           " ENGINE=InnoDB")
            commits = 0
            started = time.perf_counter()
            while (elapsed := time.perf_counter() - started) < seconds:
                cursor.execute("INSERT INTO insert_loop (payload) VALUES (%s)", (f"[{commits}]",))
                connection.commit()
                commits += 1
        return commits / elapsed
    finally:
        connection.close()
        drop_mariadb_database(MARIADB_DB)


def mariadb_settings() -> str:
    """The server's version and the settings a commit's cost depends on, for the report."""
    connection = mariadb_connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            version = cursor.fetchone()[0]
            cursor.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('innodb_flush_log_at_trx_commit', "
                           "'sync_binlog', 'log_bin', 'innodb_buffer_pool_size')")
            settings = ", ".join(f"{name}={value}" for name, value in cursor.fetchall())
    finally:
        connection.close()
    return f"{version} ({settings})"
