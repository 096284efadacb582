#!/usr/bin/env python3
"""leased against its peers, side by side, in one command:

    python3.12 bench/run.py                       # everything: baselines, workloads 1-5, 3 repeats (~50 min)
    python3.12 bench/run.py --quick               # a smoke run: 2,000 jobs, 1 repeat
    python3.12 bench/run.py --only leased-pg,pgqueuer --workloads 1,2

It needs Python 3.12+ (oban-py and Django 6.1 do; where pyenv manages Pythons: PYENV_VERSION=3.12.1
python3.12), creates bench/.venv on first use (the peers from bench/requirements.txt, leased from
this checkout with its postgres, mariadb and web extras) and re-runs itself there. Needs PostgreSQL
(trust auth, user postgres) at 127.0.0.1:5432 with pgbench on the PATH, MariaDB at 127.0.0.1:3306
for leased-mariadb, and Redis at 127.0.0.1:6379 for RQ and Celery (they are reported as failed
without it). Writes bench/results.json, docs/benchmarks.md (down to its marker line: the sections
below it are kept) and docs/benchmarks.png, and prints the tables.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import bench_venv

BENCH = Path(__file__).resolve().parent

if not bench_venv.inside(bench_venv.VENV) and __name__ == "__main__":
    bench_venv.bootstrap_bench(Path(__file__).resolve())

sys.path.insert(0, str(BENCH))

import json
import platform
import shutil
import sqlite3
import time
import traceback
from datetime import UTC, datetime

import baselines
import report
import workloads
from common import PG_ADMIN_URL, REDIS_HOST, REDIS_PORT, WORK, Failed, leased_commit
from peers import all_peers
from peers.base import Unsupported

NOTES = [
    "- **Handlers.** Each library runs its handlers the way its documentation shows first: leased, "
    "Celery and huey sync functions on threads, procrastinate and pgqueuer async functions on one event loop "
    "(procrastinate's docs: its concurrency is for async jobs; pgqueuer is async only), RQ a sync function in a "
    "work horse it forks per job.",
    "- **RQ runs one job at a time per worker process** (that is its model), so its \"1 process\" and "
    "\"2 processes\" rows have concurrency 1 and 2, and the slot and crash workloads do not apply.",
    "- **What a completion costs differs.** leased updates the job row and writes the attempt's record "
    "(one row, inserted as the attempt ends); "
    "procrastinate updates its job row (and its events table); pgqueuer deletes the job and writes a log row; "
    "RQ and Celery write a result to Redis (Celery's result backend is on so that completions can be counted); "
    "huey writes a result row (its handlers return True for that, since huey does not store None).",
    "- **Durability differs.** The PostgreSQL libraries commit with synchronous_commit=on, except leased's claims "
    "(off: a claim forgotten in a server crash only means the job runs again; enqueues and results wait for the "
    "flush); leased on SQLite uses "
    "synchronous=NORMAL (durable against a process crash, may lose the last commits on power loss); SqliteHuey's "
    "default is SQLite's synchronous=FULL; Redis here has no AOF and no RDB snapshots (`save \"\"`, "
    "`appendonly no`), so RQ and Celery lose everything queued on a Redis restart.",
    "- **Fresh databases.** Every measurement starts from a new database (or file), as a new deployment would. "
    "On PostgreSQL that means no planner statistics until autoanalyze runs; leased's claims run on connections "
    "whose settings rule out the plans that would need them (see below).",
    "- **RQ's latency is queueing**: its default worker finished about 25 jobs/s here (a fork per job), below "
    "the 50 jobs/s the latency workload sends. RQ's SimpleWorker (no fork, documented for when forking is not "
    "wanted) ran 300 no-op jobs in 1.9 s against 11.9 s for the default Worker, start-up included; the table "
    "uses the default.",
    "- **Celery's bulk** is a `group`, which sends one message per task; it is no faster than `send_task` in a "
    "loop. **huey** has no bulk enqueue.",
    "- **Slot utilisation with 500 slots** needs 10,000 job starts per second to reach 1.0 (2,000 jobs in an "
    "ideal 0.2 s, four waves), so it measures start-up and claim throughput more than waiting; the 20,000-job "
    "columns (an ideal 2 s) show the rate a worker keeps up once started.",
    "- **Time limits** cut some drains short (\u2020): their rate is over the jobs they finished in 60 s.",
    "- **oban-py** runs its workers with `oban start` and async workers, as its README shows; **django-ox** "
    "runs in bench/django_project (Django 6.1, the Django backends benchmark's project and database settings) "
    "with `manage.py ox_worker --concurrency N`, and is fed by a producer process of its own (Django reads its "
    "settings once per process), one request per 1,000 jobs.",
    "- **The ceiling** rows are one connection claiming a batch and finishing it in a loop, no handler and no "
    "library: leased's own named claim and finish queries on its schema, and the same loop on a minimal "
    "(id, status) table. The gap between the two is what leased's schema and statements cost; the gap from "
    "leased's drain to its own ceiling is its engine and Python. The loop is serial on one connection, where a "
    "worker overlaps claims with finishes on several, so a drain can pass it.",
    "- **pgqueuer** is run through `pgqueuer.run()` (what `pgq run` calls): the `pgq` command of pgqueuer "
    "1.6.0 fails at start-up with typer 0.29 (its --log-level option arrives as a str).",
]


def environment(options, peers) -> dict:
    import psycopg
    from redis import Redis

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
        pg_version = connection.execute("SHOW server_version").fetchone()[0]
        settings = {name: connection.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("synchronous_commit", "fsync", "shared_buffers", "max_connections")}
    try:
        info = Redis(host=REDIS_HOST, port=REDIS_PORT).info()
        redis_version = f"{info['redis_version']} (appendonly {'yes' if info.get('aof_enabled') else 'no'})"
    except Exception as error:
        redis_version = f"unreachable ({error})"
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "leased_commit": leased_commit(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "postgresql": pg_version,
        "pg_settings": ", ".join(f"{k}={v}" for k, v in settings.items()),
        "sqlite": sqlite3.sqlite_version,
        "redis": redis_version,
        **({"mariadb": baselines.mariadb_settings()} if any(p.store == "MariaDB" for p in peers) else {}),
        "repeats": options.repeats,
        "limits": vars(options.limits),
    }


def attempt(function, *args) -> dict:
    try:
        return function(*args)
    except Unsupported as reason:
        return {"unsupported": str(reason)}
    except Failed as error:
        return {"error": str(error)}
    except Exception as error:  # a peer's own failure: reported, never fatal to the suite
        traceback.print_exc()
        return {"error": f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_baselines(results: dict, repeats: int, quick: bool, peers) -> None:
    found = results["baselines"]
    if shutil.which("pgbench") is None:
        log("pgbench not found: PostgreSQL baselines skipped")
    else:
        baselines.pgbench_init()
        try:
            for _ in range(repeats):
                for clients, key in ((1, "pgbench_c1"), (4, "pgbench_c4")):
                    found.setdefault(key, []).append(baselines.pgbench_tps(clients, 3 if quick else 10))
                found.setdefault("psycopg_insert", []).append(baselines.psycopg_insert_commit())
        finally:
            baselines.pgbench_cleanup()
    if any(peer.store == "MariaDB" for peer in peers):
        for _ in range(repeats):
            found.setdefault("mariadb_insert", []).append(baselines.mariadb_insert_commit(3 if quick else 10))
    for _ in range(repeats):
        found.setdefault("sqlite_normal", []).append(baselines.sqlite_commits("NORMAL"))
        found.setdefault("sqlite_full", []).append(baselines.sqlite_commits("FULL"))
    # The ceiling: each store draining no-op jobs with no library in between (see baselines.py).
    stores = ["postgres", "sqlite"] + (["mariadb"] if any(peer.store == "MariaDB" for peer in peers) else [])
    for _ in range(repeats):
        for key, rate in baselines.ceilings(stores, 5_000 if quick else 20_000).items():
            found.setdefault(key, []).append(rate)
    log(f"baselines: { {key: [round(v) for v in values] for key, values in found.items()} }")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 1 repeat, short limits")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--only", help="comma-separated peer names (default: all)")
    parser.add_argument("--workloads", default="1,2,3,4,5", help="comma-separated: 1-2 throughput, 3 latency, "
                        "4 slots, 5 crash (default: all)")
    parser.add_argument("--extra-repeats", type=int,
                        help="how many of the repeats also run workloads 4 and 5 (default: all of them)")
    parser.add_argument("--limit", type=float, help="seconds per enqueue loop and per drain (default 60)")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--output", default=str(BENCH / "results.json"))
    options = parser.parse_args()
    limits = workloads.Limits()
    if options.quick:
        limits = workloads.Limits(jobs=2_000, enqueue_seconds=30, drain_seconds=30, latency_jobs=50,
                                  sleep_jobs=500, steady_sleep_jobs=2_000, crash_wait=30)
    if options.jobs:
        limits.jobs = options.jobs
    if options.limit:
        limits.enqueue_seconds = limits.drain_seconds = options.limit
    options.repeats = options.repeats or (1 if options.quick else 3)
    if options.extra_repeats is None:
        options.extra_repeats = options.repeats
    options.limits = limits
    chosen = set(options.workloads.split(","))

    peers = all_peers()
    if options.only:
        wanted = options.only.split(",")
        unknown = set(wanted) - {peer.name for peer in peers}
        if unknown:
            parser.error(f"unknown peers {sorted(unknown)}; choose from {[peer.name for peer in peers]}")
        peers = [peer for peer in peers if peer.name in wanted]
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)

    results = {
        "environment": environment(options, peers),
        "peers": [{"name": p.name, "label": p.label, "store": p.store, "version": p.version(), "handler": p.handler,
                   "settings": p.settings(), "recovery": p.recovery} for p in peers],
        "baselines": {},
        "runs": {peer.name: {} for peer in peers},
        "notes": NOTES,
    }
    if not options.no_baselines:
        run_baselines(results, options.repeats, options.quick, peers)

    def record(peer, metric, value):
        results["runs"][peer.name].setdefault(metric, []).append(value)
        shown = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in value.items()}
        log(f"{peer.name:14} {metric:13} {shown}")

    # Repeats are the outer loop, so that noise from the machine spreads over every library.
    for repeat in range(options.repeats):
        log(f"repeat {repeat + 1} of {options.repeats}")
        for peer in peers:
            if "1" in chosen or "2" in chosen:
                for bulk in (False, True):
                    out = attempt(workloads.throughput, peer, limits, bulk)
                    if "error" in out and len(out) == 1:  # setup failed
                        out = {("enqueue_bulk" if bulk else "enqueue_one"): out}
                    for metric, value in out.items():
                        record(peer, metric, value)
            if "3" in chosen:
                record(peer, "latency", attempt(workloads.latency, peer, limits))
            if "4" in chosen and repeat < options.extra_repeats:
                for slot_count in (50, 500):
                    record(peer, f"slots{slot_count}", attempt(workloads.slots, peer, limits, slot_count))
                # 10,000 starts a second may be more than one process's GIL allows: one per core too.
                record(peer, "slots500_2p", attempt(workloads.slots, peer, limits, 500, 2))
                # 2,000 jobs are four waves, so the first wave's start-up weighs on them; ten times as
                # many show the rate a worker keeps up.
                for processes in (1, 2):
                    record(peer, f"slots500_{processes}p_steady",
                           attempt(workloads.slots, peer, limits, 500, processes, limits.steady_sleep_jobs))
            if "5" in chosen and repeat < options.extra_repeats:
                record(peer, "crash", attempt(workloads.crash, peer, limits))
        Path(options.output).write_text(json.dumps(results, indent=1))

    text = report.write(results)
    print(text)
    shutil.rmtree(WORK / "leased-sqlite", ignore_errors=True)
    shutil.rmtree(WORK / "huey", ignore_errors=True)


if __name__ == "__main__":
    main()
