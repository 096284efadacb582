"""What a fleet of idle PostgreSQL workers spends on the reclaim of expired leases while a
transaction elsewhere holds the vacuum horizon back.

    PYTHONPATH=src .venv/bin/python bench/fleet_reclaims.py [--dead 300000] [--workers 1 4 8] [--seconds 30]

On a fresh database, with autovacuum on for the run (common.autovacuum_on; put back after), a
second connection runs `BEGIN; SELECT txid_current();` and stays idle in transaction. Then --dead
jobs are written running and set done, as that many claims and finishes would leave them: each a
dead entry in leased_jobs_leases, the running jobs' index, that the reclaim steps over and nothing
can remove while the transaction is open. For each fleet size, that many `leased worker` processes
(--concurrency 10, nothing to run) idle for --seconds, and the run reports, per second:
- the reclaim's reads of leased_jobs_leases (pg_stat_user_indexes.idx_scan: an idle worker makes
  no other) and the index entries they read;
- the CPU time of the workers' server sessions (utime + stime of their backends, from /proc).
Run it in two checkouts, one after the other, to compare them.
"""

from __future__ import annotations

import argparse
import os
import time

import psycopg

from common import BENCH, Workers, autovacuum_on, drop_database, leased_commit, recreate_database, spawn, venv_bin
from leased import Leased

DATABASE = "leased_fleet_reclaims"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def leave_dead_entries(url: str, count: int) -> None:
    """`count` jobs claimed and finished while the horizon is held, in batches of 50,000."""
    with psycopg.connect(url, autocommit=True) as connection:
        for start in range(0, count, 50_000):
            size = min(50_000, count - start)
            connection.execute(
                "INSERT INTO leased_jobs (task_name, queue_name, status, attempt, max_attempts, lease_seconds, "
                "lease_owner, lease_expires_at) SELECT 'bench.noop', 'default', 'running', 1, 3, 30, 'gone', "
                "now() + interval '1 day' FROM generate_series(1, %s)", (size,))
            connection.execute("UPDATE leased_jobs SET status = 'done', finished_at = now(), lease_owner = NULL, "
                               "lease_expires_at = NULL WHERE status = 'running'")


def sessions_cpu(connection: psycopg.Connection, application: str) -> float:
    """Seconds of CPU the workers' server sessions have used so far."""
    pids = [row[0] for row in connection.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = %s", (DATABASE, application))]
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / CLOCK_TICKS


def index_reads(connection: psycopg.Connection) -> tuple[int, int]:
    return connection.execute("SELECT idx_scan, idx_tup_read FROM pg_stat_user_indexes "
                              "WHERE indexrelname = 'leased_jobs_leases'").fetchone()


def fleet(url: str, size: int, seconds: float) -> dict:
    application = f"fleet-{size}"
    worker_url = f"{url}?application_name={application}"
    logs = [BENCH / "work" / f"fleet-reclaims-{size}-{n}.log" for n in range(size)]
    workers = Workers([spawn([venv_bin("leased"), "worker", "peers.leased:app", "--concurrency", "10",
                              "--log-level", "warning"], {"BENCH_LEASED_URL": worker_url}, path) for path in logs],
                      logs)
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            deadline = time.monotonic() + 60
            while connection.execute("SELECT count(DISTINCT client_port) FROM pg_stat_activity "
                                     "WHERE application_name = %s", (application,)).fetchone()[0] < size:
                workers.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{size} workers did not connect in 60 s")
                time.sleep(0.2)
            time.sleep(3)  # settled: started, first polls and reclaims made, statistics flushed
            cpu, (scans, entries) = sessions_cpu(connection, application), index_reads(connection)
            began = time.monotonic()
            time.sleep(seconds)
            workers.check_alive()
            time.sleep(1.5)  # a session's statistics reach pg_stat_user_indexes within a second or so
            elapsed = time.monotonic() - began - 1.5
            cpu_after, (scans_after, entries_after) = sessions_cpu(connection, application), index_reads(connection)
    finally:
        workers.stop()
    return {"workers": size, "reclaims_per_s": (scans_after - scans) / elapsed,
            "entries_read_per_s": (entries_after - entries) / elapsed,
            "session_cpu_ms_per_s": 1000 * (cpu_after - cpu) / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dead", type=int, default=300_000, help="jobs claimed and finished under the horizon")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 8], help="fleet sizes, in turn")
    parser.add_argument("--seconds", type=float, default=30, help="measured window per fleet size")
    options = parser.parse_args()
    url = recreate_database(DATABASE)
    results = []
    try:
        with autovacuum_on(log):
            Leased(url).migrate()
            with psycopg.connect(url) as holder:
                xid = holder.execute("SELECT txid_current()").fetchone()[0]  # idle in transaction from here
                log(f"transaction {xid} open; writing {options.dead:,} claimed and finished jobs")
                leave_dead_entries(url, options.dead)
                for size in options.workers:
                    results.append(fleet(url, size, options.seconds))
                    log(f"{size} workers: {results[-1]}")
                holder.rollback()
    finally:
        drop_database(DATABASE)
    print(f"\nleased {leased_commit()}, {options.dead:,} dead entries under a held horizon, "
          f"{options.seconds:g} s per fleet\n")
    print("| workers | reclaims/s | index entries read/s | workers' sessions, CPU ms/s |")
    print("|---:|---:|---:|---:|")
    for row in results:
        print(f"| {row['workers']} | {row['reclaims_per_s']:.2f} | {row['entries_read_per_s']:,.0f} | "
              f"{row['session_cpu_ms_per_s']:.1f} |")


if __name__ == "__main__":
    main()
