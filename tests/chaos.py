"""Chaos soak: real worker processes SIGKILLed (and, on PostgreSQL, their connections terminated)
while they drain a queue, then an invariant checker over every job and every execution.

Shared by bench/chaos_soak.py (tens of thousands of jobs) and tests/system/test_chaos.py (a short run).
It is also the worker program: `python tests/chaos.py WORKER_ID`, configured by the environment:

    LEASED_DATABASE_URL   the worker's database URL (on PostgreSQL it carries an application_name
                          naming the worker, so that the chaos loop can terminate its connections)
    CHAOS_RECORD_URL      where the handler records its executions (the same database; on
                          PostgreSQL with an application_name the chaos loop never targets)
    CHAOS_CONCURRENCY, CHAOS_SHUTDOWN_GRACE

The handler records (job_id, attempt, worker_id) in `chaos_executions` with INSERT ... ON CONFLICT
DO NOTHING once its work is done: that row is the side effect a real handler would have, so a job
with rows for two attempts ran twice. The checker then demands that every job ended as designed,
none was lost, and every extra execution belongs to an attempt that expired or lost its lease on a
worker that was killed or cut off.
"""

from __future__ import annotations

import logging
import os
import random
import re
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import connections
from leased import Backoff, JobStatus, Leased, Outcome, PermanentError

HERE = Path(__file__).resolve().parent
TASK_NAME = "chaos.work"
MAX_ATTEMPTS = 50  # a job fails only by design: no job is killed fifty times
SHUTDOWN_GRACE = 15.0
LOCKED = "database is locked"
CANCELLED_LINE = re.compile(r"job (\d+) \(chaos\.work\) attempt (\d+): lease lost; cancelling its handler")

# Kinds of job: (kind, share, sleep range in ms). "long" outlives the lease, so renewals matter.
MIX = [
    ("fatal", 0.01, (1, 5)),  # PermanentError: failed by design, never records an execution
    ("flaky", 0.03, (1, 10)),  # raises on attempt 1, done on a later attempt
    ("long", 0.01, None),  # 1.2 to 2 leases
    ("medium", 0.05, (50, 200)),
    ("short", 0.90, (2, 10)),
]

EXECUTIONS_SQLITE = """CREATE TABLE IF NOT EXISTS chaos_executions (
    job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, worker_id TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt, worker_id))"""
EXECUTIONS_POSTGRES = """CREATE TABLE IF NOT EXISTS chaos_executions (
    job_id bigint NOT NULL, attempt integer NOT NULL, worker_id text NOT NULL,
    PRIMARY KEY (job_id, attempt, worker_id))"""
EXECUTIONS_MARIADB = """CREATE TABLE IF NOT EXISTS chaos_executions (
    job_id BIGINT NOT NULL, attempt INT NOT NULL, worker_id VARCHAR(255) NOT NULL,
    PRIMARY KEY (job_id, attempt, worker_id))"""
RECORD = "INSERT INTO chaos_executions (job_id, attempt, worker_id) VALUES ({0}, {0}, {0}) ON CONFLICT DO NOTHING"
RECORD_MARIADB = "INSERT IGNORE INTO chaos_executions (job_id, attempt, worker_id) VALUES (?, ?, ?)"


# The task, the same for the producer and the workers.
def make_app(url: str, lease: float) -> tuple[Leased, object]:
    app = Leased(url)

    @app.task(name=TASK_NAME, lease=lease, max_attempts=MAX_ATTEMPTS, takes_context=True,
              backoff=Backoff(base=0.05, cap=0.2))
    def work(context, kind: str, millis: int) -> str:
        time.sleep(millis / 1000)  # deaf to cancellation, as a sync handler may well be
        if kind == "flaky" and context.attempt == 1:
            raise RuntimeError("flaky by design")
        if kind == "fatal":
            raise PermanentError("fails by design")
        _recorder().record(context.job_id, context.attempt, context.worker_id)
        return kind

    return app, work


class _Recorder:
    """The handler's own writes. SQLite: a connection per handler thread (the busy timeout queues
    them); PostgreSQL: one connection per process behind a lock, to stay well under max_connections."""

    def __init__(self, url: str):
        self.url = url
        self.sqlite = url.startswith("sqlite")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pg = None

    def record(self, job_id: int, attempt: int, worker_id: str) -> None:
        if self.sqlite:
            connection = getattr(self._local, "connection", None)
            if connection is None:
                connection = sqlite3.connect(sqlite_path(self.url), timeout=120, isolation_level=None,
                                             check_same_thread=False)
                self._local.connection = connection
            connection.execute(RECORD.format("?"), (job_id, attempt, worker_id))
            return
        if connections.is_mariadb(self.url):
            self._record_mariadb(job_id, attempt, worker_id)
            return
        import psycopg

        with self._lock:
            for tries in range(3):
                try:
                    if self._pg is None or self._pg.closed:
                        self._pg = psycopg.connect(self.url, autocommit=True)
                    self._pg.execute(RECORD.format("%s"), (job_id, attempt, worker_id))
                    return
                except psycopg.OperationalError:
                    if tries == 2:
                        raise
                    self._pg = None

    def _record_mariadb(self, job_id: int, attempt: int, worker_id: str) -> None:
        from leased.backends.mariadb import driver

        with self._lock:
            for tries in range(3):
                try:
                    if self._pg is None:
                        self._pg = connections.connect(self.url, autocommit=True)
                    connections.execute(self._pg, RECORD_MARIADB, (job_id, attempt, worker_id))
                    return
                except driver.OperationalError:
                    if tries == 2:
                        raise
                    self._pg = None


_RECORDER: _Recorder | None = None


def _recorder() -> _Recorder:
    global _RECORDER
    if _RECORDER is None:
        _RECORDER = _Recorder(os.environ["CHAOS_RECORD_URL"])
    return _RECORDER


def sqlite_path(url: str) -> str:
    path = url[len("sqlite://"):]
    return path.removeprefix("/")  # sqlite:///jobs.db is relative, sqlite:////tmp/jobs.db absolute


def worker_main(worker_id: str) -> None:
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {worker_id} %(levelname)s %(name)s %(message)s")
    app, _ = make_app(os.environ["LEASED_DATABASE_URL"], float(os.environ.get("CHAOS_LEASE", "1.5")))
    app.worker(concurrency=int(os.environ.get("CHAOS_CONCURRENCY", "4")), poll_interval=0.05,
               shutdown_grace=float(os.environ.get("CHAOS_SHUTDOWN_GRACE", SHUTDOWN_GRACE)),
               worker_id=worker_id).run()


# The soak.
@dataclass
class Settings:
    backend: str  # "sqlite" or "postgres"
    url: str  # a fresh database: a temp SQLite file, or a PostgreSQL URL with its own search_path
    log_dir: Path
    jobs: int = 1_500
    workers: int = 4
    concurrency: int = 4
    seconds: float = 8.0  # the chaos loop's time bound
    max_kills: int = 10  # its count bound (worker kills plus connection kills)
    pace: tuple[float, float] = (0.3, 0.8)  # seconds between kills, drawn uniformly
    lease: float = 1.5
    seed: int = 0
    drain_timeout: float = 300.0  # bounds a failing run only
    progress: bool = False


@dataclass
class Result:
    backend: str
    jobs: int
    workers: int
    concurrency: int
    lease: float
    worker_kills: int = 0
    connection_kills: int = 0  # connections terminated by pg_terminate_backend
    connection_rounds: int = 0  # how many times the chaos loop terminated connections
    chaos_seconds: float = 0.0
    elapsed: float = 0.0  # from starting the workers to the last job finished
    done: int = 0
    failed: int = 0
    failed_by_design: int = 0
    executions: int = 0
    duplicates: int = 0  # jobs with more than one execution
    extra_executions: int = 0
    lost: int = 0
    expired_attempts: int = 0
    lease_lost_attempts: int = 0
    spurious_losses: int = 0  # attempts expired / lease_lost while nobody disturbed their worker
    spurious: list[str] = field(default_factory=list)
    cancelled_in_logs: list[tuple[int, int, str]] = field(default_factory=list, repr=False)
    false_alarms: int = 0  # "lease lost; cancelling its handler" logged for an attempt that then ended done
    unexpected_exits: list[str] = field(default_factory=list)
    log_problems: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    log_dir: str = ""

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.elapsed if self.elapsed else 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def job_mix(count: int, lease: float, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    kinds = [kind for kind, _, _ in MIX]
    weights = [share for _, share, _ in MIX]
    ranges = {kind: span for kind, _, span in MIX}
    ranges["long"] = (int(lease * 1200), int(lease * 2000))
    mix = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        mix.append((kind, rng.randint(*ranges[kind])))
    return mix


class _Fleet:
    """The worker processes: slot n runs w{n}-{generation}; a killed one is replaced by the next generation."""

    def __init__(self, settings: Settings, token: str, record_url: str):
        self.settings, self.token, self.record_url = settings, token, record_url
        self.processes: dict[int, subprocess.Popen] = {}
        self.ids: dict[int, str] = {}
        self.generation: Counter = Counter()
        self.events: list[tuple[float, str, str]] = []  # (time.time(), worker id, "SIGKILL" / "cut" / "exited")
        self.unexpected: list[str] = []
        self.logs: list[Path] = []

    def application_name(self, worker_id: str) -> str:
        return f"chaos-{self.token}-{worker_id}"

    def start(self, slot: int) -> None:
        worker_id = f"w{slot}-{self.generation[slot]}"
        self.generation[slot] += 1
        url = self.settings.url
        if self.settings.backend == "postgres":
            url += f"&application_name={self.application_name(worker_id)}"
        log_path = self.settings.log_dir / f"{worker_id}.log"
        self.logs.append(log_path)
        env = {**os.environ, "LEASED_DATABASE_URL": url, "CHAOS_RECORD_URL": self.record_url,
               "CHAOS_LEASE": str(self.settings.lease), "CHAOS_CONCURRENCY": str(self.settings.concurrency),
               "CHAOS_SHUTDOWN_GRACE": str(SHUTDOWN_GRACE)}
        with open(log_path, "w") as log:
            self.processes[slot] = subprocess.Popen([sys.executable, str(HERE / "chaos.py"), worker_id], env=env,
                                                    stdout=log, stderr=subprocess.STDOUT)
        self.ids[slot] = worker_id

    def kill(self, slot: int) -> str:
        worker_id = self.ids[slot]
        process = self.processes[slot]
        self.events.append((time.time(), worker_id, "SIGKILL"))
        process.kill()
        process.wait()
        self.start(slot)
        return worker_id

    def check_alive(self) -> None:
        """A worker that exited on its own is a finding: note it, and replace it so the soak goes on."""
        for slot, process in list(self.processes.items()):
            if process.poll() is not None:
                self.unexpected.append(f"{self.ids[slot]} exited by itself with code {process.returncode}")
                self.events.append((time.time(), self.ids[slot], "exited"))
                self.start(slot)

    def terminate_all(self) -> list[str]:
        for process in self.processes.values():
            process.terminate()
        problems = []
        for slot, process in self.processes.items():
            try:
                code = process.wait(SHUTDOWN_GRACE + 15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                problems.append(f"{self.ids[slot]} did not exit within the grace period after SIGTERM")
                continue
            if code != 0:
                problems.append(f"{self.ids[slot]} exited with code {code} after SIGTERM")
        return problems

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()


def _terminate_connections(observer_url: str, pattern: str) -> int:
    import psycopg

    with psycopg.connect(observer_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name LIKE %s",
            (pattern,)).fetchall()
    return sum(1 for (terminated,) in rows if terminated)


def _prepare(settings: Settings, app: Leased, record_url: str) -> None:
    app.counts()  # schema in place before anyone races for it
    if settings.backend == "sqlite":
        with sqlite3.connect(sqlite_path(settings.url)) as connection:
            connection.execute(EXECUTIONS_SQLITE)
        connection.close()
    elif settings.backend == "mariadb":
        connection = connections.connect(settings.url, autocommit=True)
        connections.execute(connection, EXECUTIONS_MARIADB)
        connection.close()
    else:
        import psycopg

        with psycopg.connect(settings.url, autocommit=True) as connection:
            connection.execute(EXECUTIONS_POSTGRES)


def _enqueue(settings: Settings, work, mix: list[tuple[str, int]]) -> dict[int, str]:
    """Enqueue in transactions of 1,000 jobs (enqueue(connection=...)), so that 20,000 take seconds."""
    kinds: dict[int, str] = {}
    batch = 1_000
    if settings.backend == "sqlite":
        connection = sqlite3.connect(sqlite_path(settings.url), isolation_level=None, timeout=60)
        try:
            for start in range(0, len(mix), batch):
                connection.execute("BEGIN IMMEDIATE")
                for kind, millis in mix[start:start + batch]:
                    kinds[work.using(connection=connection).enqueue(kind, millis).id] = kind
                connection.execute("COMMIT")
        finally:
            connection.close()
    elif settings.backend == "mariadb":
        connection = connections.connect(settings.url)
        try:
            for start in range(0, len(mix), batch):
                for kind, millis in mix[start:start + batch]:
                    kinds[work.using(connection=connection).enqueue(kind, millis).id] = kind
                connection.commit()
        finally:
            connection.close()
    else:
        import psycopg

        with psycopg.connect(settings.url) as connection:
            for start in range(0, len(mix), batch):
                with connection.transaction():
                    for kind, millis in mix[start:start + batch]:
                        kinds[work.using(connection=connection).enqueue(kind, millis).id] = kind
    return kinds


def _executions(settings: Settings) -> list[tuple[int, int, str]]:
    if settings.backend == "sqlite":
        with sqlite3.connect(sqlite_path(settings.url)) as connection:
            rows = connection.execute("SELECT job_id, attempt, worker_id FROM chaos_executions").fetchall()
        connection.close()
        return rows
    if settings.backend == "mariadb":
        connection = connections.connect(settings.url, autocommit=True)
        try:
            return connections.execute(connection, "SELECT job_id, attempt, worker_id FROM chaos_executions")
        finally:
            connection.close()
    import psycopg

    with psycopg.connect(settings.url) as connection:
        return connection.execute("SELECT job_id, attempt, worker_id FROM chaos_executions").fetchall()


def _status(app: Leased) -> dict[str, int]:
    return app.counts().get("default", {})


def run(settings: Settings) -> Result:
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:8]
    rng = random.Random(settings.seed)
    record_url = settings.url
    observer_url = settings.url
    if settings.backend == "postgres":
        record_url += f"&application_name=chaos-{token}-handler"
        observer_url += f"&application_name=chaos-{token}-observer"
    app, work = make_app(observer_url, settings.lease)
    result = Result(settings.backend, settings.jobs, settings.workers, settings.concurrency, settings.lease,
                    log_dir=str(settings.log_dir))
    try:
        _prepare(settings, app, record_url)
        kinds = _enqueue(settings, work, job_mix(settings.jobs, settings.lease, settings.seed))
        fleet = _Fleet(settings, token, record_url)
        started = time.monotonic()
        try:
            for slot in range(settings.workers):
                fleet.start(slot)
            _chaos(settings, app, fleet, rng, result, observer_url)
            _drain(settings, app, fleet, started)
            result.elapsed = time.monotonic() - started
            result.violations += fleet.terminate_all()
        finally:
            fleet.kill_all()
        result.unexpected_exits = fleet.unexpected
        result.violations += [f"unexpected exit: {line}" for line in fleet.unexpected]
        _check_logs(settings, fleet, result)
        with open(settings.log_dir / "chaos.log", "w") as log:
            log.writelines(f"{when:.3f} {worker_id} {what}\n" for when, worker_id, what in fleet.events)
        _check(app, settings, kinds, _executions(settings), fleet.events, result)
    finally:
        app.close()
    return result


def _chaos(settings: Settings, app: Leased, fleet: _Fleet, rng: random.Random, result: Result,
           observer_url: str) -> None:
    """Kill until the count or the time bound, or until no job is left to disturb."""
    # Start once the workers are busy, so that the first kills land mid-run.
    _wait(lambda: _status(app).get("running", 0) > 0 and _status(app).get("done", 0) > 0, 120,
          "workers to start running jobs")
    began = time.monotonic()
    kills = 0
    while kills < settings.max_kills and time.monotonic() - began < settings.seconds:
        fleet.check_alive()
        counts = _status(app)
        if counts.get("pending", 0) + counts.get("running", 0) == 0:
            break
        # Alternate on PostgreSQL: SIGKILL first, then connections, then at random.
        cut = settings.backend == "postgres" and (kills == 1 or (kills > 1 and rng.random() < 0.5))
        if cut:
            if kills > 1 and rng.random() < 0.7:  # the first cut is of every worker, the others mostly of one
                slot = rng.randrange(settings.workers)
                targets = [fleet.ids[slot]]
                pattern = fleet.application_name(targets[0])
            else:
                targets = list(fleet.ids.values())
                pattern = f"chaos-{fleet.token}-w%"
            now = time.time()
            fleet.events += [(now, target, "cut") for target in targets]
            terminated = _terminate_connections(observer_url, pattern)
            result.connection_kills += terminated
            result.connection_rounds += 1
            if settings.progress:
                print(f"  chaos: terminated {terminated} connection(s) of {', '.join(targets)}", flush=True)
        else:
            victim = fleet.kill(rng.randrange(settings.workers))
            result.worker_kills += 1
            if settings.progress:
                print(f"  chaos: SIGKILL {victim} ({counts.get('done', 0)} done)", flush=True)
        kills += 1
        time.sleep(rng.uniform(*settings.pace))  # pacing between kills, not synchronisation
    result.chaos_seconds = time.monotonic() - began


def _drain(settings: Settings, app: Leased, fleet: _Fleet, started: float) -> None:
    last_report = time.monotonic()

    def drained() -> bool:
        nonlocal last_report
        fleet.check_alive()
        counts = _status(app)
        if settings.progress and time.monotonic() - last_report > 5:
            last_report = time.monotonic()
            print(f"  {time.monotonic() - started:6.1f}s {dict(counts)}", flush=True)
        return counts.get("pending", 0) == 0 and counts.get("running", 0) == 0

    _wait(drained, settings.drain_timeout, "every job to finish", interval=0.2)


def _wait(condition, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll the database until the condition holds; the timeout only bounds a failing run."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _check_logs(settings: Settings, fleet: _Fleet, result: Result) -> None:
    for path in fleet.logs:
        for line in path.read_text(errors="replace").splitlines():
            if match := CANCELLED_LINE.search(line):
                result.cancelled_in_logs.append((int(match[1]), int(match[2]), path.stem))
            if LOCKED in line:
                result.violations.append(f"{path.name}: {line.strip()}")
            if (" ERROR " in line or line.startswith("Traceback")) and "fails by design" not in line:
                result.log_problems.append(f"{path.name}: {line.strip()}")


def _check(app: Leased, settings: Settings, kinds: dict[int, str], executions: list[tuple[int, int, str]],
           events: list[tuple[float, str, str]], result: Result) -> None:
    """Every invariant, job by job, through the public API (app.get_job(id).history)."""
    violations = result.violations
    disturbances: dict[str, list[float]] = defaultdict(list)
    for when, worker_id, _ in events:
        disturbances[worker_id].append(when)

    def explained(attempt) -> bool:
        """Was the attempt's worker killed or cut off while the attempt was open?"""
        if attempt.finished_at is None:
            return False
        started, finished = attempt.started_at.timestamp() - 0.05, attempt.finished_at.timestamp() + 0.05
        return any(started <= when <= finished for when in disturbances[attempt.worker_id])

    def violation(text: str) -> None:
        if len(violations) < 200:
            violations.append(text)

    cancelled = {(job_id, attempt, worker_id) for job_id, attempt, worker_id in result.cancelled_in_logs}
    counts = _status(app)
    result.done, result.failed = counts.get("done", 0), counts.get("failed", 0)
    result.lost = settings.jobs - result.done - result.failed
    if result.lost:
        violation(f"lost jobs: {result.lost} of {settings.jobs} neither done nor failed ({dict(counts)})")
    for status in ("pending", "running", "cancelled"):
        if counts.get(status, 0):
            violation(f"{counts[status]} job(s) {status} after the drain")
    if len(kinds) != settings.jobs:
        violation(f"enqueued {len(kinds)} distinct jobs, expected {settings.jobs}")
    # Each finish counted once, in the transaction that wrote it, however its worker died.
    throughput = app.throughput(timedelta(days=1))
    counted = (sum(row.done for row in throughput), sum(row.failed for row in throughput))
    if counted != (result.done, result.failed):
        violation(f"counted per minute as they finished: {counted[0]} done, {counted[1]} failed; "
                  f"in the table: {result.done} done, {result.failed} failed")

    by_job: dict[int, set[tuple[int, str]]] = defaultdict(set)
    for job_id, attempt, worker_id in executions:
        by_job[job_id].add((attempt, worker_id))
    result.executions = len(executions)
    strays = set(by_job) - set(kinds)
    if strays:
        violation(f"executions recorded for unknown job ids {sorted(strays)[:10]}")

    for job_id, kind in kinds.items():
        job = app.get_job(job_id)
        history = job.history
        attempts = {(attempt.number, attempt.worker_id): attempt for attempt in history}
        outcomes = Counter(attempt.outcome for attempt in history)
        result.expired_attempts += outcomes[Outcome.EXPIRED]
        result.lease_lost_attempts += outcomes[Outcome.LEASE_LOST]
        for attempt in history:
            if attempt.outcome is Outcome.DONE and (job_id, attempt.number, attempt.worker_id) in cancelled:
                result.false_alarms += 1
            if attempt.outcome is None:
                violation(f"job {job_id}: attempt {attempt.number} by {attempt.worker_id} never closed")
            elif attempt.outcome in (Outcome.EXPIRED, Outcome.LEASE_LOST) and not explained(attempt):
                result.spurious_losses += 1
                if len(result.spurious) < 20:
                    result.spurious.append(f"job {job_id} ({kind}) attempt {attempt.number} by {attempt.worker_id} "
                                           f"ended {attempt.outcome} at {attempt.finished_at.timestamp():.3f} "
                                           f"(started {attempt.started_at.timestamp():.3f}) with no kill or cut "
                                           f"of that worker in between")
            elif attempt.outcome in (Outcome.CANCELLED, Outcome.SHUTDOWN):
                violation(f"job {job_id}: attempt {attempt.number} ended {attempt.outcome}, which no one asked for")
            elif attempt.outcome is Outcome.ERROR and not (
                    kind == "fatal" or (kind == "flaky" and attempt.number == 1)):
                violation(f"job {job_id} ({kind}): attempt {attempt.number} failed: {attempt.error_type}: "
                          f"{attempt.error_message}")
        if [attempt.number for attempt in history] != list(range(1, job.attempt + 1)):
            violation(f"job {job_id}: history numbers {[a.number for a in history]} for attempt {job.attempt}")

        ran = by_job.get(job_id, set())
        if kind == "fatal":
            if job.status is not JobStatus.FAILED:
                violation(f"job {job_id} (fatal by design) is {job.status}")
            else:
                result.failed_by_design += 1
            if not history or history[-1].outcome is not Outcome.ERROR:
                violation(f"job {job_id} (fatal): last attempt is not an error")
            if ran:
                violation(f"job {job_id} (fatal): executions recorded {sorted(ran)}")
            continue
        if job.status is not JobStatus.DONE:
            violation(f"job {job_id} ({kind}) is {job.status}, not done; last error: {job.last_error}")
            continue
        if outcomes[Outcome.DONE] != 1:
            violation(f"job {job_id}: {outcomes[Outcome.DONE]} attempts ended done")
        final = history[-1] if history else None
        if final is None or final.outcome is not Outcome.DONE or final.number != job.attempt:
            violation(f"job {job_id}: final attempt is not the done one: {final}")
            continue
        if (final.number, final.worker_id) not in ran:
            violation(f"job {job_id}: done by {final.worker_id} on attempt {final.number}, but that attempt "
                      f"recorded no execution (recorded: {sorted(ran)})")
        extra = ran - {(final.number, final.worker_id)}
        if extra:
            result.duplicates += 1
            result.extra_executions += len(extra)
        for number, worker_id in sorted(extra):
            attempt = attempts.get((number, worker_id))
            if attempt is None:
                violation(f"job {job_id}: execution by {worker_id} on attempt {number} is not in its history")
            elif attempt.outcome not in (Outcome.EXPIRED, Outcome.LEASE_LOST):
                violation(f"job {job_id}: a second execution on attempt {number} by {worker_id}, "
                          f"which ended {attempt.outcome} (only expired or lease_lost may run twice)")
            elif not explained(attempt):
                violation(f"job {job_id}: ran twice, the extra run on attempt {number} by {worker_id}, a worker "
                          f"neither killed nor cut off during that attempt (it ended {attempt.outcome})")


# The report.
HEADER = ("| backend | jobs | workers × concurrency | lease | worker kills | connections killed | duplicates "
          "| lost | failed by design | elapsed | jobs/s |")
RULE = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"


def table_row(result: Result) -> str:
    connections = (f"{result.connection_kills} ({result.connection_rounds} rounds)"
                   if result.backend == "postgres" else "n/a")
    return (f"| {result.backend} | {result.jobs:,} | {result.workers} × {result.concurrency} | {result.lease:g} s "
            f"| {result.worker_kills} | {connections} | {result.duplicates} | {result.lost} "
            f"| {result.failed_by_design} | {result.elapsed:.1f} s | {result.jobs_per_second:,.0f} |")


def details(result: Result) -> str:
    lines = [
        (f"- {result.backend}: {result.executions:,} executions recorded, {result.extra_executions} extra "
         f"({result.duplicates} jobs ran twice); attempts expired: {result.expired_attempts}, "
         f"lease_lost: {result.lease_lost_attempts}, with no kill or cut of their worker: {result.spurious_losses}; "
         f"chaos lasted {result.chaos_seconds:.1f} s"),
        (f"- {result.backend}: {result.false_alarms} attempt(s) logged 'lease lost; cancelling its handler' "
         f"and then ended done (false alarms)"),
    ]
    lines += [f"- {result.backend}: unexplained lease loss: {text}" for text in result.spurious[:5]]
    if result.log_problems:
        lines.append(f"- {result.backend}: {len(result.log_problems)} ERROR/Traceback log line(s), first: "
                     f"{result.log_problems[0]}")
    lines += [f"- VIOLATION ({result.backend}): {text}" for text in result.violations]
    return "\n".join(lines)


if __name__ == "__main__":
    worker_main(sys.argv[1])
