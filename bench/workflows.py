#!/usr/bin/env python3
"""What a workflow's dependencies cost: a 10,000-step fan-out with one fan-in step, against the same
10,000 jobs with no workflow, and against Celery's chord on Redis. Side by side, in one run.

    PYTHONPATH=src /work/venv/bin/python bench/workflows.py  # SQLite, PostgreSQL, MariaDB, Celery; 3 repeats
    PYTHONPATH=src /work/venv/bin/python bench/workflows.py --backends sqlite,postgres --repeats 5
    # a smoke run, ~10 s:
    PYTHONPATH=src /work/venv/bin/python bench/workflows.py --steps 500 --repeats 1 --backends sqlite --no-celery

It creates bench/.venv-workflows on first use (Celery and redis-py pinned in
bench/requirements-workflows.txt, leased from this checkout with its postgres and mariadb extras)
and re-runs itself there, as bench/django_backends.py does. Needs PostgreSQL (trust auth, user
postgres) at 127.0.0.1:5432, MariaDB (root, no password) at 127.0.0.1:3306 and Redis at
127.0.0.1:6379, for the backends asked for; one that fails is reported as failed, not skipped silently.

Each repeat, for each backend, on a fresh database, with two `leased worker` processes
(--concurrency 10 each, the suite's drain_2p) started first and seen registered, so that their
start-up is not counted; all no-op jobs (max_attempts 1):

- (a) workflow: `wf.batch(noop, 10,000 calls, then=fan_in)` built, then timed from just before
  `wf.enqueue()` (one transaction, the bulk insert path) to the fan-in's first line, which records
  time.time() (one clock: same machine); then it reads `context.batch` (10,000 parents), timed too.
  Also: the enqueue alone, and from the last member's end (its finished_at in the store) to the
  fan-in's start: the release and pick-up of the waiting step.
- (b) plain: the same 10,000 no-op jobs by one `enqueue_many` call, same workers, from just before
  the call to the last job's finished_at in the store, once no job is left pending or running
  (polled every 10 ms by an index seek: a count(*) that often slows the drain it watches).
  (a)/(b) is the cost of the dependencies.

Then Celery 5 on Redis, with its workers started first and seen running a task, in two shapes: one
`celery worker --pool prefork -c 2` (two processes running tasks), and two `celery worker --pool
threads -c 10` (as bench/peers/celery.py runs it in the side-by-side suite, and as leased runs here);
prefetch multiplier 64 as Celery's guide says for short tasks, a Redis result backend (a chord needs
one; the producer then subscribes to each task's result channel as it sends):

- (c) chord: `chord(noop.s(n) for 10,000 n)(callback.s())`, from just before apply_async to the
  callback's first line (time.time(), as in (a));
- (d) group: the same 10,000 tasks as a `group` with no callback, until the result backend holds
  all 10,000 results (polled every 10 ms), timed to the last result's date_done. (c)/(d) is
  Celery's own cost of the fan-in.

Ratios are of medians. Writes bench/workflows_results.json and the section "Workflows: fan-out and
fan-in" in docs/benchmarks.md (bench/workflows.md too) for a full run (the default --steps); a run
with other --steps, or --print-only, only prints. PostgreSQL runs as the server is set: on the test machine with
autovacuum off (conf.d/90-ci.conf), harmless for runs this short; the report says which.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import bench_venv

BENCH = Path(__file__).resolve().parent
VENV = BENCH / ".venv-workflows"

if __name__ == "__main__" and not bench_venv.inside(VENV):
    bench_venv.bootstrap(VENV, BENCH / "requirements-workflows.txt", "postgres,mariadb", Path(__file__).resolve())

from leased import Leased

# The worker processes import this module: `leased worker workflows:app`, `celery -A workflows:celery_app`.
app = Leased(os.environ.get("BENCH_LEASED_URL", "sqlite:///unused.db"))


@app.task(name="bench.noop", max_attempts=1)
def noop(n: int) -> None:
    return None


@app.task(name="bench.fan_in", takes_context=True, max_attempts=1)
def fan_in(context) -> dict:
    started = time.time()
    batch = context.batch  # what a chord's callback is given: every member's outcome and result
    return {"started": started, "read_batch": time.time() - started, "succeeded": batch.succeeded,
            "failed": batch.failed}


def _celery_app():
    from celery import Celery

    from common import REDIS_HOST, REDIS_PORT

    celery = Celery("bench-workflows", broker=f"redis://{REDIS_HOST}:{REDIS_PORT}/{CELERY_BROKER_DB}",
                    backend=f"redis://{REDIS_HOST}:{REDIS_PORT}/{CELERY_RESULT_DB}")
    celery.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json",
                       worker_prefetch_multiplier=CELERY_PREFETCH, broker_connection_retry_on_startup=True,
                       worker_hijack_root_logger=False)

    @celery.task(name="bench.noop")
    def celery_noop(n: int) -> None:
        return None

    @celery.task(name="bench.callback")
    def celery_callback(results: list) -> dict:
        started = time.time()
        return {"started": started, "results": len(results)}

    return celery, celery_noop, celery_callback


# Redis databases of their own (bench/peers/celery.py uses 11 and 12), flushed before and after.
CELERY_BROKER_DB, CELERY_RESULT_DB = 13, 14
CELERY_POOLS = {"prefork": "prefork -c 2", "threads": "2 × threads -c 10"}
CELERY_PREFETCH = 64  # Celery's "Optimizing" guide: "say 64, or 128" for many short tasks
try:
    celery_app, celery_noop, celery_callback = _celery_app()
except ImportError:  # the leased workers import this module too; they need no Celery
    celery_app = celery_noop = celery_callback = None


import argparse
import gc
import json
import platform
import sqlite3
import statistics
import uuid
from datetime import UTC, datetime

import report
from common import (PG_ADMIN_URL, WORK, Failed, Workers, drop_fresh_database, fresh_database,
                    leased_commit, mariadb_connect, spawn, venv_bin)

RESULTS = BENCH / "workflows_results.json"
SECTION = BENCH / "workflows.md"
NOTES = BENCH / "workflows_notes.md"  # hand-written, if any: what the figures show
TITLE = "Workflows: fan-out and fan-in"
FULL_STEPS = 10_000
PROCESSES, CONCURRENCY = 2, 10
POLL = 0.01
BACKENDS = ("sqlite", "postgres", "mariadb")
LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mariadb": "MariaDB"}


def log(message: str) -> None:
    print(f"{datetime.now(UTC):%H:%M:%S} {message}", flush=True)


# A fresh store per measurement.
class Store:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.name = f"bench_workflows_{uuid.uuid4().hex[:8]}"
        self.url, self.path = fresh_database(backend, self.name, "workflows")
        self.app = Leased(self.url)
        for task in (noop, fan_in):
            self.app.task(name=task.name, max_attempts=1, takes_context=task.takes_context)(task.func)
        _ = self.app.backend  # opened and migrated now, not inside the timed part
        self._reader = None

    def any_left(self) -> bool:
        """Whether a job is still pending or running: a seek on the (status, id) index, cheap to poll
        every 10 ms (a count(*) of the done rows at that rate slows the drain it watches)."""
        sql = "SELECT id FROM leased_jobs WHERE status IN ('pending', 'running') LIMIT 1"
        if self.backend == "sqlite":
            if self._reader is None:
                self._reader = sqlite3.connect(self.path, timeout=30)
            return self._reader.execute(sql).fetchone() is not None
        if self.backend == "mariadb":
            if self._reader is None:
                self._reader = mariadb_connect(self.name)
            with self._reader.cursor() as cursor:
                cursor.execute(sql)
                return cursor.fetchone() is not None
        with self.app.backend.connection() as connection:
            return connection.execute(sql).fetchone() is not None

    def ends(self, task_name: str) -> list[float]:
        """Every done job's finished_at (the store's clock, this machine's), as epoch seconds."""
        found, before = [], None
        while True:
            page = self.app.list_jobs(status="done", task_name=task_name, limit=10_000, before_id=before)
            found += [job.finished_at.timestamp() for job in page]
            if len(page) < 10_000:
                return found
            before = page[-1].id

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self.app.close()
        drop_fresh_database(self.backend, self.name, self.path)


def start_leased_workers(store: Store, tag: str, timeout: float = 60.0) -> Workers:
    workers = Workers()
    for index in range(PROCESSES):
        path = WORK / "logs" / f"workflows-{store.backend}-{tag}-{index}.log"
        workers.processes.append(spawn([venv_bin("leased"), "worker", "workflows:app", "--concurrency",
                                        str(CONCURRENCY), "--log-level", "warning"],
                                       {"BENCH_LEASED_URL": store.url}, path))
        workers.logs.append(path)
    deadline = time.monotonic() + timeout
    while len([worker for worker in store.app.workers() if worker.alive]) < PROCESSES:
        workers.check_alive()
        if time.monotonic() > deadline:
            workers.stop()
            raise Failed(f"{PROCESSES} workers not registered within {timeout:.0f} s")
        time.sleep(POLL)
    return workers


def wait_until(condition, what: str, timeout: float, workers: Workers | None = None) -> float:
    """Poll `condition` every POLL s until it holds; returns time.time() when it was seen."""
    deadline = time.monotonic() + timeout
    while not condition():
        if workers is not None:
            workers.check_alive()
        if time.monotonic() > deadline:
            raise Failed(f"{what}: not within {timeout:.0f} s")
        time.sleep(POLL)
    return time.time()


def leased_workflow(backend: str, steps: int, timeout: float) -> dict:
    """(a): enqueue a fan-out of `steps` no-op steps and one fan-in step; until the fan-in starts."""
    store = Store(backend)
    try:
        workers = start_leased_workers(store, "workflow")
        try:
            wf = store.app.workflow("fan-out")
            built = time.perf_counter()
            members, then = wf.batch(store.app.get_task(noop.name), [(n,) for n in range(steps)],
                                     then=store.app.get_task(fan_in.name))
            built = time.perf_counter() - built
            started, clock = time.time(), time.perf_counter()
            run = wf.enqueue()
            enqueue = time.perf_counter() - clock
            fan_in_id = run.job_ids[then.name]
            seen = wait_until(lambda: store.app.get_job(fan_in_id).status.value in ("done", "failed", "cancelled"),
                              "the fan-in", timeout, workers)
        finally:
            workers.stop()
        job = store.app.get_job(fan_in_id)
        if job.status.value != "done":
            raise Failed(f"the fan-in ended {job.status.value}: {job.last_error}")
        result = job.result
        if result["succeeded"] != steps or result["failed"]:
            raise Failed(f"the fan-in saw {result['succeeded']} succeeded, {result['failed']} failed of {steps}")
        info = store.app.get_workflow(run.id)
        last_member = max(store.ends(noop.name))
        return {"seconds": result["started"] - started, "enqueue": enqueue, "build": built,
                "rate": steps / (result["started"] - started),
                "release": result["started"] - last_member, "to_last_member": last_member - started,
                "read_batch": result["read_batch"], "seen_late": seen - result["started"],
                "workflow_status": str(info.counts)}
    finally:
        store.close()


def leased_plain(backend: str, steps: int, timeout: float) -> dict:
    """(b): the same no-op jobs by one enqueue_many, same workers; until the store counts them done."""
    store = Store(backend)
    try:
        workers = start_leased_workers(store, "plain")
        try:
            calls = [(n,) for n in range(steps)]
            task = store.app.get_task(noop.name)
            started, clock = time.time(), time.perf_counter()
            task.enqueue_many(calls)
            enqueue = time.perf_counter() - clock
            seen = wait_until(lambda: not store.any_left(), "the drain", timeout, workers)
        finally:
            workers.stop()
        ends = store.ends(noop.name)
        if len(ends) != steps:
            raise Failed(f"{len(ends)} of {steps} jobs done")
        last = max(ends)
        return {"seconds": last - started, "enqueue": enqueue, "rate": steps / (last - started),
                "seen_late": seen - last}
    finally:
        store.close()


# Celery.
class CeleryWorkers:
    def __init__(self, pool: str) -> None:
        from redis import Redis

        from common import REDIS_HOST, REDIS_PORT

        self.redis = [Redis(host=REDIS_HOST, port=REDIS_PORT, db=db) for db in (CELERY_BROKER_DB, CELERY_RESULT_DB)]
        for redis in self.redis:
            redis.flushdb()
        self.workers = Workers()
        # prefork: one worker, two processes running tasks; threads: two worker processes of 10 threads
        # each, as bench/peers/celery.py runs Celery in the side-by-side suite (and as leased runs here).
        shape = [["--pool", "prefork", "-c", str(PROCESSES)]] if pool == "prefork" else \
            [["--pool", "threads", "-c", str(CONCURRENCY)]] * PROCESSES
        for index, options in enumerate(shape):
            path = WORK / "logs" / f"workflows-celery-{pool}-{index}-{time.time_ns()}.log"
            self.workers.processes.append(spawn([venv_bin("celery"), "-A", "workflows:celery_app", "worker", *options,
                                                 "-n", f"bench-workflows-{index}-{time.time_ns()}@%h",
                                                 "--without-gossip", "--without-mingle", "--without-heartbeat",
                                                 "--loglevel", "WARNING"], {}, path))
            self.workers.logs.append(path)
        # Ready once it has run a task: one message, waiting in the queue until the worker is up.
        warm_up = celery_noop.delay(-1)
        deadline = time.monotonic() + 60
        while not warm_up.ready():
            self.workers.check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise Failed("the Celery worker ran no task within 60 s")
            time.sleep(POLL)
        del warm_up  # unsubscribed from its result's channel now, not at the interpreter's exit
        gc.collect()
        self.redis[1].flushdb()

    def results(self) -> int:
        return self.redis[1].dbsize()

    def ends(self, leave_out: str | None = None) -> list[float]:
        """Each stored result's date_done (the worker's clock, this machine's), as epoch seconds."""
        keys = [key for key in self.redis[1].scan_iter("celery-task-meta-*", count=1000)
                if leave_out is None or not key.decode().endswith(leave_out)]
        found = []
        for start in range(0, len(keys), 1000):
            for raw in self.redis[1].mget(keys[start:start + 1000]):
                done = datetime.fromisoformat(json.loads(raw)["date_done"])
                found.append((done if done.tzinfo else done.replace(tzinfo=UTC)).timestamp())
        return found

    def stop(self) -> None:
        self.workers.stop()
        for redis in self.redis:
            redis.flushdb()
            redis.close()


def celery_chord(pool: str, steps: int, timeout: float) -> dict:
    """(c): a chord of `steps` no-op tasks and a callback, from apply_async to the callback's start."""
    from celery import chord

    workers = CeleryWorkers(pool)
    try:
        header = [celery_noop.s(n) for n in range(steps)]
        started, clock = time.time(), time.perf_counter()
        result = chord(header)(celery_callback.s())
        enqueue = time.perf_counter() - clock
        seen = wait_until(result.ready, "the chord's callback", timeout, workers.workers)
        outcome = result.get(timeout=10)
        ends = workers.ends(leave_out=result.id)
        # Its members' results unsubscribe from Redis when collected: now, not at the interpreter's exit.
        del result
        gc.collect()
    finally:
        workers.stop()
    if outcome["results"] != steps or len(ends) != steps:
        raise Failed(f"the callback got {outcome['results']} results of {steps}, {len(ends)} stored")
    last = max(ends)
    return {"seconds": outcome["started"] - started, "enqueue": enqueue, "rate": steps / (outcome["started"] - started),
            "release": outcome["started"] - last, "to_last_member": last - started,
            "seen_late": seen - outcome["started"]}


def celery_group(pool: str, steps: int, timeout: float) -> dict:
    """(d): the same tasks as a plain group, until the result backend holds all their results."""
    from celery import group

    workers = CeleryWorkers(pool)
    try:
        header = group(celery_noop.s(n) for n in range(steps))
        started, clock = time.time(), time.perf_counter()
        result = header.apply_async()
        enqueue = time.perf_counter() - clock
        seen = wait_until(lambda: workers.results() >= steps, "the group", timeout, workers.workers)
        ends = workers.ends()
        del result
        gc.collect()
    finally:
        workers.stop()
    if len(ends) != steps:
        raise Failed(f"{len(ends)} results stored of {steps}")
    last = max(ends)
    return {"seconds": last - started, "enqueue": enqueue, "rate": steps / (last - started), "seen_late": seen - last}


def measure_or_error(measure, *args) -> dict:
    load = os.getloadavg()[0]
    try:
        return {**measure(*args), "load": load}
    except Exception as error:  # reported, and the other measurements go on
        return {"error": f"{type(error).__name__}: {error}"[:400]}


# Reporting.
def med(runs: list[dict], key: str = "seconds") -> float | None:
    values = [run[key] for run in runs if key in run]
    return statistics.median(values) if values else None


def span(runs: list[dict], key: str = "seconds", scale: float = 1.0, digits: int = 2, unit: str = " s") -> str:
    values = [run[key] * scale for run in runs if key in run]
    if not values:
        errors = [run["error"] for run in runs if "error" in run]
        return f"failed: {errors[0][:120]}" if errors else "–"
    text = f"{statistics.median(values):,.{digits}f}{unit}"
    if len(values) > 1:
        text += f" ({min(values):,.{digits}f}–{max(values):,.{digits}f})"
    if len(values) < len(runs):
        text += f" [{len(runs) - len(values)} failed]"
    return text


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "–"


def paired(a: list[dict], b: list[dict]) -> str:
    """The ratio of medians, and in brackets the range of the repeats' own ratios (a and b of one
    repeat ran a minute apart, so they saw the same machine)."""
    pairs = [x["seconds"] / y["seconds"] for x, y in zip(a, b, strict=True) if "seconds" in x and "seconds" in y]
    text = ratio(med(a), med(b))
    if len(pairs) > 1:
        text += f" ({min(pairs):.2f}–{max(pairs):.2f})"
    return text


def load_range(runs: dict) -> str:
    loads = [run["load"] for kinds in runs.values() for found in kinds.values() for run in found if "load" in run]
    return f"{min(loads):.1f}–{max(loads):.1f}" if loads else "?"


def render(results: dict) -> str:
    env, runs = results["environment"], results["runs"]
    steps = env["steps"]
    lines = [f"## {TITLE}", "",
             f"A fan-out of {steps:,} no-op steps and one fan-in step (`wf.batch(noop, calls, then=fan_in)`), "
             f"against the same {steps:,} no-op jobs enqueued by one `enqueue_many` and drained with no workflow, "
             f"and against Celery's chord on Redis. Two worker processes everywhere: two `leased worker "
             f"--concurrency {CONCURRENCY}`; Celery as one `celery worker --pool prefork -c 2` and as two `celery "
             f"worker --pool threads -c {CONCURRENCY}` (prefetch multiplier {CELERY_PREFETCH}, Redis result "
             "backend), started and ready before each measurement. Times run from just before the enqueue call "
             "(`wf.enqueue()`, `enqueue_many`, the chord's or group's `apply_async`) to the fan-in's or "
             "callback's first line (its time.time()), or, with no fan-in, to the last job's end as the store "
             "records it (leased's finished_at, Celery's date_done). Median of "
             f"{env['repeats']} "
             f"(range); a fresh database and fresh workers each time. {env['date']}, {env['machine']}, Python "
             f"{env['python']}, Celery {env.get('celery', '?')}, leased at `{env['leased_commit']}`. PostgreSQL "
             f"{env.get('postgresql', '?')} with autovacuum {env.get('autovacuum', '?')} (the test machine's "
             "setting; harmless for runs this short). **The machine was shared** with other engineers' work "
             f"(1-minute load average {load_range(runs)} at the measurements' starts, on 2 cores): read the "
             "ratios. A ratio's range in brackets is that of the repeats' own ratios.", "",
             "```sh", results["command"], "```", "",
             f"| | (a) workflow: enqueue to fan-in start | (b) {steps:,} plain jobs: enqueue to all done "
             "| (a)/(b): cost of the dependencies | Celery's chord (c) ÷ (a), prefork / threads "
             "| workflow enqueue alone "
             f"| enqueue_many of {steps:,} | workflow enqueue ÷ enqueue_many |",
             "|---|---|---|---|---|---|---|---|"]
    chords = [runs.get(f"celery-{pool}", {}).get("chord", []) for pool in CELERY_POOLS]
    chord = chords[0]
    for backend in env["backends"]:
        a, b = runs[backend]["workflow"], runs[backend]["plain"]
        lines.append(f"| leased ({LABELS[backend]}) | {span(a)} | {span(b)} | {paired(a, b)} "
                     f"| {' / '.join(ratio(med(c), med(a)) for c in chords)} | {span(a, 'enqueue', 1000, 0, ' ms')} "
                     f"| {span(b, 'enqueue', 1000, 0, ' ms')} | {ratio(med(a, 'enqueue'), med(b, 'enqueue'))} |")
    for pool, shape in CELERY_POOLS.items():
        if f"celery-{pool}" not in runs:
            continue
        c, d = runs[f"celery-{pool}"]["chord"], runs[f"celery-{pool}"]["group"]
        lines.append(f"| Celery (Redis), {shape} | (c) chord: {span(c)} | (d) group: {span(d)} | (c)/(d): "
                     f"{paired(c, d)} | {ratio(med(c), med(chord))} of prefork's chord "
                     f"| {span(c, 'enqueue', 1000, 0, ' ms')} (chord apply_async) "
                     f"| {span(d, 'enqueue', 1000, 0, ' ms')} (group apply_async) | – |")
    lines += ["", "Inside (a): from the enqueue to the last member's end (its finished_at in the store), from that "
              "end to the fan-in's start (the waiting step released by the last parent's finish, then claimed), "
              f"and the fan-in's read of `context.batch` ({steps:,} parents with their results):", "",
              "| | to the last member's end | last member's end to fan-in start | context.batch read "
              "| builder (wf.batch) |", "|---|---|---|---|---|"]
    for backend in env["backends"]:
        a = runs[backend]["workflow"]
        lines.append(f"| leased ({LABELS[backend]}) | {span(a, 'to_last_member')} | "
                     f"{span(a, 'release', 1000, 0, ' ms')} | {span(a, 'read_batch', 1000, 0, ' ms')} | "
                     f"{span(a, 'build', 1000, 0, ' ms')} |")
    for pool, shape in CELERY_POOLS.items():
        if f"celery-{pool}" in runs:
            c = runs[f"celery-{pool}"]["chord"]
            lines.append(f"| Celery chord, {shape} | {span(c, 'to_last_member')} (date_done) | "
                         f"{span(c, 'release', 1000, 0, ' ms')} | (given as the callback's argument) | – |")
    lines.append("")
    if NOTES.exists():
        lines += [NOTES.read_text().strip(), ""]
    return "\n".join(lines)


def server_facts() -> dict:
    facts = {}
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as connection:
            facts["postgresql"] = connection.execute("SHOW server_version").fetchone()[0].split()[0]
            facts["autovacuum"] = connection.execute("SHOW autovacuum").fetchone()[0]
    except Exception as error:  # reported as unreachable, in the facts
        facts["postgresql"] = f"unreachable ({type(error).__name__})"
    try:
        from importlib import metadata

        facts["celery"] = metadata.version("celery")
    except Exception:  # no celery here: the facts leave it out
        pass
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=FULL_STEPS, help=f"fan-out width (default {FULL_STEPS:,})")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: sqlite,postgres,mariadb")
    parser.add_argument("--no-celery", action="store_true", help="leave Celery out")
    parser.add_argument("--celery-pools", default="prefork,threads",
                        help="prefork (one worker, -c 2), threads (two workers, -c 10 each), or both")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement at most")
    parser.add_argument("--print-only", action="store_true", help="write neither the results nor the report")
    parser.add_argument("--render", action="store_true", help="only re-write the report from the saved results")
    options = parser.parse_args()
    if options.render:
        results = json.loads(RESULTS.read_text())
        report.publish(TITLE, SECTION, render(results))
        print(render(results))
        return
    backends = [name.strip() for name in options.backends.split(",") if name.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"--backends: unknown {', '.join(sorted(unknown))}")
    results = {"command": ("PYTHONPATH=src /work/venv/bin/python bench/workflows.py " + " ".join(sys.argv[1:])).strip(),
               "environment": {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "steps": options.steps,
                               "repeats": options.repeats, "backends": backends,
                               "python": platform.python_version(),
                               "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
                               "leased_commit": leased_commit(), **server_facts()},
               "runs": {backend: {"workflow": [], "plain": []} for backend in backends}}
    pools = [] if options.no_celery else [pool.strip() for pool in options.celery_pools.split(",") if pool.strip()]
    if set(pools) - set(CELERY_POOLS):
        parser.error(f"--celery-pools: use {', '.join(CELERY_POOLS)}")
    for pool in pools:
        results["runs"][f"celery-{pool}"] = {"chord": [], "group": []}
    full = options.steps == FULL_STEPS and not options.print_only
    for repeat in range(options.repeats):  # the outer loop, so that the machine's noise spreads over all
        for backend in backends:
            for kind, measure in (("workflow", leased_workflow), ("plain", leased_plain)):
                log(f"repeat {repeat + 1}/{options.repeats}: leased {backend}, {kind}, {options.steps:,} steps")
                found = measure_or_error(measure, backend, options.steps, options.timeout)
                log(f"  {json.dumps(found)}")
                results["runs"][backend][kind].append(found)
        for pool in pools:
            for kind, measure in (("chord", celery_chord), ("group", celery_group)):
                log(f"repeat {repeat + 1}/{options.repeats}: Celery {pool} {kind}, {options.steps:,} tasks")
                found = measure_or_error(measure, pool, options.steps, options.timeout)
                log(f"  {json.dumps(found)}")
                results["runs"][f"celery-{pool}"][kind].append(found)
        if full:
            RESULTS.write_text(json.dumps(results, indent=1))
    text = render(results)
    if full:
        report.publish(TITLE, SECTION, text)
    print(text)
    failed = [run for kinds in results["runs"].values() for found in kinds.values() for run in found if "error" in run]
    sys.exit(1 if failed and options.steps != FULL_STEPS else 0)


if __name__ == "__main__":
    main()
