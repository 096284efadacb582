"""Why claims slow down while another transaction holds back the vacuum horizon, and which layout of
the due set would not: three layouts side by side, in one run, on the local PostgreSQL.

    python bench/held_horizon_layouts.py [--jobs 60000] [--batch 10] [--windows 6]

Each layout gets a schema of its own and the same loop: enqueue a batch of jobs (each in its own
statement, as producers do), claim a batch (oldest first, FOR UPDATE SKIP LOCKED), finish it. It
runs twice: with nothing else open, then with a REPEATABLE READ transaction of another session open
throughout (it took its snapshot first: every row version written after it stays). Reported per
window of jobs: the claim statement's p50 and p99, and at the end the dead row versions and the
bytes the layout's relations grew by. Autovacuum is turned on for the run and restored after, as
production servers run.

- jobs: leased's layout. The job's row is the due set: a partial index on pending jobs, a claim
  that updates status (leaving the old version's entry at the head of the due index), a finish
  that updates it again.
- due table: a narrow table of due jobs beside the jobs table. The claim deletes from it; the
  jobs table has no index on status, so its claim and finish updates are HOT.
- rotated: the due table split into three generations (LIST partitions); every --rotate jobs the
  next generation takes new jobs, and the oldest, once no live row is left in it, is truncated,
  which drops its dead rows and index entries whatever horizon another transaction holds (PgQ's
  way). It needs no vacuum to stay flat, and a truncate takes an exclusive lock on the partition.

A measurement, not a test: it writes bench/held_horizon_layouts.md and its section of
docs/benchmarks.md ("A held horizon: three layouts of the due set").
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Iterator

import psycopg

import report
from common import BENCH, autovacuum_on, leased_commit

SECTION = BENCH / "held_horizon_layouts.md"
TITLE = "A held horizon: three layouts of the due set"
URL = os.environ.get("LEASED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

JOB_COLUMNS = """
    id bigserial PRIMARY KEY,
    task_name text NOT NULL,
    queue_name text NOT NULL DEFAULT 'default',
    args jsonb NOT NULL DEFAULT '[]',
    priority integer NOT NULL DEFAULT 0,
    run_after timestamptz NOT NULL DEFAULT now(),
    attempt integer NOT NULL DEFAULT 0,
    lease_owner text,
    lease_expires_at timestamptz,
    finished_at timestamptz
"""

LAYOUTS: dict[str, dict[str, str]] = {
    "jobs": {
        "schema": f"""
            CREATE TABLE jobs ({JOB_COLUMNS}, status text NOT NULL DEFAULT 'pending') WITH (fillfactor = 90);
            CREATE INDEX jobs_due ON jobs (priority DESC, run_after, id) WHERE status = 'pending';
            CREATE INDEX jobs_running ON jobs (id) WHERE status = 'running';
            CREATE INDEX jobs_task ON jobs (task_name, id);
        """,
        "enqueue": "INSERT INTO jobs (task_name, args) VALUES ('t', %s) RETURNING id",
        "claim": """
            UPDATE jobs SET status = 'running', attempt = attempt + 1, lease_owner = 'w',
                   lease_expires_at = now() + interval '30 s'
            WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND run_after <= now()
                         ORDER BY priority DESC, run_after, id LIMIT %s FOR UPDATE SKIP LOCKED)
            RETURNING id""",
        "finish": """UPDATE jobs SET status = 'done', finished_at = now(), lease_owner = NULL,
                     lease_expires_at = NULL WHERE id = ANY(%s) AND lease_owner = 'w'""",
    },
    "due table": {
        "schema": f"""
            CREATE TABLE jobs ({JOB_COLUMNS}, status text NOT NULL DEFAULT 'pending') WITH (fillfactor = 70);
            CREATE INDEX jobs_task ON jobs (task_name, id);
            CREATE TABLE due (id bigint PRIMARY KEY, priority integer NOT NULL, run_after timestamptz NOT NULL);
            CREATE INDEX due_order ON due (priority DESC, run_after, id);
        """,
        "enqueue": """WITH job AS (INSERT INTO jobs (task_name, args) VALUES ('t', %s)
                                   RETURNING id, priority, run_after)
                      INSERT INTO due SELECT id, priority, run_after FROM job RETURNING id""",
        "claim": """
            WITH taken AS (
                DELETE FROM due WHERE id IN (SELECT id FROM due WHERE run_after <= now()
                                             ORDER BY priority DESC, run_after, id LIMIT %s FOR UPDATE SKIP LOCKED)
                RETURNING id)
            UPDATE jobs SET status = 'running', attempt = attempt + 1, lease_owner = 'w',
                   lease_expires_at = now() + interval '30 s'
            FROM taken WHERE jobs.id = taken.id RETURNING jobs.id""",
        "finish": """UPDATE jobs SET status = 'done', finished_at = now(), lease_owner = NULL,
                     lease_expires_at = NULL WHERE id = ANY(%s) AND lease_owner = 'w'""",
    },
}
LAYOUTS["rotated"] = {
    "schema": f"""
        CREATE TABLE jobs ({JOB_COLUMNS}, status text NOT NULL DEFAULT 'pending') WITH (fillfactor = 70);
        CREATE INDEX jobs_task ON jobs (task_name, id);
        CREATE TABLE generation (current integer NOT NULL);
        INSERT INTO generation VALUES (0);
        CREATE TABLE due (id bigint NOT NULL, priority integer NOT NULL, run_after timestamptz NOT NULL,
                          generation integer NOT NULL) PARTITION BY LIST (generation);
        CREATE TABLE due_0 PARTITION OF due FOR VALUES IN (0);
        CREATE TABLE due_1 PARTITION OF due FOR VALUES IN (1);
        CREATE TABLE due_2 PARTITION OF due FOR VALUES IN (2);
        CREATE INDEX due_order ON due (priority DESC, run_after, id);
    """,
    "enqueue": """WITH job AS (INSERT INTO jobs (task_name, args) VALUES ('t', %s) RETURNING id, priority, run_after)
                  INSERT INTO due SELECT id, priority, run_after, (SELECT current FROM generation) FROM job
                  RETURNING id""",
    "claim": """
        WITH taken AS (
            DELETE FROM due WHERE (generation, id) IN (
                SELECT generation, id FROM due WHERE run_after <= now()
                ORDER BY priority DESC, run_after, id LIMIT %s FOR UPDATE SKIP LOCKED)
            RETURNING id)
        UPDATE jobs SET status = 'running', attempt = attempt + 1, lease_owner = 'w',
               lease_expires_at = now() + interval '30 s'
        FROM taken WHERE jobs.id = taken.id RETURNING jobs.id""",
    "finish": LAYOUTS["due table"]["finish"],
}


def rotate(connection: psycopg.Connection) -> None:
    """The next generation takes new jobs; the one after it (the oldest) is truncated if empty."""
    current = connection.execute("UPDATE generation SET current = (current + 1) % 3 RETURNING current").fetchone()[0]
    oldest = (current + 1) % 3
    with connection.transaction():
        connection.execute("SET LOCAL lock_timeout = '100ms'")
        try:
            with connection.transaction():
                if connection.execute(f"SELECT NOT EXISTS (SELECT FROM due_{oldest})").fetchone()[0]:
                    connection.execute(f"TRUNCATE due_{oldest}")
        except psycopg.errors.LockNotAvailable:
            pass  # claims in flight: the next rotation tries again


@contextmanager
def fresh_schema() -> Iterator[str]:
    name = f"layout_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(URL, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
        try:
            yield name
        finally:
            admin.execute(f"DROP SCHEMA {name} CASCADE")


@contextmanager
def horizon_held(hold: bool) -> Iterator[None]:
    """Another session's REPEATABLE READ transaction, its snapshot taken, open for the block."""
    if not hold:
        yield
        return
    with psycopg.connect(URL, autocommit=True) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT txid_current()")  # an xid and a snapshot: nothing newer is removable
        try:
            yield
        finally:
            holder.execute("ROLLBACK")


def relations_bytes(connection: psycopg.Connection, schema: str) -> int:
    return connection.execute(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p')", (schema,)).fetchone()[0]


def dead_tuples(connection: psycopg.Connection, schema: str) -> int:
    connection.execute("SELECT pg_stat_force_next_flush()")
    return connection.execute("SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = %s",
                              (schema,)).fetchone()[0]


def run(layout: str, jobs: int, batch: int, windows: int, rotate_every: int, hold: bool) -> dict:
    queries = LAYOUTS[layout]
    with fresh_schema() as schema:
        url = f"{URL}{'&' if '?' in URL else '?'}options=-csearch_path%3D{schema}"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(queries["schema"])
            before = relations_bytes(connection, schema)
            claim_ms: list[float] = []
            with horizon_held(hold):
                started = time.perf_counter()
                for done in range(0, jobs, batch):
                    with connection.transaction():
                        for _ in range(batch):
                            connection.execute(queries["enqueue"], ('[1]',))
                    began = time.perf_counter()
                    ids = [row[0] for row in connection.execute(queries["claim"], (batch,))]
                    claim_ms.append((time.perf_counter() - began) * 1000)
                    connection.execute(queries["finish"], (ids,))
                    if layout == "rotated" and (done + batch) % rotate_every == 0:
                        rotate(connection)
                elapsed = time.perf_counter() - started
                dead = dead_tuples(connection, schema)
                grown = relations_bytes(connection, schema) - before
    per_window = len(claim_ms) // windows
    return {
        "layout": layout, "held": hold, "jobs_per_s": jobs / elapsed, "dead_per_job": dead / jobs,
        "bytes_per_job": grown / jobs,
        "windows": [(statistics.median(part), sorted(part)[int(len(part) * 0.99)])
                    for part in (claim_ms[i * per_window:(i + 1) * per_window] for i in range(windows))],
    }


def render(results: list[dict], arguments: argparse.Namespace) -> str:
    base = {result["held"]: result for result in results if result["layout"] == "jobs"}
    lines = [
        f"## {TITLE}", "",
        f"Why migration 0018 gave PostgreSQL's plain claim a due set of its own, in generations. Each layout in a "
        f"schema of its own on the local server, autovacuum on for the run; {arguments.jobs:,} jobs, enqueued one "
        f"statement each, claimed {arguments.batch} at a time (oldest first, FOR UPDATE SKIP LOCKED) and finished, "
        f"first with nothing else open (free), then with another session's REPEATABLE READ transaction open "
        f"throughout (held); the rotated layout truncates its oldest generation every {arguments.rotate:,} jobs. "
        f"{datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, {os.cpu_count()} cores, leased at `{leased_commit()}`. "
        "The claim's p50 and p99 are per sixth of the run, first and last.", "",
        "```sh", "python bench/held_horizon_layouts.py", "```", "",
        "| horizon | layout | jobs/s | × | dead rows per job | bytes per job | claim p50 first → last (ms) "
        "| claim p99 first → last (ms) | last claim p50 × |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        ref = base[result["held"]]
        (p50_first, p99_first), (p50_last, p99_last) = result["windows"][0], result["windows"][-1]
        lines.append(
            f"| {'held' if result['held'] else 'free'} | {result['layout']} | {result['jobs_per_s']:,.0f} "
            f"| {result['jobs_per_s'] / ref['jobs_per_s']:.2f}× | {result['dead_per_job']:.2f} "
            f"| {result['bytes_per_job']:,.0f} | {p50_first:.2f} → {p50_last:.2f} | {p99_first:.2f} → {p99_last:.2f} "
            f"| {p50_last / ref['windows'][-1][0]:.2f}× |")
    lines += ["", "- **jobs**: leased's layout before 0018: the job's row is the due set (a partial index on pending "
              "jobs), and every claimed job leaves an entry at the head of that index. Under a held horizon no "
              "vacuum can remove it nor can the B-tree mark it dead, so each claim steps over every job claimed "
              "since the transaction began.",
              "- **due table**: a narrow table of due jobs, deleted from at the claim. Under a held horizon its "
              "index's head fills with the same dead entries, so it slows down the same way.",
              "- **rotated**: the due table in three generations (LIST partitions); the oldest, once its jobs are "
              "claimed, is truncated, which removes its dead rows and index entries whatever any snapshot holds "
              "(PgQ's way). Its claims stay flat under the held horizon. Migration 0018 is this layout, kept by "
              "triggers on leased_jobs."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--rotate", type=int, default=5_000, help="jobs per generation (rotated)")
    arguments = parser.parse_args()
    results = []
    with autovacuum_on():
        for hold in (False, True):
            for layout in LAYOUTS:
                result = run(layout, arguments.jobs, arguments.batch, arguments.windows, arguments.rotate, hold)
                results.append(result)
                claims = "  ".join(f"{p50:.2f}/{p99:.2f}" for p50, p99 in result["windows"])
                print(f"{'held' if hold else 'free'}  {layout:9}  {result['jobs_per_s']:7.0f} jobs/s  "
                      f"dead/job {result['dead_per_job']:.2f}  bytes/job {result['bytes_per_job']:.0f}  "
                      f"claim p50/p99 ms by window: {claims}", flush=True)
    text = render(results, arguments)
    report.publish(TITLE, SECTION, text)
    print()
    print(text)


if __name__ == "__main__":
    main()
