"""What the databases themselves do on this machine, so every queue figure reads as a ratio.

- pgbench -N (the simple-update script without the contended branch/teller updates) in its own
  database, scale 1, 1 and 4 clients;
- one psycopg connection inserting a row and committing, in a loop (a commit per job is the
  floor of an enqueue-one-at-a-time API);
- SQLite in WAL mode, a row and a commit per loop, synchronous=NORMAL and FULL;
- one connection (leased's MariaDB driver) to MariaDB inserting a small row and committing, in a
  loop for a fixed time (InnoDB with the server's own durability settings, reported beside them).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import time
import uuid

from common import (PG_HOST, PG_PORT, PG_USER, WORK, drop_database, drop_mariadb_database, mariadb_connect,
                    recreate_database, recreate_mariadb_database, remove_sqlite)

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
        remove_sqlite(path)


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


# The ceiling: the database alone draining no-op jobs, with no handler and no engine.
CEILING_DB = "bench_ceiling"
CEILING_WORKER = "ceiling"
CEILING_STORES = ("postgres", "sqlite", "mariadb")


def _noop(n: int) -> None:
    return None


def _leased_queue(url: str, jobs: int, history: int = 0):
    """A fresh leased schema at `url` with `jobs` pending no-op jobs, queued with leased's own bulk
    enqueue, after `history` finished ones (see prune_under_load.add_history)."""
    from leased import Leased
    from prune_under_load import add_history

    app = Leased(url)
    task = app.task(name="bench.noop")(_noop)
    if history:
        add_history(app, history, days_old=1)
    for start in range(0, jobs, 1_000):
        task.enqueue_many([(n,) for n in range(start, min(start + 1_000, jobs))])
    return app


def _drain_loop(claim, finish, jobs: int) -> float:
    """jobs/s: claim a batch, finish it, until `jobs` are finished (a claim that finds none ends it)."""
    finished = 0
    started = time.perf_counter()
    while finished < jobs:
        claimed = claim()
        if not claimed:
            break
        finish(claimed)
        finished += len(claimed)
    elapsed = time.perf_counter() - started
    if finished < jobs:
        raise RuntimeError(f"the ceiling loop finished {finished} of {jobs} jobs")
    return finished / elapsed


def _leased_postgres_loop(app, batch: int):
    """leased's `claim` on a claims connection (set up by the backend with claim_settings), and its
    `fused_finish` on an ordinary one: the two statements a PostgreSQL worker sends per batch."""
    from leased.backends.postgres.queries import QUERIES

    backend = app.backend
    params = {"worker_id": CEILING_WORKER, "task_names": ["bench.noop"], "queue_names": None, "limit": batch}

    def claim():
        with backend.connections.connection(for_claims=True) as connection:
            # A claim that takes nothing answers one row of its own, id NULL (see claim in queries.sql).
            return [(row["id"], row["attempt"]) for row in connection.execute(QUERIES["claim"], params)
                    if row["id"] is not None]

    def finish(held):
        count = len(held)
        backend.database.rows(
            "fused_finish", counted_as=None, job_ids=[job_id for job_id, _ in held],
            attempts=[attempt for _, attempt in held], worker_ids=[CEILING_WORKER] * count,
            statuses=["done"] * count, results=["null"] * count, last_errors=[None] * count,
            retry_in_seconds=[0.0] * count, outcomes=["done"] * count, error_types=[None] * count,
            error_messages=[None] * count, tracebacks=[None] * count, progress=[None] * count,
            handler_outlived_limits=[False] * count, trace_contexts=[None] * count)

    return claim, finish


def _leased_sqlite_loop(app, batch: int):
    """leased's `claim` in one write transaction, then `record_attempts` + `finish` + `count_finished`
    in another, on the backend's own connection and write lock (WAL, synchronous=NORMAL)."""
    import json

    database = app.backend.database
    params = {"worker_id": CEILING_WORKER, "task_names": json.dumps(["bench.noop"]), "queue_names": None,
              "limit": batch}

    def claim():
        with database.transaction() as connection:
            return [(row["id"], row["attempt"]) for row in database.execute(connection, "claim", **params)]

    def finish(held):
        with database.transaction() as connection:
            database.execute(connection, "record_attempts", ends=json.dumps(
                [[job_id, attempt, CEILING_WORKER, "done", None, None, None] for job_id, attempt in held]))
            database.execute(connection, "finish", ends=json.dumps(
                [[job_id, attempt, CEILING_WORKER, "done", "null", None, 0.0] for job_id, attempt in held]))
            database.execute(connection, "count_finished", counts=finished_count(held))

    return claim, finish


def finished_count(held: list) -> str:
    """count_finished's :counts for a batch of done jobs, as the backend's finish writes it."""
    import json

    return json.dumps([["default", "bench.noop", CEILING_WORKER, len(held), 0]])


def _leased_mariadb_loop(app, batch: int):
    """leased's claim (`claim_ids`, then the backend's own `take_leases` + `leased_jobs`) in one
    transaction, and its fenced finish (`held_leases`, `record_attempts`, `finish`, `count_finished`)
    in another."""
    import json

    backend = app.backend
    params = {"worker_id": CEILING_WORKER, "task_names": json.dumps(["bench.noop"]), "queue_names": None,
              "limit": batch}

    def claim():
        rows = backend.database.transact(lambda connection: backend.claims.lease(
            connection, backend.database.all(connection, "claim_ids", **params), CEILING_WORKER))
        return [(row["id"], row["attempt"]) for row in rows]

    def finish(held):
        def work(connection):
            backend.database.all(connection, "held_leases", worker_id=CEILING_WORKER, leases=json.dumps(held))
            backend.database.execute(connection, "record_attempts", ends=json.dumps(
                [[job_id, attempt, CEILING_WORKER, "done", None, None, None] for job_id, attempt in held]))
            backend.database.execute(connection, "finish", ends=json.dumps(
                [[job_id, attempt, CEILING_WORKER, "done", "null", None, 0.0] for job_id, attempt in held]))
            backend.database.execute(connection, "count_finished", counts=finished_count(held))

        backend.database.transact(work)

    return claim, finish


def ceiling_leased(store: str, batch: int, jobs: int = 20_000, history: int = 0) -> float:
    """jobs/s of one connection draining `jobs` no-op jobs with leased's own named claim and finish
    queries on leased's own schema, `batch` jobs a claim, no handler and no engine in between;
    `history` finished jobs in the table first."""
    loops = {"postgres": _leased_postgres_loop, "sqlite": _leased_sqlite_loop, "mariadb": _leased_mariadb_loop}
    url, drop = _ceiling_store(store)
    try:
        app = _leased_queue(url, jobs, history)
        try:
            return _drain_loop(*loops[store](app, batch), jobs)
        finally:
            app.close()
    finally:
        drop()


def _ceiling_store(store: str):
    """A fresh database (or file) for one ceiling loop: its URL, and how to remove it."""
    if store == "postgres":
        return recreate_database(CEILING_DB), lambda: drop_database(CEILING_DB)
    if store == "mariadb":
        return recreate_mariadb_database(CEILING_DB), lambda: drop_mariadb_database(CEILING_DB)
    path = WORK / f"ceiling-{uuid.uuid4().hex[:8]}.db"
    path.parent.mkdir(parents=True, exist_ok=True)

    return f"sqlite:///{path}", lambda: remove_sqlite(path)


def ceiling_minimal(store: str, batch: int, jobs: int = 20_000) -> float:
    """The same loop on a minimal table (id, status) with a partial index on pending ids: claim
    `batch` with SKIP LOCKED (SQLite: its one write lock) and mark them running, then mark them
    done. The gap to ceiling_leased is what leased's schema and statements cost. The durability is
    leased's: PostgreSQL claims with synchronous_commit=off, finishes with it on; SQLite WAL with
    synchronous=NORMAL; MariaDB the server's settings."""
    url, drop = _ceiling_store(store)
    try:
        if store == "postgres":
            return _minimal_postgres(url, batch, jobs)
        if store == "sqlite":
            return _minimal_sqlite(url.removeprefix("sqlite:///"), batch, jobs)
        return _minimal_mariadb(batch, jobs)
    finally:
        drop()


def _minimal_postgres(url: str, batch: int, jobs: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as claims, psycopg.connect(url, autocommit=True) as finishes:
        claims.execute("CREATE TABLE minimal_jobs (id bigserial PRIMARY KEY, status text NOT NULL)")
        claims.execute("CREATE INDEX minimal_jobs_pending ON minimal_jobs (id) WHERE status = 'pending'")
        claims.execute("INSERT INTO minimal_jobs (status) SELECT 'pending' FROM generate_series(1, %s)", (jobs,))
        claims.execute("VACUUM ANALYZE minimal_jobs")
        claims.execute("SET synchronous_commit = off")

        def claim():
            return [row[0] for row in claims.execute(
                "UPDATE minimal_jobs SET status = 'running' WHERE id IN (SELECT id FROM minimal_jobs "
                "WHERE status = 'pending' ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id", (batch,))]

        def finish(ids):
            finishes.execute("UPDATE minimal_jobs SET status = 'done' WHERE id = ANY(%s)", (ids,))

        return _drain_loop(claim, finish, jobs)


def _minimal_sqlite(path: str, batch: int, jobs: int) -> float:
    import json

    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute("CREATE TABLE minimal_jobs (id INTEGER PRIMARY KEY, status TEXT NOT NULL)")
        connection.execute("CREATE INDEX minimal_jobs_pending ON minimal_jobs (id) WHERE status = 'pending'")
        connection.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                           "INSERT INTO minimal_jobs (status) SELECT 'pending' FROM n", (jobs,))

        def claim():
            connection.execute("BEGIN IMMEDIATE")
            ids = [row[0] for row in connection.execute(
                "UPDATE minimal_jobs SET status = 'running' WHERE id IN (SELECT id FROM minimal_jobs "
                "WHERE status = 'pending' ORDER BY id LIMIT ?) RETURNING id", (batch,))]
            connection.execute("COMMIT")
            return ids

        def finish(ids):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("UPDATE minimal_jobs SET status = 'done' WHERE id IN (SELECT value FROM json_each(?))",
                               (json.dumps(ids),))
            connection.execute("COMMIT")

        return _drain_loop(claim, finish, jobs)
    finally:
        connection.close()


def _minimal_mariadb(batch: int, jobs: int) -> float:
    connection = mariadb_connect(CEILING_DB)
    try:
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE minimal_jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                           "status VARCHAR(16) NOT NULL, KEY minimal_jobs_status (status, id)) ENGINE=InnoDB")
            cursor.execute(f"INSERT INTO minimal_jobs (status) SELECT 'pending' FROM seq_1_to_{int(jobs)}")
        connection.autocommit(False)

        def claim():
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM minimal_jobs WHERE status = 'pending' ORDER BY id LIMIT %s "
                               "FOR UPDATE SKIP LOCKED", (batch,))
                ids = [row[0] for row in cursor.fetchall()]
                if ids:
                    cursor.execute("UPDATE minimal_jobs SET status = 'running' WHERE id IN %s", (tuple(ids),))
            connection.commit()
            return ids

        def finish(ids):
            with connection.cursor() as cursor:
                cursor.execute("UPDATE minimal_jobs SET status = 'done' WHERE id IN %s", (tuple(ids),))
            connection.commit()

        return _drain_loop(claim, finish, jobs)
    finally:
        connection.close()


CEILING_BATCHES = (10, 50)


def ceilings(stores: list[str], jobs: int) -> dict[str, float]:
    """Every ceiling loop once: {"ceiling_<store>_<leased|minimal>_b<batch>": jobs/s}."""
    found = {}
    for store in stores:
        for batch in CEILING_BATCHES:
            found[f"ceiling_{store}_leased_b{batch}"] = ceiling_leased(store, batch, jobs)
            found[f"ceiling_{store}_minimal_b{batch}"] = ceiling_minimal(store, batch, jobs)
    return found


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="The ceiling loops alone (bench/run.py runs them with the rest).")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--stores", default=",".join(CEILING_STORES))
    parser.add_argument("--history", type=int, default=0, help="with N finished jobs in leased's table first "
                        "(leased's loop only, batch 10): does the table's size reach the database's own work?")
    options = parser.parse_args()
    if options.history:
        for store in options.stores.split(","):
            for history in (0, options.history):
                rate = ceiling_leased(store, 10, options.jobs, history)
                print(f"ceiling_{store}_leased_b10, {history:,} finished jobs first: {rate:>9,.0f} jobs/s",
                      flush=True)
        return
    for key, rate in ceilings(options.stores.split(","), options.jobs).items():
        print(f"{key:34} {rate:>9,.0f} jobs/s", flush=True)


if __name__ == "__main__":
    main()
