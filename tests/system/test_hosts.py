"""Many worker hosts on one PostgreSQL: each a network namespace of the test's own (tests/hosts.py)
reaching the server over a veth link, running a real `leased worker` (tests/programs/hosts_app.py).

A host cut off mid-job, a host whose clock is an hour ahead, and what a worker process costs in
connections (docs/reliability.md, "Many hosts"). Without `ip` or root the tests skip, unless
LEASED_REQUIRE_NETNS=1 (CI sets it) makes that a failure.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

import hosts
from conftest import POSTGRES_URL, REQUIRE_POSTGRES, _POSTGRES_PROBLEM, faketime_env, needs_faketime, postgres_schema, \
    wait_for
from leased import JobStatus, Leased, Outcome
from paths import PROGRAMS, pythonpath

pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.xdist_group("hosts")]
LEASE = 2.0  # hosts_app's tasks
RETRY_IN = 2.5  # hosts_app's flaky: its one retry is due this long after its failure

_PROBLEM = hosts.missing()
if _PROBLEM:
    if os.environ.get("LEASED_REQUIRE_NETNS") == "1":
        raise RuntimeError(f"{_PROBLEM}, and LEASED_REQUIRE_NETNS=1 forbids skipping")
    pytest.skip(_PROBLEM, allow_module_level=True)
if _POSTGRES_PROBLEM:
    if REQUIRE_POSTGRES:
        raise RuntimeError(_POSTGRES_PROBLEM)
    pytest.skip(_POSTGRES_PROBLEM, allow_module_level=True)


@pytest.fixture(scope="module")
def fleet():
    with hosts.worker_hosts(3, server=_server_address()) as (machines, relay):
        yield machines, relay


def _server_address() -> tuple[str, int]:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(POSTGRES_URL)
    return params.get("host", "127.0.0.1"), int(params.get("port", 5432))


@pytest.fixture
def schema_url():
    with postgres_schema() as url:
        app = Leased(url)
        app.migrate()  # before the workers, which would race to make the schema
        app.close()
        yield url


class Workers:
    """`leased worker` processes started inside hosts; each logs to tmp_path/<host>-<n>.log."""

    def __init__(self, schema_url: str, markers: Path):
        self.schema_url, self.markers = schema_url, markers
        self.started: list[tuple[subprocess.Popen, Path]] = []

    def start(self, host: hosts.Host, *options: str, clock: str | None = None, **extra_env: str) -> subprocess.Popen:
        """The worker's sessions carry the application name leased-host-<host>, for pg_stat_activity."""
        url = host.url(self.schema_url)
        url += f"{'&' if '?' in url else '?'}application_name=leased-host-{host.name}"
        env = {**os.environ, "LEASED_DATABASE_URL": url, "HOSTS_HOST": host.name, "HOSTS_MARKERS": str(self.markers),
               "PYTHONPATH": pythonpath(), **extra_env}
        if clock:
            env.update(faketime_env(clock))
        log = self.markers / f"{host.name}-{len(self.started)}.log"
        process = subprocess.Popen(
            host.command(sys.executable, "-m", "leased.cli.main", "worker", "hosts_app:app", "--poll-interval", "0.2s",
                         *options),
            cwd=PROGRAMS, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        self.started.append((process, log))
        return process

    def log(self, process: subprocess.Popen) -> str:
        return next(log for started, log in self.started if started is process).read_text()

    def stop_all(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                process.kill()
            process.wait()


@pytest.fixture
def workers(schema_url, tmp_path):
    started = Workers(schema_url, tmp_path)
    yield started
    started.stop_all()


def worker_of(process: subprocess.Popen, app: Leased) -> str:
    """The worker id a process registered (`leased worker` names itself host:pid:random)."""
    return wait_for(lambda: next((w.id for w in app.workers() if w.pid == process.pid), None),
                    message=f"worker {process.pid} to register")


def test_a_host_cut_off_mid_job_is_cancelled_recovered_elsewhere_and_fenced(fleet, workers, schema_url, tmp_path):
    """Host a's link goes down while its two handlers run: its worker cancels them before their
    leases can run out, the other hosts run the jobs once the leases expire, and when the link
    comes back everything host a sends late (the renewal it sent into the cut, its account of
    the lapse, its handlers' results) changes no job: one done attempt each, from another host."""
    (cut_host, *others), _ = fleet
    app = Leased(schema_url)
    hold = app.task(name="hold", lease=LEASE, takes_context=True, max_attempts=3)(lambda context, mode: None)
    cut = workers.start(cut_host, "--concurrency", "2")
    cut_id = worker_of(cut, app)
    jobs = [hold.enqueue("block") for _ in range(2)]
    wait_for(lambda: all((tmp_path / f"{job.id}-1.started").exists() for job in jobs), message="both jobs running")
    assert {app.get_job(job.id).lease_owner for job in jobs} == {cut_id}
    rest = [workers.start(host, "--concurrency", "2") for host in others]
    rest_ids = {worker_of(process, app) for process in rest}

    cut_host.cut()
    cut_at = time.monotonic()
    try:
        wait_for(lambda: all(app.get_job(job.id).status is JobStatus.DONE for job in jobs), timeout=30,
                 message="the other hosts to finish the cut host's jobs")
        recovered = time.monotonic() - cut_at
        # The server cannot tell: the cut host's sessions are still there, idle.
        assert connections_by_name(schema_url).get(f"leased-host-{cut_host.name}", 0) >= WORKER_CONNECTIONS
    finally:
        # Back at once: the cut worker's give-backs wait 5 s for a pooled connection (its one idle
        # connection carries the renewal sent into the cut), then connect directly, which fails
        # while the link is down, and its account of the lapse would not be written at all.
        cut_host.restore()
    print(f"\ncut host's jobs done elsewhere {recovered:.2f}s after the cut (lease {LEASE} s)")
    # Its handlers were told to stop by the worker itself, on its own clock, with no database to
    # ask, and before another host started the job (file times and the server's now() are one
    # machine's clock here).
    for job in jobs:
        cancelled = tmp_path / f"{job.id}-1.cancelled"
        assert cancelled.read_text() == "lease lost"
        assert cancelled.stat().st_mtime < app.get_job(job.id).history[1].started_at.timestamp()
    assert "no answer from the database, as across a network cut); cancelling its handler" in workers.log(cut)
    restored_at = time.monotonic()
    for job in jobs:  # the deaf handlers return their late results now
        (tmp_path / f"release-{job.id}").touch()
    # Its account of the lapse reaches the database once the link is back (its release beside it
    # matches no lease any more): the late writes arrived, and changed nothing but that record.
    wait_for(lambda: all("could not renew" in (app.get_job(job.id).history[0].error_message or "") for job in jobs),
             timeout=60, message="the cut worker's late writes to arrive")
    print(f"its late writes arrived {time.monotonic() - restored_at:.2f}s after the link came back")
    cut.send_signal(signal.SIGTERM)
    assert cut.wait(60) == 0, workers.log(cut)
    log = workers.log(cut)
    # The renewal in flight at the cut was answered late. Sent into the cut, it arrived after the
    # other hosts took the jobs and renewed nothing (0 of 2); sent just before, it reached the server
    # and only its answer was lost (2 of 2, leases the worker had already given up). Either way the
    # fence held: the checks below find no late write of its recorded.
    assert re.search(r"renewal answered after [\d.]+ s: [02] of 2 lease\(s\) still held", log), log
    assert "Traceback" not in log, log
    for job in jobs:
        assert (tmp_path / f"{job.id}-1.returned").read_text() == cut_host.name  # its late result, dropped
        done = app.get_job(job.id)
        assert done.status is JobStatus.DONE and done.attempt == 2
        assert done.result in {f"done by {host.name}" for host in others}
        assert [(a.number, a.outcome) for a in done.history] == [(1, Outcome.EXPIRED), (2, Outcome.DONE)]
        assert done.history[0].worker_id == cut_id and done.history[1].worker_id in rest_ids
        assert "handler cancelled, result discarded" in done.history[0].error_message
        assert not (tmp_path / f"{job.id}-3.started").exists()
    for process in rest:
        process.terminate()
        assert process.wait(60) == 0
    app.close()


def test_a_host_an_hour_ahead_runs_by_the_databases_clock(fleet, workers, schema_url, tmp_path):
    """libfaketime sets one host's worker an hour ahead (its monotonic clock untouched, as a skewed
    host's is): its leases, its retry and its look at other hosts' leases all go by now() on the
    server, so nothing changes."""
    needs_faketime()
    (steady_host, ahead_host, _), _ = fleet
    app = Leased(schema_url)
    hold = app.task(name="hold", lease=LEASE, takes_context=True, max_attempts=3)(lambda context, mode: None)
    flaky = app.task(name="flaky", lease=LEASE, takes_context=True, max_attempts=2)(lambda context: None)
    steady = workers.start(steady_host, "--concurrency", "1")
    steady_id = worker_of(steady, app)
    live = hold.enqueue("wait")  # the steady host's one slot, for the whole test
    wait_for(lambda: (tmp_path / f"{live.id}-1.started").exists(), message="the steady host's job to start")
    ahead = workers.start(ahead_host, "--concurrency", "2", clock="+1h")
    ahead_id = worker_of(ahead, app)
    logged_at = datetime.strptime(workers.log(ahead)[:23], "%Y-%m-%d %H:%M:%S.%f")
    assert logged_at - datetime.now() > timedelta(minutes=59), "the worker's clock is not an hour ahead"
    assert all(worker.alive for worker in app.workers())  # its heartbeats are fresh by the server's clock

    own = hold.enqueue("wait")
    wait_for(lambda: (tmp_path / f"{own.id}-1.started").exists(), message="the ahead host's job to start")
    with psycopg.connect(schema_url) as connection:
        owner, expires_in = connection.execute(
            "SELECT lease_owner, extract(epoch FROM lease_expires_at - now()) FROM leased_jobs WHERE id = %s",
            (own.id,)).fetchone()
    assert owner == ahead_id and 0 < expires_in <= LEASE  # not an hour off

    # Its retry is due RETRY_IN seconds after the failure by the server's clock; meanwhile its
    # claims looked for expired leases (once a second) more than twice, and left the steady host's.
    retried = flaky.enqueue()
    done = wait_for(lambda: (job := app.get_job(retried.id)).status is JobStatus.DONE and job, timeout=30,
                    message="the retried job to be done")
    assert [(a.worker_id, a.outcome) for a in done.history] == [(ahead_id, Outcome.ERROR), (ahead_id, Outcome.DONE)]
    waited = (done.history[1].started_at - done.history[0].finished_at).total_seconds()
    assert RETRY_IN <= waited < RETRY_IN + 3, waited
    print(f"\nan hour ahead: lease expires {expires_in:.2f}s after the server's now(); retry began {waited:.2f}s after"
          f" the failure (due after {RETRY_IN} s)")
    for job, worker_id in ((live, steady_id), (own, ahead_id)):
        still = app.get_job(job.id)
        assert (still.status, still.lease_owner, still.attempt) == (JobStatus.RUNNING, worker_id, 1)

    for job in (live, own):
        (tmp_path / f"release-{job.id}").touch()
    for job, worker_id in ((live, steady_id), (own, ahead_id)):
        finished = wait_for(lambda: (found := app.get_job(job.id)).is_finished and found, message="the held jobs")
        assert [(a.worker_id, a.outcome) for a in finished.history] == [(worker_id, Outcome.DONE)]
    for process in (steady, ahead):
        process.terminate()
        assert process.wait(60) == 0
    app.close()


def sessions(connection: psycopg.Connection) -> dict[str, int]:
    """The sessions PostgreSQL has per application_name of the hosts' workers."""
    return dict(connection.execute(
        "SELECT application_name, count(*) FROM pg_stat_activity WHERE application_name LIKE 'leased-host-%'"
        " GROUP BY 1").fetchall())


def connections_by_name(url: str) -> dict[str, int]:
    with psycopg.connect(url) as connection:
        return sessions(connection)


class Peaks(threading.Thread):
    """The most sessions each worker had at once, sampled every 20 ms until stopped."""

    def __init__(self, url: str):
        super().__init__(name="connection-peaks", daemon=True)
        self.url, self.peaks, self.stopping = url, {}, threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as connection:
            while not self.stopping.wait(0.02):
                for name, count in sessions(connection).items():
                    self.peaks[name] = max(count, self.peaks.get(name, 0))

    def __enter__(self) -> Peaks:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stopping.set()
        self.join()


# The worker pool's one (the worker's own writers take turns on it), the claims pool's one and the
# listener, idle or not; a pruning pass adds its own for the pass.
WORKER_CONNECTIONS = 3


def test_a_worker_holds_the_same_connections_at_concurrency_1_10_and_100(fleet, workers, schema_url, tmp_path):
    machines, relay = fleet
    app = Leased(schema_url)
    hold = app.task(name="hold", lease=LEASE, takes_context=True, max_attempts=3)(lambda context, mode: None)
    levels = dict(zip(machines, (1, 10, 100), strict=True))
    # Finished jobs past their retention, for the pruning pass each worker starts with: the one
    # that gets the pruners' lock deletes them (a pass once grew the pool to two for good).
    old = hold.enqueue_many([("quick",)] * 5)
    with psycopg.connect(schema_url, autocommit=True) as connection:
        connection.execute("UPDATE leased_jobs"
                           " SET status = 'done', attempt = 1, finished_at = now() - interval '8 days'"
                           " WHERE id = ANY(%s)", ([job.id for job in old],))
    processes = {host: workers.start(host, "--concurrency", str(level), HOSTS_PRUNE_AT_ONCE="1")
                 for host, level in levels.items()}
    for process in processes.values():
        worker_of(process, app)
    names = {f"leased-host-{host.name}": host for host in machines}
    wait_for(lambda: all(app.backend.get_job(job.id) is None for job in old), message="a pruning pass")
    # Every worker's first pass, not only the one that took the lock: a pass that starts late
    # would hold its connection of its own while the peaks are sampled.
    wait_for(lambda: all((tmp_path / f"pruned-{host.name}").exists() for host in machines),
             message="every worker's first pruning pass")

    def idle() -> dict[str, int] | bool:
        counts = connections_by_name(schema_url)
        # Every connection a host makes comes through its link, and each is one of the worker's.
        through_links = {relay.open[host.gateway] for host in machines}
        return all(counts.get(name) == WORKER_CONNECTIONS for name in names) and through_links == {WORKER_CONNECTIONS} \
            and counts

    idle_counts = wait_for(idle, message=f"each worker to hold {WORKER_CONNECTIONS} connections")

    with Peaks(schema_url) as peaks:
        held = hold.enqueue_many([("wait",)] * sum(levels.values()))  # every slot of every worker busy
        wait_for(lambda: app.counts()["default"]["running"] == len(held), message="every slot busy")
        renewed = app.get_job(held[0].id).lease_expires_at
        wait_for(lambda: app.get_job(held[0].id).lease_expires_at > renewed, message="a renewal of every lease")
        for job in held:
            (tmp_path / f"release-{job.id}").touch()
        burst = hold.enqueue_many([("quick",)] * 300)
        wait_for(lambda: app.counts()["default"]["done"] == len(held) + len(burst), timeout=60,
                 message="every job done")
    print(f"\nsessions per worker, idle: {idle_counts}; at most, under load: {peaks.peaks}")
    for name, host in names.items():
        assert peaks.peaks[name] == WORKER_CONNECTIONS, (levels[host], peaks.peaks)
    for process in processes.values():
        process.terminate()
        assert process.wait(60) == 0
    # A session leaves pg_stat_activity when its server process has finished, a moment after the
    # client's socket closed: wait for that, rather than read it the instant the workers exited.
    wait_for(lambda: connections_by_name(schema_url) == {}, message="the exited workers' sessions to end")
    app.close()
