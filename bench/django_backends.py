#!/usr/bin/env python3
"""leased's django.tasks backend beside django-tasks-db and django-ox, on SQLite and PostgreSQL:

    python3.12 bench/django_backends.py                  # 2,000 tasks, 3 repeats
    python3.12 bench/django_backends.py --jobs 2000 --repeats 1 --only leased,ox --databases sqlite

Each backend runs in the same small Django 6.1 project (bench/django_project), with the same
database settings, and its own recommended worker command with its defaults:
`manage.py leased_worker`, `manage.py db_worker`, `manage.py ox_worker`. Per backend and database:

- enqueue: N no-op tasks through `task.enqueue()`, one transaction each (autocommit), and N
  inside one `transaction.atomic()`;
- drain: the first N tasks run by one worker process started with the documented command and its
  defaults, and the second N by one worker with 8 threads (`--concurrency 8` where there is one);
  the clock runs from the first completion seen to the last;
- start latency: probe tasks enqueued one at a time, a random 0-1 s apart (so that polling workers
  are not caught in phase), from just before `enqueue()` to the first line of the task.

It creates bench/.venv-django (Python 3.12+: Django 6.1; the peers pinned in
bench/requirements-django.txt, leased from this checkout) and re-runs itself there. Needs
PostgreSQL (trust auth, user postgres) at 127.0.0.1:5432. Writes bench/django_results.json and
bench/django_backends.md, which it also puts into docs/benchmarks.md as "Django backends".
"""

from __future__ import annotations

import sys
from pathlib import Path

import bench_venv

BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".venv-django"

if not bench_venv.inside(VENV) and __name__ == "__main__":
    if sys.version_info < (3, 12):
        sys.exit(f"bench/django_backends.py needs Python 3.12+ (Django 6.1), this is {sys.version.split()[0]}: "
                 "run it with python3.12")
    bench_venv.bootstrap(VENV, BENCH / "requirements-django.txt", "django", Path(__file__).resolve())

import argparse
import json
import os
import random
import subprocess
import time
from datetime import UTC, datetime
from importlib import metadata

import report
from common import (
    WORK, ProbeReceiver, Workers, median_range, percentile, recreate_database, remove_sqlite, spawn, wait_for_done)

PROJECT = BENCH / "django_project"
RESULTS = BENCH / "django_results.json"
SECTION = BENCH / "django_backends.md"  # report.py appends it to docs/benchmarks.md too

BACKENDS = {  # name: (label, package, worker command as documented, the same with 8 threads or None)
    "leased": ("leased", "leased", ["leased_worker"], ["leased_worker", "--concurrency", "8"]),
    "tasks_db": ("django-tasks-db", "django-tasks-db", ["db_worker"], None),
    "ox": ("django-ox", "django-ox", ["ox_worker"], ["ox_worker", "--concurrency", "8"]),
}
DONE_SQL = {  # finished successfully, read from each backend's own table
    "leased": "SELECT count(*) FROM leased_jobs WHERE status = 'done'",
    "tasks_db": "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'",
    "ox": "SELECT count(*) FROM django_ox_oxtask WHERE status = 'SUCCESSFUL'",
}
DRAIN_TIMEOUT = 300.0
LATENCY_TIMEOUT = 10.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# One cell (a backend on a database), in a process of its own: Django is set up once per process.
def cell_environment(backend: str, database: str) -> dict[str, str]:
    env = {"BENCH_BACKEND": backend, "BENCH_DATABASE": database, "DJANGO_SETTINGS_MODULE": "benchsite",
           "PYTHONPATH": os.pathsep.join([str(PROJECT), str(BENCH)])}
    if database == "sqlite":
        env["BENCH_SQLITE_PATH"] = str(WORK / "django" / f"{backend}.sqlite3")
    else:
        env["BENCH_PG_NAME"] = f"bench_django_{backend}"
    return env


def fresh_database(env: dict[str, str]) -> None:
    if env["BENCH_DATABASE"] == "sqlite":
        path = Path(env["BENCH_SQLITE_PATH"])
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_sqlite(path)
    else:
        recreate_database(env["BENCH_PG_NAME"])


def start_worker(env: dict[str, str], command: list[str], tag: str) -> Workers:
    log_path = WORK / "logs" / f"django-{env['BENCH_BACKEND']}-{env['BENCH_DATABASE']}-{tag}.log"
    process = spawn([sys.executable, str(PROJECT / "manage.py"), *command], env, log_path)
    return Workers([process], [log_path])


def _epoch(value: float | str | datetime) -> float:
    """A finished_at as seconds: leased's SQLite column is REAL, Django's DateTimeField is text there."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.timestamp() if isinstance(value, datetime) else float(value)


def run_cell(backend: str, database: str, jobs: int, probes: int) -> dict:
    import django

    env = cell_environment(backend, database)
    django.setup()
    from benchapp.tasks import noop, probe
    from django.core.management import call_command
    from django.db import connection, transaction

    def count_done() -> int:
        with connection.cursor() as cursor:
            cursor.execute(DONE_SQL[backend])
            return cursor.fetchone()[0]

    def drained(command: list[str], tag: str, target: int) -> dict:
        workers = start_worker(env, command, tag)
        try:
            found = wait_for_done(count_done, target, DRAIN_TIMEOUT, workers, baseline=count_done())
        finally:
            workers.stop()
        if found.timed_out:
            return {"rate": found.rate, "done": found.done, "timed_out": True}
        # From the first finish to the last, by the times the backend recorded (the tasks of earlier
        # drains finished before these): worker start-up is left out, and no polling blurs it.
        with connection.cursor() as cursor:
            cursor.execute(DONE_SQL[backend].replace("count(*)", "finished_at"))
            finished = sorted(_epoch(value) for (value,) in cursor.fetchall())[-target:]
        return {"rate": (target - 1) / (finished[-1] - finished[0]), "done": target, "timed_out": False}

    out: dict = {}
    call_command("migrate", verbosity=0)

    started = time.perf_counter()
    for n in range(jobs):
        noop.enqueue(n)
    out["enqueue_one"] = {"rate": jobs / (time.perf_counter() - started)}
    out["drain_default"] = drained(BACKENDS[backend][2], "default", jobs)

    started = time.perf_counter()
    with transaction.atomic():
        for n in range(jobs):
            noop.enqueue(n)
    out["enqueue_atomic"] = {"rate": jobs / (time.perf_counter() - started)}
    threaded = BACKENDS[backend][3]
    if threaded:
        out["drain_8"] = drained(threaded, "threads8", jobs)
    else:
        out["drain_8"] = {"unsupported": "db_worker runs one task at a time"}
        drained(BACKENDS[backend][2], "rest", jobs)  # the atomic batch, so the latency run starts empty

    receiver, waits, rng = ProbeReceiver(), [], random.Random(7)
    workers = start_worker(env, BACKENDS[backend][2], "latency")
    try:
        warm = probes  # the first probe also waits out the worker's start-up: not counted
        for n in range(warm, warm + probes + 1):
            sent = time.time()
            probe.enqueue(n, receiver.port)
            receiver.collect({n}, LATENCY_TIMEOUT if n > warm else 120.0)
            workers.check_alive()
            if n in receiver.started and n > warm:
                waits.append((receiver.started[n] - sent) * 1000)
            time.sleep(rng.uniform(0.0, 1.0))
    finally:
        workers.stop()
        receiver.close()
    out["latency"] = {"p50": percentile(waits, 0.5), "p99": percentile(waits, 0.99),
                      "received": len(waits), "sent": probes}
    return out


def cell(backend: str, database: str, jobs: int, probes: int) -> dict:
    """Run one cell in a child process (in the cell's environment); its result, or the error."""
    env = cell_environment(backend, database)
    fresh_database(env)
    argv = [sys.executable, str(Path(__file__).resolve()), "--cell", backend, database,
            "--jobs", str(jobs), "--probes", str(probes)]
    done = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, cwd=str(PROJECT))
    sys.stderr.write(done.stderr[-2000:] if done.returncode else "")
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return {"error": lines[-1][:300] if lines else f"exit code {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# The report.
def summary(runs: list[dict], metric: str, key: str) -> dict | None:
    return median_range([run[metric][key] for run in runs
                         if isinstance(run.get(metric), dict) and key in run[metric]])


def shown(runs: list[dict], metric: str, key: str, digits: int = 0) -> str:
    found = summary(runs, metric, key)
    if found is None:
        reasons = [run.get("error") or run.get(metric, {}).get("unsupported") for run in runs]
        reason = next((r for r in reasons if r), None)
        return f"n/a ({reason})" if reason else "n/a"
    text = f"{found['median']:,.{digits}f}"
    if found["n"] > 1:
        text += f" ({found['min']:,.{digits}f}–{found['max']:,.{digits}f})"
    return text


def ratio(results: dict, database: str, peer: str, metric: str, key: str) -> str:
    ours = summary(results["runs"][database].get("leased", []), metric, key)
    theirs = summary(results["runs"][database].get(peer, []), metric, key)
    if not ours or not theirs or not theirs["median"]:
        return "n/a"
    value = ours["median"] / theirs["median"]
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3f}"


METRICS = [("enqueue_one", "rate", "enqueue, one transaction each (tasks/s)"),
           ("enqueue_atomic", "rate", "enqueue, all in one atomic() (tasks/s)"),
           ("drain_default", "rate", "drain, the documented worker command (tasks/s)"),
           ("drain_8", "rate", "drain, 8 threads (tasks/s)"),
           ("latency", "p50", "start latency p50 (ms, lower is better)"),
           ("latency", "p99", "start latency p99 (ms, lower is better)")]


def render(results: dict, command: str) -> str:
    env = results["environment"]
    names = [name for name in BACKENDS if any(name in runs for runs in results["runs"].values())]
    peers = [name for name in names if name != "leased"]
    lines = ["## Django backends", "",
             f"leased's `django.tasks` backend beside the two other database backends for Django's Tasks API, "
             f"{env['jobs']:,} no-op tasks per measurement, {env['probes']} latency probes, "
             f"median of {env['repeats']} (range in brackets), {env['date']}, {env['machine']}, Python "
             f"{env['python']}, Django {env['versions']['django']}, "
             + ", ".join(f"{BACKENDS[n][0]} {env['versions'][n]}" for n in names) + ".", "",
             "```sh", command, "```", ""]
    for database in results["runs"]:
        runs = results["runs"][database]
        title = "SQLite" if database == "sqlite" else "PostgreSQL"
        lines += [f"### {title}", "",
                  "| | " + " | ".join(BACKENDS[n][0] for n in names) + " | "
                  + " | ".join(f"leased ÷ {BACKENDS[p][0]}" for p in peers) + " |",
                  "|---" * (1 + len(names) + len(peers)) + "|"]
        for metric, key, label in METRICS:
            cells = [shown(runs.get(n, []), metric, key) for n in names]
            lines.append(f"| {label} | " + " | ".join(cells) + " | "
                         + " | ".join(ratio(results, database, p, metric, key) for p in peers) + " |")
        lines.append("")
    lines += ["Ratios are leased's median over the peer's: above 1 is leased faster for throughput, "
              "below 1 is leased quicker for latency.", "", *results["notes"]]
    if env["repeats"] == 1:
        lines.append("- **One repeat** on a 2-core machine shared with other work: the enqueue rates move by "
                     "up to 2x between runs (smoke runs of 200-300 tasks put the three in other orders), so "
                     "read the enqueue ratios as \"about even\"; the drain and latency ratios are far outside "
                     "that noise.")
    lines.append("")
    return "\n".join(lines)


NOTES = [
    "- **Workers as documented**: `manage.py leased_worker` (8 threads, polls every 1 s, woken at once "
    "by NOTIFY on PostgreSQL and by a datagram sent from `transaction.on_commit` on SQLite), "
    "`manage.py db_worker` (one task at a time, polls every 1 s), `manage.py ox_worker` (1 thread, polls "
    "every 1 s). Neither peer has a wake-up on enqueue, so their start latency is about half their "
    "poll interval; `--interval` shorter than 1 s trades that for idle queries.",
    "- **Same database settings for all three**: SQLite with WAL, synchronous=NORMAL, "
    "`transaction_mode` IMMEDIATE, timeout 30 s; PostgreSQL with `CONN_MAX_AGE = 600` (db_worker "
    "calls `close_old_connections()` on every loop; with the default 0 it would reconnect per task).",
    "- **8 threads**: `--concurrency 8` for leased (its default) and django-ox; django-tasks-db's "
    "worker has no such option (run more processes instead), so n/a.",
    "- **Enqueue** goes through `task.enqueue()` for all three (django-ox also has `enqueue_many`, "
    "not used here). Completions are counted from each backend's own table.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--probes", type=int, default=50, help="latency probes per backend and database")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(BACKENDS), help="comma-separated: leased,tasks_db,ox")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--cell", nargs=2, metavar=("BACKEND", "DATABASE"), help=argparse.SUPPRESS)
    parser.add_argument("--render", action="store_true", help="only re-write the report from the saved results")
    options = parser.parse_args()
    if options.render:
        results = json.loads(RESULTS.read_text())
        text = render(results, results["command"])
        report.publish("Django backends", SECTION, text)
        print(text)
        return
    if options.cell:
        print(json.dumps(run_cell(*options.cell, options.jobs, options.probes)))
        return
    backends, databases = options.only.split(","), options.databases.split(",")
    unknown = sorted(set(backends) - set(BACKENDS)) + sorted(set(databases) - {"sqlite", "postgres"})
    if unknown:
        parser.error(f"unknown {unknown[0]!r}: backends are {', '.join(BACKENDS)}; databases sqlite, postgres")
    import platform

    results = {
        "environment": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d"), "jobs": options.jobs, "probes": options.probes,
            "repeats": options.repeats, "python": platform.python_version(),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
            "versions": {"django": metadata.version("django"),
                         **{name: metadata.version(BACKENDS[name][1]) for name in BACKENDS}},
        },
        "runs": {database: {backend: [] for backend in backends} for database in databases},
        "notes": NOTES,
    }
    command = results["command"] = ("python3.12 bench/django_backends.py " + " ".join(sys.argv[1:])).strip()
    for repeat in range(options.repeats):  # the outer loop, so that the machine's noise spreads over all
        for database in databases:
            for backend in backends:
                log(f"repeat {repeat + 1}/{options.repeats}: {backend} on {database}")
                found = cell(backend, database, options.jobs, options.probes)
                log(f"  {found}")
                results["runs"][database][backend].append(found)
                RESULTS.write_text(json.dumps(results, indent=1))
    text = render(results, command)
    report.publish("Django backends", SECTION, text)
    print(text)


if __name__ == "__main__":
    main()
