#!/usr/bin/env python3
"""What a transaction left open elsewhere costs leased on PostgreSQL, with autovacuum on.

    PYTHONPATH=src .venv/bin/python bench/long_transaction.py                 # 60 s, 10 min open, 120 s
    PYTHONPATH=src .venv/bin/python bench/long_transaction.py --open-minutes 3 --rate 500
    PYTHONPATH=src .venv/bin/python bench/long_transaction.py --bytes-only    # bytes per finished job
    PYTHONPATH=src .venv/bin/python bench/long_transaction.py --keep --earlier OLD/bench/long_transaction_results.json \
        --earlier-label "before migration 0018"   # beside another checkout's soak, run there first

On a fresh database, with autovacuum on for the run (common.autovacuum_on; put back after), a
producer thread offers a steady `--rate` of no-op jobs (a batch every 20 ms, one enqueue_many
each) to one `leased worker` process (concurrency 10). Three phases: before (`--before` s); open:
a second connection runs `BEGIN; SELECT txid_current();` and stays idle in transaction for
`--open-minutes`, holding back the horizon below which vacuum may remove dead rows; after
(`--after` s), once it has rolled back. Every 10 s window: jobs finished per second, pickup latency
(the attempt's start minus the job's created_at, both by the database's clock) p50/p99, and for
leased_jobs, leased_attempts and leased_throughput n_dead_tup, n_live_tup, updates and HOT
updates (pg_stat_user_tables) and pg_total_relation_size. At each phase's end pgstattuple's
dead-tuple percentage of each table.

Bytes per finished job: on another fresh database, `--bytes-jobs` jobs enqueued and drained by a
worker (real rows: arguments, result, one attempt each), then VACUUM: the table and each index of
leased_jobs, and of leased_attempts, divided by the jobs.

Writes bench/long_transaction_results.json and the section "A transaction left open" in
docs/benchmarks.md (bench/long_transaction.md too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

import report
from common import BENCH, Workers, autovacuum_on, drop_database, leased_commit, recreate_database, spawn, venv_bin
from leased import Leased

RESULTS = BENCH / "long_transaction_results.json"
SECTION = BENCH / "long_transaction.md"
NOTES = BENCH / "long_transaction_notes.md"  # hand-written: what the figures show
TITLE = "A transaction left open"
DATABASE = "bench_leased_long_transaction"
TABLES = ("leased_jobs", "leased_attempts", "leased_throughput")
WINDOW = 10.0  # seconds
TICK = 0.02  # the producer's batch interval
HOLDER_NAME = "bench-long-transaction"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def producer_app(url: str) -> tuple[Leased, object]:
    app = Leased(url)
    task = app.task(name="bench.noop")(lambda n: None)
    _ = app.backend  # migrated now
    return app, task


class Producer(threading.Thread):
    """Offers `rate` jobs a second in a batch every TICK, catching up when a batch was late."""

    def __init__(self, task, rate: float) -> None:
        super().__init__(daemon=True)
        self.task, self.rate, self.offered = task, rate, 0
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - started) * self.rate) - self.offered
            if due > 0:
                self.task.enqueue_many([(n,) for n in range(self.offered, self.offered + due)])
                self.offered += due
            self.stopping.wait(TICK)


def start_worker(url: str, tag: str) -> Workers:
    log_path = BENCH / "work" / f"long-transaction-{tag}.log"
    process = spawn([venv_bin("leased"), "worker", "peers.leased:app", "--concurrency", "10", "--log-level", "warning"],
                    {"BENCH_LEASED_URL": url}, log_path)
    return Workers([process], [log_path])


TABLE_STATS = """
SELECT relname, n_dead_tup, n_live_tup, n_tup_upd, n_tup_hot_upd, n_tup_ins, n_tup_del,
       autovacuum_count, autoanalyze_count, pg_total_relation_size(relid) AS total_bytes
FROM pg_stat_user_tables WHERE relname = ANY(%s)
"""


def table_stats(connection) -> dict:
    connection.execute("SELECT pg_stat_clear_snapshot()")
    return {row["relname"]: {k: v for k, v in row.items() if k != "relname"}
            for row in connection.execute(TABLE_STATS, (list(TABLES),))}


def dead_percent(connection) -> dict:
    """pgstattuple's dead_tuple_percent per table (it reads the whole table: phase ends only)."""
    return {table: connection.execute("SELECT dead_tuple_percent, free_percent FROM pgstattuple(%s)",
                                      (table,)).fetchone() for table in TABLES}


def window_figures(connection, since: datetime) -> list[dict]:
    """Per WINDOW of finish time since `since`: jobs finished per second, pickup p50/p99 (ms)."""
    rows = connection.execute(
        """SELECT floor(extract(epoch FROM a.finished_at - %(since)s) / %(w)s)::int AS w, count(*) AS n,
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - j.created_at))
                      * 1000 AS p50,
                  percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - j.created_at))
                      * 1000 AS p99
           FROM leased_attempts AS a JOIN leased_jobs AS j ON j.id = a.job_id
           WHERE a.finished_at >= %(since)s GROUP BY 1 ORDER BY 1""", {"since": since, "w": WINDOW}).fetchall()
    return [{"window": row["w"], "rate": row["n"] / WINDOW, "p50": row["p50"], "p99": row["p99"]} for row in rows]


def soak(options) -> dict:
    url = recreate_database(DATABASE)
    app, task = producer_app(url)
    monitor = psycopg.connect(url, autocommit=True, row_factory=dict_row)
    monitor.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    workers = start_worker(url, "soak")
    producer = Producer(task, options.rate)
    holder = None
    samples: list[dict] = []
    phases: list[dict] = []
    try:
        since = monitor.execute("SELECT now() AS t").fetchone()["t"]
        producer.start()
        plan = [("before", options.before), ("open", options.open_minutes * 60), ("after", options.after)]
        began = time.monotonic()
        for name, seconds in plan:
            if name == "open":
                holder = psycopg.connect(url, application_name=HOLDER_NAME)
                xid = holder.execute("SELECT txid_current()").fetchone()[0]  # idle in transaction from here
                log(f"transaction {xid} open, idle in transaction for {seconds:g} s")
            if name == "after" and holder is not None:
                holder.rollback()
                holder.close()
                holder = None
                log("transaction ended")
            start = time.monotonic()
            phase_start = monitor.execute("SELECT now() AS t").fetchone()["t"]
            while time.monotonic() - start < seconds:
                time.sleep(max(0.0, WINDOW - (time.monotonic() - began) % WINDOW))
                workers.check_alive()
                samples.append({"t": round(time.monotonic() - began, 1), "phase": name, "tables": table_stats(monitor)})
                jobs = samples[-1]["tables"]["leased_jobs"]
                log(f"  {name} t={samples[-1]['t']:.0f}s jobs dead {jobs['n_dead_tup']:,} "
                    f"size {jobs['total_bytes'] / 1e6:.1f} MB, offered {producer.offered:,}")
            phases.append({"phase": name, "seconds": seconds, "started_at": phase_start.isoformat(),
                           "ended_at": monitor.execute("SELECT now() AS t").fetchone()["t"].isoformat(),
                           "tables": table_stats(monitor), "pgstattuple": dead_percent(monitor)})
        producer.stopping.set()
        producer.join()
        windows = window_figures(monitor, since)
        for phase in phases:  # per phase, from its windows' finishes
            phase.update(phase_figures(monitor, datetime.fromisoformat(phase["started_at"]),
                                       datetime.fromisoformat(phase["ended_at"])))
        return {"offered": producer.offered, "samples": samples, "windows": windows, "phases": phases,
                "leased_commit": leased_commit()}
    finally:
        producer.stopping.set()
        if holder is not None:
            holder.close()
        workers.stop()
        monitor.close()
        app.close()
        drop_database(DATABASE)


def phase_figures(connection, start: datetime, end: datetime) -> dict:
    row = connection.execute(
        """SELECT count(*) AS n,
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - j.created_at))
                      * 1000 AS p50,
                  percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - j.created_at))
                      * 1000 AS p99
           FROM leased_attempts AS a JOIN leased_jobs AS j ON j.id = a.job_id
           WHERE a.finished_at >= %s AND a.finished_at < %s""", (start, end)).fetchone()
    return {"finished": row["n"], "rate": row["n"] / (end - start).total_seconds(),
            "p50": row["p50"], "p99": row["p99"]}


SIZES = """
SELECT c.relname, pg_relation_size(c.oid) AS bytes, c.relkind
FROM pg_class AS c
WHERE c.relname IN ('leased_jobs', 'leased_attempts')
   OR c.oid IN (SELECT indexrelid FROM pg_index
                WHERE indrelid IN ('leased_jobs'::regclass, 'leased_attempts'::regclass))
   OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE relname IN ('leased_jobs', 'leased_attempts'))
ORDER BY c.relname
"""


def bytes_per_job(jobs: int) -> dict:
    """Finished jobs as a worker leaves them, vacuumed: bytes per job of each relation."""
    url = recreate_database(DATABASE)
    app, task = producer_app(url)
    workers = start_worker(url, "bytes")
    try:
        for start in range(0, jobs, 5_000):
            task.enqueue_many([(n,) for n in range(start, min(jobs, start + 5_000))])
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as connection:
            while connection.execute("SELECT count(*) AS n FROM leased_attempts").fetchone()["n"] < jobs:
                workers.check_alive()
                time.sleep(0.5)
            workers.stop()
            connection.execute("VACUUM ANALYZE leased_jobs")
            connection.execute("VACUUM ANALYZE leased_attempts")
            relations = {row["relname"]: row["bytes"] / jobs for row in connection.execute(SIZES)}
            connection.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            live = {table: connection.execute("SELECT tuple_len FROM pgstattuple(%s)", (table,)).fetchone()["tuple_len"]
                    / jobs for table in ("leased_jobs", "leased_attempts")}
        return {"jobs": jobs, "bytes_per_job": relations, "live_row_bytes_per_job": live}
    finally:
        workers.stop()
        app.close()
        drop_database(DATABASE)


# Before and after migration 0012 (renewals HOT), side by side in one run: the same measurements on
# a schema migrated up to 0011 and on the current one, alternating, on fresh databases.
COMPARED = "bench_leased_long_transaction_schemas"
# The code is the same for both (it refuses a schema older than itself): "0011" is the current
# schema with migration 0012's two changes undone, the lease index on the expiry and fillfactor 100.
UNDO_0012 = ("DROP INDEX leased_jobs_leases",
             "CREATE INDEX leased_jobs_leases ON leased_jobs (lease_expires_at) WHERE status = 'running'",
             "ALTER TABLE leased_jobs RESET (fillfactor)")
SCHEMAS = ("0011", "current")


def schema_database(schema: str) -> tuple[str, Leased, object]:
    """A fresh database with the schema `schema` names, and a producer app on it."""
    url = recreate_database(COMPARED)
    app = Leased(url)
    task = app.task(name="bench.noop")(lambda n: None)
    app.task(name="bench.nap")(lambda n, seconds: time.sleep(seconds))
    app.migrate()
    if schema == "0011":
        with psycopg.connect(url, autocommit=True) as connection:
            for statement in UNDO_0012:
                connection.execute(statement)
    return url, app, task


def relation_sizes(connection) -> dict:
    return {row["relname"]: row["bytes"] for row in connection.execute(SIZES)}


def filled_bytes(schema: str, jobs: int) -> dict:
    """The scale bench's fill (prune_under_load.add_history: done jobs with an attempt each), VACUUM
    ANALYZE: bytes per job of each relation."""
    from prune_under_load import add_history

    url, app, _ = schema_database(schema)
    try:
        add_history(app, jobs, days_old=1)
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as connection:
            return {name: size / jobs for name, size in relation_sizes(connection).items()}
    finally:
        app.close()
        drop_database(COMPARED)


def renewals(schema: str, jobs: int, hold: bool) -> dict:
    """`jobs` jobs of 3 s each with a 1 s lease (renewed every third of it) on one worker with
    concurrency 50, with (`hold`) another transaction open throughout: updates, HOT updates and dead
    row versions of leased_jobs, and its growth, per job."""
    url, app, _ = schema_database(schema)
    holder = None
    workers = None
    try:
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as connection:
            nap = app.get_task("bench.nap").using(lease=1.0)
            nap.enqueue_many([(n, 3.0) for n in range(jobs)])
            before = relation_sizes(connection)
            if hold:
                holder = psycopg.connect(url, application_name=HOLDER_NAME)
                holder.execute("SELECT txid_current()")
            workers = Workers([spawn([venv_bin("leased"), "worker", "peers.leased:app", "--concurrency", "50",
                                      "--log-level", "warning"], {"BENCH_LEASED_URL": url},
                                     BENCH / "work" / "long-transaction-renewals.log")],
                              [BENCH / "work" / "long-transaction-renewals.log"])
            started = time.monotonic()
            while connection.execute("SELECT count(*) AS n FROM leased_attempts").fetchone()["n"] < jobs:
                workers.check_alive()
                if time.monotonic() - started > 600:
                    raise RuntimeError("the renewal jobs did not finish in 10 minutes")
                time.sleep(0.5)
            seconds = time.monotonic() - started
            stats = table_stats(connection)["leased_jobs"]
            after = relation_sizes(connection)
            grown = {name: (after[name] - before.get(name, 0)) / jobs for name in after}
        return {"jobs": jobs, "seconds": seconds, "updates_per_job": stats["n_tup_upd"] / jobs,
                "hot_share": stats["n_tup_hot_upd"] / stats["n_tup_upd"] if stats["n_tup_upd"] else 0.0,
                "dead_per_job": stats["n_dead_tup"] / jobs, "grown_bytes_per_job": grown}
    finally:
        if holder is not None:
            holder.close()
        if workers is not None:
            workers.stop()
        app.close()
        drop_database(COMPARED)


def drain_rate(schema: str, jobs: int) -> float:
    """`jobs` no-op jobs queued in bulk, drained by one worker (concurrency 10): jobs/s from the
    first completion to the last (common.wait_for_done)."""
    from common import wait_for_done

    url, app, task = schema_database(schema)
    workers = None
    try:
        for start in range(0, jobs, 5_000):
            task.enqueue_many([(n,) for n in range(start, min(jobs, start + 5_000))])
        with psycopg.connect(url, autocommit=True, row_factory=dict_row) as connection:
            connection.execute("VACUUM ANALYZE leased_jobs")
            workers = start_worker(url, "drain")
            count = lambda: connection.execute(
                "SELECT count(*) AS n FROM leased_jobs WHERE status = 'done'").fetchone()["n"]
            return wait_for_done(count, jobs, 300, workers).rate
    finally:
        if workers is not None:
            workers.stop()
        app.close()
        drop_database(COMPARED)


def compare(options) -> dict:
    out: dict = {schema: {"drain": []} for schema in SCHEMAS}
    for schema in SCHEMAS if not options.drains_only else ():
        out[schema]["filled_bytes"] = filled_bytes(schema, options.bytes_jobs)
        log(f"{schema}: filled bytes {json.dumps(out[schema]['filled_bytes'])}")
    for schema in SCHEMAS if not options.drains_only else ():
        out[schema]["renewals_held"] = renewals(schema, options.renewal_jobs, hold=True)
        out[schema]["renewals"] = renewals(schema, options.renewal_jobs, hold=False)
        log(f"{schema}: renewals {json.dumps(out[schema]['renewals_held'])} {json.dumps(out[schema]['renewals'])}")
    for _ in range(options.drain_repeats):
        for schema in SCHEMAS:
            out[schema]["drain"].append(drain_rate(schema, options.drain_jobs))
            log(f"{schema}: drain {out[schema]['drain'][-1]:,.0f} jobs/s")
    return out


def render_compare(found: dict) -> list[str]:
    import statistics

    old, new = found["0011"], found["current"]
    lines = ["### Before and after migration 0012 (renewals HOT, fillfactor 90)", "",
             "The same measurements on the schema before 0012 (the current one with 0012's two changes undone) "
             "and on the current one, with the same code, on fresh databases in one run (drains alternating).", "",
             "| | up to 0011 | current | × |", "|---|---|---|---|"]

    def row(label: str, a: float, b: float, fmt: str = "{:,.0f}") -> None:
        lines.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {f'{b / a:.2f}×' if a else '–'} |")

    def total(sizes: dict, prefix: str) -> float:
        return sum(v for k, v in sizes.items() if k.startswith(prefix))

    for title, key in (("renewing jobs, another transaction open throughout", "renewals_held"),
                       ("renewing jobs, nothing else open", "renewals")):
        a, b = old[key], new[key]
        row(f"{title}: updates per job", a["updates_per_job"], b["updates_per_job"], "{:.1f}")
        row(f"{title}: HOT share of updates", a["hot_share"] * 100, b["hot_share"] * 100, "{:.0f} %")
        row(f"{title}: dead row versions per job", a["dead_per_job"], b["dead_per_job"], "{:.1f}")
        row(f"{title}: leased_jobs and indexes grown, bytes per job", total(a["grown_bytes_per_job"], "leased_jobs"),
            total(b["grown_bytes_per_job"], "leased_jobs"))
    fa, fb = old["filled_bytes"], new["filled_bytes"]
    row("finished job (scale fill, vacuumed): leased_jobs and its indexes, bytes", total(fa, "leased_jobs"),
        total(fb, "leased_jobs"))
    row("finished job: with its attempt record, bytes", total(fa, "leased_"), total(fb, "leased_"))
    row(f"drain, 1 worker, concurrency 10 (jobs/s, median of {len(old['drain'])})", statistics.median(old["drain"]),
        statistics.median(new["drain"]))
    lines += ["", f"Drains (jobs/s): up to 0011 {', '.join(f'{v:,.0f}' for v in old['drain'])}; current "
              f"{', '.join(f'{v:,.0f}' for v in new['drain'])}. Renewing jobs: {old['renewals']['jobs']:,} jobs of 3 s "
              "with a 1 s lease on one worker with concurrency 50.", ""]
    return lines


def phase_table(soak: dict) -> list[str]:
    """One row per phase: figures over the phase, and the tables at its end."""
    lines = ["| phase | finished/s | pickup p50 (ms) | pickup p99 (ms) | leased_jobs dead tuples | leased_jobs "
             "size (MB) | dead % (pgstattuple) | leased_attempts dead | size (MB) | leased_throughput dead "
             "% | jobs HOT updates |", "|---" * 11 + "|"]
    for phase in soak["phases"]:
        tables, dead = phase["tables"], phase["pgstattuple"]
        jobs, attempts = tables["leased_jobs"], tables["leased_attempts"]
        hot = jobs["n_tup_hot_upd"] / jobs["n_tup_upd"] if jobs["n_tup_upd"] else 0
        lines.append(f"| {phase['phase']} | {phase['rate']:,.0f} | {_ms(phase['p50'])} | {_ms(phase['p99'])} | "
                     f"{jobs['n_dead_tup']:,} | {jobs['total_bytes'] / 1e6:.1f} | "
                     f"{dead['leased_jobs']['dead_tuple_percent']:.0f} | {attempts['n_dead_tup']:,} | "
                     f"{attempts['total_bytes'] / 1e6:.1f} | "
                     f"{dead['leased_throughput']['dead_tuple_percent']:.0f} | {hot:.0%} |")
    return lines


def _ms(value) -> str:
    return "–" if value is None else f"{value:.1f}"


def render_earlier(earlier: dict, soak: dict | None) -> list[str]:
    """Another checkout's soak (--earlier), and its windows beside this one's."""
    lines = [f"The same soak on an earlier leased ({earlier['label']}, at `{earlier['leased_commit']}`), "
             "run just before on the same machine:", "", *phase_table(earlier), ""]
    if soak:
        lines += [f"Pickup per 10 s window, {earlier['label']} and now (p50 / p99 ms):", "",
                  "| t (s) | phase | earlier p50 | earlier p99 | now p50 | now p99 |", "|---|---|---|---|---|---|"]
        now = {window["window"]: window for window in soak["windows"]}
        phases = {round(sample["t"] / WINDOW) - 1: sample["phase"] for sample in soak["samples"]}
        for window in earlier["windows"]:
            if window["window"] % 3 or window["window"] not in now:
                continue
            mine = now[window["window"]]
            lines.append(f"| {(window['window'] + 1) * WINDOW:.0f} | {phases.get(window['window'], '')} | "
                         f"{_ms(window['p50'])} | {_ms(window['p99'])} | {_ms(mine['p50'])} | {_ms(mine['p99'])} |")
        lines.append("")
    return lines


def render(results: dict) -> str:
    env = results["environment"]
    lines = [f"## {TITLE}", "",
             f"leased on PostgreSQL with **autovacuum on** (bench/common.py's autovacuum_on, put back after), "
             f"{env['rate']:g} jobs/s offered by a producer (enqueue_many every 20 ms) to one `leased worker` "
             f"(concurrency 10), no-op jobs. Phases: before ({env['before']:g} s); open: another connection "
             f"`BEGIN; SELECT txid_current();` left idle in transaction for {env['open_minutes']:g} min; after "
             f"({env['after']:g} s). Pickup is the attempt's start minus the job's created_at (the database's "
             f"clock). {env['date']}, {env['machine']}, Python {env['python']}, leased at `{env['leased_commit']}`. "
             "**The machine was shared** with other engineers' tests and benchmarks: compare phases within the run.",
             "", "```sh", results["command"], "```", ""]
    if "soak" in results:
        lines += phase_table(results["soak"])
        lines += ["", "Table figures are at the phase's end (pg_stat_user_tables; dead % by pgstattuple); HOT is "
                  "the share of leased_jobs' updates so far that were HOT. Per 10 s window (time since the start, "
                  "finished/s, pickup p50 / p99 ms, leased_jobs dead tuples):", "",
                  "| t (s) | phase | finished/s | p50 | p99 | jobs dead |", "|---|---|---|---|---|---|"]
        samples = results["soak"]["samples"]
        for window in results["soak"]["windows"]:
            at = (window["window"] + 1) * WINDOW
            sample = min(samples, key=lambda s: abs(s["t"] - at)) if samples else None
            if sample is None or window["window"] % 3:  # every 30 s keeps the table readable
                continue
            lines.append(f"| {at:.0f} | {sample['phase']} | {window['rate']:,.0f} | {_ms(window['p50'])} | "
                         f"{_ms(window['p99'])} | {sample['tables']['leased_jobs']['n_dead_tup']:,} |")
        lines.append("")
    if "bytes" in results:
        sizes = results["bytes"]["bytes_per_job"]
        jobs_total = sum(v for k, v in sizes.items() if k.startswith("leased_jobs") or k.startswith("pg_toast"))
        attempts_total = sum(v for k, v in sizes.items() if k.startswith("leased_attempts"))
        measured = (f", leased at `{results['bytes']['leased_commit']}`, {results['bytes']['date']}"
                    if "leased_commit" in results["bytes"] else "")
        lines += [f"Bytes per finished job ({results['bytes']['jobs']:,} jobs drained by a worker, "
                  f"then VACUUM{measured}): "
                  f"**{jobs_total:,.0f} without its attempt record, {jobs_total + attempts_total:,.0f} with it**.", "",
                  "| relation | bytes per job |", "|---|---|"]
        lines += [f"| {name} | {value:,.0f} |" for name, value in sorted(sizes.items(), key=lambda kv: -kv[1])]
        live = results["bytes"].get("live_row_bytes_per_job", {})
        lines += ["", "The tables' files hold the space their dead row versions left (a job's row is written three "
                  "times); the live rows themselves (pgstattuple's tuple_len) are "
                  + ", ".join(f"{value:,.0f} bytes per job in {table}" for table, value in live.items()) + ".", ""]
    if "soak_before_0012" in results:
        earlier = results["soak_before_0012"]
        lines += [f"The same soak with the transaction open for {earlier.get('open_minutes', '?')} min, earlier the "
                  f"same day, on the schema before migration 0012 (leased at `{earlier['leased_commit']}`):", "",
                  *phase_table(earlier), ""]
    if "soak_earlier" in results:
        lines += render_earlier(results["soak_earlier"], results.get("soak"))
    if "compare" in results:
        lines += render_compare(results["compare"])
    if NOTES.exists():
        lines += [NOTES.read_text().strip(), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=500.0, help="jobs offered per second (default 500)")
    parser.add_argument("--before", type=float, default=60.0, help="seconds before the transaction opens")
    parser.add_argument("--open-minutes", type=float, default=10.0, help="minutes it stays open (default 10)")
    parser.add_argument("--after", type=float, default=120.0, help="seconds after it ends")
    parser.add_argument("--bytes-jobs", type=int, default=100_000, help="jobs for the bytes-per-job figure")
    parser.add_argument("--bytes-only", action="store_true", help="only the bytes per finished job")
    parser.add_argument("--compare", action="store_true", help="only migration 0012's before and after: bytes "
                        "per finished job, renewals, drain")
    parser.add_argument("--drains-only", action="store_true", help="with --compare: only the drains")
    parser.add_argument("--renewal-jobs", type=int, default=500)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--drain-repeats", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the saved results of the parts not run now")
    parser.add_argument("--earlier", metavar="RESULTS_JSON", help="show the soak of another checkout's results "
                        "file (its bench/long_transaction_results.json) beside this one's")
    parser.add_argument("--earlier-label", default="an earlier leased", help="what that checkout is, in words")
    parser.add_argument("--render", action="store_true", help="only re-write the report from the saved results")
    options = parser.parse_args()
    if options.render:
        results = json.loads(RESULTS.read_text())
    else:
        results = {"command": ("PYTHONPATH=src .venv/bin/python bench/long_transaction.py "
                               + shlex.join(sys.argv[1:])).strip(),
                   "environment": {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "rate": options.rate,
                                   "before": options.before, "open_minutes": options.open_minutes,
                                   "after": options.after, "python": platform.python_version(),
                                   "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
                                   "leased_commit": leased_commit()}}
        if options.keep and RESULTS.exists():  # the heading describes the soak: a run without one keeps its
            saved = json.loads(RESULTS.read_text())
            ran_soak = not (options.compare or options.bytes_only)
            results = {**saved, "command": f"{saved['command']}\n{results['command']}",
                       "environment": results["environment"] if ran_soak else saved["environment"]}
        with autovacuum_on(log):
            if options.compare:
                results["compare"] = compare(options)
            else:
                results["bytes"] = {**bytes_per_job(options.bytes_jobs), "leased_commit": leased_commit(),
                                    "date": datetime.now(UTC).strftime("%Y-%m-%d")}
                log(f"bytes per job: {json.dumps(results['bytes'])}")
                if not options.bytes_only:
                    results["soak"] = soak(options)
    if options.earlier:
        earlier = json.loads(Path(options.earlier).read_text())["soak"]
        results["soak_earlier"] = {**earlier, "label": options.earlier_label}
    if not options.render:
        RESULTS.write_text(json.dumps(results, indent=1, default=str))
    text = render(results)
    report.publish(TITLE, SECTION, text)
    print(text)


if __name__ == "__main__":
    main()
