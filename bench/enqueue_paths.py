#!/usr/bin/env python3
"""Bulk enqueue on PostgreSQL, path by path: what a batch of jobs costs as SQL, and what each index costs.

    PYTHONPATH=src /work/main/.venv/bin/python bench/enqueue_paths.py     # 20,000 jobs, batches of 1,000
    PYTHONPATH=src /work/main/.venv/bin/python bench/enqueue_paths.py --rounds 3 --no-indexes

Each path writes the same 20,000 plain jobs (task `noop`, args [n]) in batches of 1,000, each batch
its own transaction, as bench/run.py's workload 2 sends them through Task.enqueue_many. The paths
run interleaved in every round (A, B, C, ..., A, B, C, ...) on one scratch schema, emptied
(TRUNCATE) before each. Each line gives the median round in jobs/s, and the median CPU per job of
this process and of the server's processes for our connections (read from /proc: the server must
be on this host); the CPU figures move less than the wall clock on a loaded machine.

- insert_jobs: the backend's named query (one jsonb array per batch, INSERT ... SELECT ... RETURNING);
- insert_jobs_no_conflict: the same without ON CONFLICT (no speculative insertion per row);
- unnest: INSERT ... SELECT FROM unnest(one array per column) RETURNING, pgqueuer's shape;
- copy_text, copy_binary: ids reserved from the identity's sequence (COPY writes an identity
  column's given values even when it is GENERATED ALWAYS), then COPY with psycopg 3's cursor.copy
  (write_row), then one pg_notify;
- enqueue_many: end to end, Task.enqueue_many through leased (whichever path the checkout takes);
- raw_insert_select: the floor, the same rows made by the server (generate_series), one
  INSERT ... SELECT per batch, no client work at all.
Every path but enqueue_many builds the NewJobs as enqueue_many would, and none builds Jobs.

Then the Python of enqueue_many per job, and, unless --no-indexes: insert_jobs (or --index-path)
with each index that a plain job enters dropped in turn, and with all but the primary key dropped
(on the same schema, re-created afterwards), against all of them, interleaved the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg.types.json import Json

from leased import Leased

URL = "postgresql://postgres@127.0.0.1:5432/test"
COLUMNS = ("id, task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds, run_after, created_at, "
           "idempotency_key, timeout_seconds, concurrency_key, key_concurrency, key_rate_count, key_rate_seconds")
BINARY_TYPES = ["int8", "text", "text", "json", "json", "int4", "int4", "float8", "timestamptz", "timestamptz",
                "text", "float8", "text", "int4", "int4", "float8"]
UNNEST = """
INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                         run_after, created_at)
SELECT t, q, a::json, k::json, p, m, l, leased_now(), leased_now()
FROM unnest(%(t)s::text[], %(q)s::text[], %(a)s::text[], %(k)s::text[], %(p)s::int[], %(m)s::int[],
            %(l)s::float8[]) AS given (t, q, a, k, p, m, l)
RETURNING id, run_after, created_at, idempotency_key
"""

RAW_INSERT_SELECT = """
INSERT INTO leased_jobs (task_name, queue_name, args, kwargs, priority, max_attempts, lease_seconds,
                         run_after, created_at)
SELECT 'noop', 'default', json_build_array(n), '{}'::json, 0, 3, 300, leased_now(), leased_now()
FROM generate_series(%s::int, %s::int) AS n
"""


def noop(n: int) -> None:
    pass


def batches(jobs: int, size: int) -> list[list[int]]:
    return [list(range(start, min(start + size, jobs))) for start in range(0, jobs, size)]


class Paths:
    def __init__(self, url: str, app: Leased):
        self.connection = psycopg.connect(url, autocommit=True)
        self.app = app
        self.task = app.get_task("noop")
        from leased.backends.postgres.backend import QUERIES
        self.queries = QUERIES
        self.new_jobs = self.task.using()._new_jobs  # the NewJob values enqueue_many would send

    def _jobs(self, numbers):
        return self.new_jobs(((n,), {}) for n in numbers)

    def insert_jobs(self, numbers) -> None:
        from leased.backends.sql.enqueue import jobs_json
        jobs = self._jobs(numbers)
        with self.connection.transaction():
            self.connection.execute(self.queries["insert_jobs"],
                                    {"jobs": jobs_json(jobs, lambda t: t.isoformat())}).fetchall()

    def insert_jobs_no_conflict(self, numbers) -> None:
        """insert_jobs without ON CONFLICT: what the speculative insertion costs for jobs without keys."""
        from leased.backends.sql.enqueue import jobs_json
        jobs = self._jobs(numbers)
        query = self.queries["insert_jobs"].replace(
            "ON CONFLICT (idempotency_key) WHERE status = 'pending' AND attempt = 0 AND idempotency_key IS NOT NULL\n"
            "    DO NOTHING\n", "")
        assert query != self.queries["insert_jobs"]
        with self.connection.transaction():
            self.connection.execute(query, {"jobs": jobs_json(jobs, lambda t: t.isoformat())}).fetchall()

    def unnest(self, numbers) -> None:
        jobs = self._jobs(numbers)
        with self.connection.transaction():
            self.connection.execute(UNNEST, {
                "t": [j.task_name for j in jobs], "q": [j.queue_name for j in jobs], "a": [j.args_json for j in jobs],
                "k": [j.kwargs_json for j in jobs], "p": [j.priority for j in jobs],
                "m": [j.max_attempts for j in jobs], "l": [j.lease_seconds for j in jobs]}).fetchall()
            self.connection.execute("SELECT pg_notify(left('leased.' || current_schema(), 63), 'default')")

    def _copy(self, numbers, binary: bool) -> None:
        jobs = self._jobs(numbers)
        with self.connection.transaction():
            ids, now = self.connection.execute(
                "SELECT array_agg(nextval(pg_get_serial_sequence('leased_jobs', 'id'))), leased_now() "
                "FROM generate_series(1, %s)", (len(jobs),)).fetchone()
            with self.connection.cursor() as cursor:
                binary_option = " (FORMAT BINARY)" if binary else ""
                with cursor.copy(f"COPY leased_jobs ({COLUMNS}) FROM STDIN" + binary_option) as copy:
                    if binary:
                        copy.set_types(BINARY_TYPES)
                    for job_id, job in zip(ids, jobs, strict=True):
                        run_after = job.run_at or now + timedelta(seconds=job.delay_seconds)
                        args, kwargs = (Json(job.args_json, dumps=str), Json(job.kwargs_json, dumps=str)) if binary \
                            else (job.args_json, job.kwargs_json)
                        copy.write_row((job_id, job.task_name, job.queue_name, args, kwargs, job.priority,
                                        job.max_attempts, job.lease_seconds, run_after, now, job.idempotency_key,
                                        job.timeout_seconds, job.concurrency_key, job.key_concurrency,
                                        job.key_rate_count, job.key_rate_seconds))
            self.connection.execute("SELECT pg_notify(left('leased.' || current_schema(), 63), 'default')")

    def copy_text(self, numbers) -> None:
        self._copy(numbers, binary=False)

    def copy_binary(self, numbers) -> None:
        self._copy(numbers, binary=True)

    def enqueue_many(self, numbers) -> None:
        self.task.enqueue_many([(n,) for n in numbers])

    def raw_insert_select(self, numbers) -> None:
        """The floor: the same rows made by the server itself (no client, no parameters), one
        INSERT ... SELECT per batch into leased's own table."""
        with self.connection.transaction():
            self.connection.execute(RAW_INSERT_SELECT, (numbers[0], numbers[-1]))


def server_ticks(connection, application_name: str) -> int:
    """CPU ticks used so far by the server processes of our connections (same host: /proc)."""
    pids = [pid for pid, in connection.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (application_name,)).fetchall()]
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def timed(path, parts, connection, application_name: str) -> tuple[float, float, float]:
    """jobs/s, and microseconds of CPU per job in this process and in the server's processes: the
    CPU figures hold still on a loaded machine where the wall clock does not."""
    connection.execute("TRUNCATE leased_jobs CASCADE")
    jobs = sum(len(p) for p in parts)
    server = server_ticks(connection, application_name)
    started, cpu = time.perf_counter(), time.process_time()
    for part in parts:
        path(part)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    server = (server_ticks(connection, application_name) - server) / os.sysconf("SC_CLK_TCK")
    return jobs / seconds, cpu / jobs * 1e6, server / jobs * 1e6


def report(label: str, runs: list[tuple[float, float, float]], base: tuple[float, float] | None = None
           ) -> tuple[float, float]:
    rate = statistics.median(run[0] for run in runs)
    client = statistics.median(run[1] for run in runs)
    server = statistics.median(run[2] for run in runs)
    # An index's share of the batch: of the wall time, and of the server's CPU.
    share = "" if base is None else (f"   index's share: wall {1 - base[0] / rate:6.1%}, "
                                     f"server CPU {1 - server / base[1]:6.1%}")
    print(f"  {label:26} {rate:9,.0f} jobs/s   CPU/job: client {client:5.1f} us, server {server:5.1f} us{share}"
          f"   ({', '.join(f'{run[0]:,.0f}' for run in runs)})")
    return rate, server


def client_breakdown(paths: Paths, batch: int, repeats: int = 30) -> None:
    """The Python of enqueue_many per job, without the database: the NewJobs from the calls, the
    batch's JSON, and the Jobs built from the rows insert_jobs returns (one batch's, as psycopg
    loads them, read by the backend's own time conversion)."""
    from leased.backends.sql.enqueue import created_jobs, jobs_json
    numbers = list(range(batch))
    jobs = paths._jobs(numbers)
    with paths.connection.transaction():
        rows = paths.connection.execute(paths.queries["insert_jobs"],
                                        {"jobs": jobs_json(jobs, lambda t: t.isoformat())}).fetchall()
    to_time = paths.app.backend.dialect.to_time
    steps = {"NewJobs from the calls": lambda: paths._jobs(numbers),
             "the batch as JSON": lambda: jobs_json(jobs, lambda t: t.isoformat()),
             "Jobs from the rows": lambda: created_jobs(jobs, rows, to_time)}
    print(f"Python per job in enqueue_many, batches of {batch}, best of {repeats} (CPU):")
    for label, step in steps.items():
        best = float("inf")
        for _ in range(repeats):
            started = time.process_time()
            step()
            best = min(best, time.process_time() - started)
        print(f"  {label:26} {best / batch * 1e6:5.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-indexes", action="store_true")
    parser.add_argument("--index-path", default="insert_jobs", help="the path that measures what each index costs")
    parser.add_argument("--paths", default="insert_jobs,insert_jobs_no_conflict,unnest,copy_text,copy_binary,"
                                           "enqueue_many,raw_insert_select")
    options = parser.parse_args()
    schema = f"leased_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(URL, autocommit=True)
    admin.execute(f'CREATE SCHEMA "{schema}"')
    url = f"{URL}?application_name={schema}&options={quote(f'-csearch_path={schema}')}"
    app = Leased(url)
    app.task(name="noop")(noop)
    app.migrate()
    try:
        paths = Paths(url, app)
        parts = batches(options.jobs, options.batch)
        names = options.paths.split(",")
        runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
        for _ in range(options.rounds):
            for name in names:
                runs[name].append(timed(getattr(paths, name), parts, paths.connection, schema))
        print(f"{options.jobs} jobs in batches of {options.batch}, median of {options.rounds} interleaved rounds")
        for name in names:
            report(name, runs[name])
        client_breakdown(paths, options.batch)
        if not options.no_indexes:
            index_costs(paths, parts, options.rounds, schema, options.index_path)
    finally:
        app.close()
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def index_costs(paths: Paths, parts, rounds: int, application_name: str, path_name: str) -> None:
    """`path_name` with each index a plain job enters dropped in turn, against all of them."""
    connection = paths.connection
    definitions = dict(connection.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'leased_jobs'"
        " ORDER BY indexname").fetchall())
    # What a plain job (no key, no concurrency key, not finished) enters: an index with no predicate,
    # or one whose predicate the job just written meets.
    connection.execute("TRUNCATE leased_jobs CASCADE")
    paths.copy_binary(list(range(1)))
    entered = []
    for name, predicate in connection.execute(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'leased_jobs'::regclass ORDER BY 1").fetchall():
        if predicate is None or connection.execute(
                f"SELECT EXISTS (SELECT FROM leased_jobs WHERE {predicate})").fetchone()[0]:
            entered.append(name)
    droppable = [name for name in entered if not name.endswith("_pkey")]
    variants = ["all"] + [f"-{name}" for name in droppable] + ["only pkey"]
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for variant in variants:
            dropped = droppable if variant == "only pkey" else [] if variant == "all" else [variant[1:]]
            for name in dropped:
                connection.execute(f'DROP INDEX "{name}"')
            try:
                runs[variant].append(timed(getattr(paths, path_name), parts, connection, application_name))
            finally:
                for name in dropped:
                    connection.execute(definitions[name])
    print(f"indexes a plain job enters: {', '.join(entered)}")
    print(f"{path_name} with an index dropped, median of the rounds")
    base = report("all", runs["all"])
    for variant in variants[1:]:
        report(variant, runs[variant], base)


if __name__ == "__main__":
    main()
