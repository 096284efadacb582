"""Real worker processes, really killed: SIGKILL mid-job, and SIGSTOP past the lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from conftest import kill_worker_sessions, needs_faketime, raw_scalar, raw_sql, wait_for
from leased import JobStatus, Outcome, Progress
from paths import PROGRAMS

pytestmark = [pytest.mark.slow, pytest.mark.system]


@pytest.fixture
def spawn(worker_processes):
    return lambda worker_id, clock=None, **env: worker_processes("crash_app.py", worker_id, clock=clock, **env)


@pytest.fixture
def hold(app):
    """The producer's view of crash_app's task: same name and options; the workers run the real one."""

    @app.task(name="hold", lease=1.0, takes_context=True, max_attempts=3)
    def hold(context, mode): ...

    return hold


def test_sigkilled_worker_job_is_finished_by_another_after_the_lease(app, hold, spawn):
    job = hold.enqueue("forever")
    first = spawn("worker-a")
    wait_for(lambda: app.get_job(job.id).lease_owner == "worker-a", message="worker-a to claim")
    (running,) = app.get_job(job.id).history  # shown from the job row: the record is written at the end
    assert (running.worker_id, running.outcome) == ("worker-a", None)
    first.kill()
    first.wait()
    killed_at = time.monotonic()
    spawn("worker-b")
    wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="worker-b to finish the job")
    print(f"\nkilled worker's job done elsewhere {time.monotonic() - killed_at:.2f}s after SIGKILL (lease 1 s)")
    done = app.get_job(job.id)
    assert done.result == "done by worker-b"
    assert [(a.number, a.worker_id, a.outcome) for a in done.history] == [
        (1, "worker-a", Outcome.EXPIRED), (2, "worker-b", Outcome.DONE)]
    assert done.history[0].started_at == running.started_at  # the crashed attempt's record, from its job row


def test_a_job_that_waits_outlives_its_killed_workers_and_sees_its_signal_once(app, spawn, tmp_path):
    """SIGKILL while the job sleeps, and while it waits for a signal that is then committed with no
    worker running: it resumes once each time, and its handler sees the payload once."""

    @app.task(name="await_go", lease=10.0, takes_context=True)
    def await_go(context): ...

    job = await_go.enqueue()
    waits = app.backend.job_wait
    first = spawn("worker-a")
    wait_for(lambda: app.get_job(job.id).status is JobStatus.SLEEPING, message="the job to sleep")
    first.kill()
    first.wait()
    second = spawn("worker-b")  # wakes it once its sleep ends, and runs it up to its wait_for
    wait_for(lambda: (wait := waits(job.id)) is not None and wait.signal_name == "go", message="the job to wait for go")
    second.kill()
    second.wait()
    app.signal(job.id, "go", {"n": 1})  # committed while no worker runs: the job is pending again
    assert app.get_job(job.id).status is JobStatus.PENDING
    spawn("worker-c")
    wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="worker-c to finish the job")
    done = app.get_job(job.id)
    assert done.result == {"n": 1}
    assert [(a.worker_id, a.outcome) for a in done.history] == [
        ("worker-a", Outcome.WAITED), ("worker-b", Outcome.WAITED), ("worker-c", Outcome.DONE)]
    assert [path.name for path in tmp_path.glob(f"seen-{job.id}-*")] == [f"seen-{job.id}-3"]


def test_a_killed_attempt_keeps_the_progress_its_last_renewal_carried(app, hold, spawn):
    """TaskContext.progress: the expired attempt's record and the job keep what the dead worker's
    last renewal carried; the next attempt, which reports nothing, leaves it as the job's."""
    job = hold.enqueue("progress")
    first = spawn("worker-a")
    wait_for(lambda: app.get_job(job.id).progress is not None, message="worker-a's report, on a renewal")
    first.kill()
    first.wait()
    spawn("worker-b")
    wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="worker-b to finish the job")
    done = app.get_job(job.id)
    halfway = Progress(7, 14, "halfway there", attempt=1)
    assert [(a.worker_id, a.outcome, a.progress) for a in done.history] == [
        ("worker-a", Outcome.EXPIRED, halfway), ("worker-b", Outcome.DONE, None)]
    assert done.progress == halfway


def test_stopped_worker_cannot_write_after_losing_its_lease(app, hold, spawn, tmp_path):
    job = hold.enqueue("late")
    first = spawn("worker-a")
    wait_for(lambda: (tmp_path / "started-worker-a").exists(), message="worker-a's handler to start")
    first.send_signal(signal.SIGSTOP)
    second = spawn("worker-b")
    wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="worker-b to finish the job")
    second.terminate()
    assert second.wait(30) == 0

    first.send_signal(signal.SIGCONT)
    wait_for(lambda: (tmp_path / "returned-worker-a").exists(), message="worker-a's handler to return")
    first.terminate()
    assert first.wait(30) == 0
    log = (tmp_path / "worker-a.log").read_text()
    assert "lease lost" in log

    done = app.get_job(job.id)
    assert done.result == "done by worker-b" and done.attempt == 2
    assert [(a.worker_id, a.outcome) for a in done.history] == [
        ("worker-a", Outcome.EXPIRED), ("worker-b", Outcome.DONE)]


def test_several_worker_and_producer_processes_share_one_database(app, spawn, database_url, tmp_path):
    app.counts()  # schema in place before the processes race for it
    workers = [spawn(f"worker-{n}") for n in range(4)]
    producer = ("import os, sys; sys.path.insert(0, sys.argv[1]); import crash_app\n"
                "for n in range(150): crash_app.share.enqueue()")
    env = {**os.environ, "LEASED_DATABASE_URL": database_url}
    producers = [subprocess.Popen([sys.executable, "-c", producer, str(PROGRAMS)], env=env,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for process in producers:
        _, errors = process.communicate(timeout=120)
        assert process.returncode == 0, errors
    wait_for(lambda: app.counts().get("default", {}).get("done") == 300, timeout=120, message="300 jobs done")
    # A worker registers after it installs its signal handlers; the others may drain the 300 jobs
    # before a slow one has started, and a SIGTERM before then kills it outright.
    wait_for(lambda: len(app.workers()) == 4, timeout=60, message="all four workers started")
    for process in workers:
        process.terminate()
        assert process.wait(30) == 0
    logs = "".join((tmp_path / f"worker-{n}.log").read_text() for n in range(4))
    assert "locked" not in logs and "Traceback" not in logs
    done = [app.get_job(job.id) for job in app.list_jobs(status="done", limit=300)]
    assert {job.history[0].worker_id for job in done} <= {f"worker-{n}" for n in range(4)}
    ran_again = {job.id: [(a.worker_id, a.outcome, a.error) for a in job.history]
                 for job in done if len(job.history) != 1}
    assert not ran_again, f"jobs that ran more than once: {ran_again}"


def test_poison_job_that_kills_its_worker_is_failed_after_its_attempts(app, hold, spawn):
    job = hold.enqueue("exit")
    for generation in range(6):  # a supervisor restarting the worker each time it dies
        process = spawn(f"worker-{generation}")
        wait_for(lambda: process.poll() is not None or app.get_job(job.id).status is JobStatus.FAILED,
                 message="the worker to die or the job to fail")
        if app.get_job(job.id).status is JobStatus.FAILED:
            break
        assert process.returncode == 3
    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and failed.attempt == 3
    assert [a.outcome for a in failed.history] == [Outcome.EXPIRED] * 3
    assert "stopped renewing" in failed.last_error and "crashed" in failed.history[-1].error_message


def test_a_handler_raising_keyboard_interrupt_fails_by_its_attempts_and_the_worker_process_lives(app, hold, spawn):
    @app.task(name="interrupting", max_attempts=2)
    def interrupting(): ...

    job = interrupting.enqueue()
    worker = spawn("worker-a")
    failed = wait_for(lambda: (found := app.get_job(job.id)).is_finished and found, message="the job to end")
    assert failed.status is JobStatus.FAILED and failed.attempt == 2
    assert [(a.outcome, a.error_type) for a in failed.history] == [(Outcome.ERROR, "KeyboardInterrupt")] * 2
    after = hold.enqueue("sleep")
    wait_for(lambda: app.get_job(after.id).status is JobStatus.DONE, message="the same worker to go on")
    assert worker.poll() is None and app.get_job(after.id).result == "done by worker-a"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0


def test_sigterm_during_a_burst_finishes_running_jobs_and_leaves_none_running(app, hold, spawn):
    jobs = [hold.enqueue("sleep") for _ in range(20)]
    worker = spawn("worker-a")
    wait_for(lambda: app.counts()["default"]["done"] >= 2, message="the burst to be under way")
    worker.terminate()
    assert worker.wait(30) == 0
    counts = app.counts()["default"]
    assert counts["running"] == 0 and counts["done"] + counts["pending"] == len(jobs)
    for job in jobs:
        finished = app.get_job(job.id)
        assert finished.status in (JobStatus.DONE, JobStatus.PENDING)
        assert all(a.outcome is Outcome.DONE for a in finished.history)  # nothing cut short


def test_second_sigterm_forces_exit_and_releases_jobs_at_once(app, hold, spawn, tmp_path):
    jobs = [hold.enqueue("forever") for _ in range(2)]
    worker = spawn("worker-a")
    wait_for(lambda: app.counts()["default"]["running"] == 2, message="both jobs running")
    worker.terminate()
    wait_for(lambda: "stopping" in (tmp_path / "worker-a.log").read_text(), message="the first signal to land")
    worker.terminate()
    assert worker.wait(30) == 0
    for job in jobs:
        released = app.get_job(job.id)
        assert released.status is JobStatus.PENDING and released.history[0].outcome is Outcome.SHUTDOWN


# Faults of a database server, run on the server databases (not skipped on SQLite, which has no server).
postgres_only = pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
servers_only = pytest.mark.parametrize("backend_name", ["postgres", "mariadb"], indirect=True)


@servers_only
def test_killed_connections_are_replaced_and_no_job_is_lost(app, hold, spawn, tmp_path):
    jobs = [hold.enqueue("sleep") for _ in range(30)]
    worker = spawn("worker-a")
    wait_for(lambda: app.counts()["default"]["done"] >= 3, message="work under way")
    assert kill_worker_sessions(app) >= 1
    wait_for(lambda: app.counts()["default"]["done"] == len(jobs), timeout=60, message="every job done")
    worker.terminate()
    assert worker.wait(30) == 0
    assert "Traceback" not in (tmp_path / "worker-a.log").read_text()


@pytest.mark.alone
@pytest.mark.skipif(os.environ.get("LEASED_TEST_RESTART_POSTGRES") != "1",
                    reason="restarts the PostgreSQL server; set LEASED_TEST_RESTART_POSTGRES=1 (CI does)")
@postgres_only
def test_postgres_restart_mid_run_loses_nothing(app, hold, spawn, tmp_path):
    jobs = [hold.enqueue("sleep") for _ in range(30)]
    worker = spawn("worker-a")
    wait_for(lambda: app.counts()["default"]["done"] >= 3, message="work under way")
    cluster = sorted(os.listdir("/etc/postgresql"))[0]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", cluster, "main", "restart"], check=True)
    wait_for(lambda: _counts_or_none(app) and _counts_or_none(app)["done"] == len(jobs), timeout=90,
             message="every job done after the restart")
    _survived_the_restart(worker, tmp_path)


def _survived_the_restart(worker, tmp_path) -> None:
    worker.terminate()
    assert worker.wait(30) == 0
    log = (tmp_path / "worker-a.log").read_text()
    # The outage was noticed and said in a line: by the loops that failed, or by the checkout that
    # found the pooled connections closed before any call could fail on them.
    assert "database unavailable" in log or "could not" in log or "closed pooled connections" in log
    assert "Traceback" not in log


@pytest.mark.alone
@pytest.mark.skipif(os.environ.get("LEASED_TEST_RESTART_MARIADB") != "1",
                    reason="restarts the MariaDB server; set LEASED_TEST_RESTART_MARIADB=1 (CI does)")
@pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
def test_mariadb_restart_mid_run_loses_nothing(app, hold, spawn, tmp_path):
    jobs = [hold.enqueue("sleep") for _ in range(30)]
    worker = spawn("worker-a")
    wait_for(lambda: app.counts()["default"]["done"] >= 3, message="work under way")
    subprocess.run(["mysqladmin", "-h127.0.0.1", "-uroot", "shutdown"], check=True)
    # Over TCP mysqladmin does not wait for the exit; a start while the old server runs would do nothing.
    wait_for(lambda: subprocess.run(["start-stop-daemon", "--status", "--exec", "/usr/sbin/mariadbd"]).returncode != 0,
             timeout=60, message="MariaDB down")
    subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd"],
                   check=True)
    wait_for(lambda: subprocess.run(["mysqladmin", "-h127.0.0.1", "-uroot", "ping"],
                                    capture_output=True).returncode == 0, timeout=60, message="MariaDB back up")
    wait_for(lambda: _counts_or_none(app) and _counts_or_none(app)["done"] == len(jobs), timeout=90,
             message="every job done after the restart")
    _survived_the_restart(worker, tmp_path)


def _counts_or_none(app):
    try:
        return app.counts()["default"]
    except Exception:  # the test's own connections die in the restart too
        return None


# Clock skew between hosts, run on the server databases: there the server's clock decides every lease.
# On SQLite the clock of the process that writes decides, and every process that opens the file
# runs on one host with one clock, so there is no skew to survive (libfaketime would fake one).
@servers_only
def test_worker_with_a_clock_an_hour_ahead_does_not_steal_live_leases(app, hold, spawn):
    needs_faketime()
    held = [hold.enqueue("forever") for _ in range(2)]  # both of worker-a's slots: the probe is not for it
    spawn("worker-a")
    wait_for(lambda: all(app.get_job(job.id).lease_owner == "worker-a" for job in held), message="worker-a to claim")
    spawn("worker-ahead", clock="+1h")
    # A job due 2.5 s from now (database clock): by the time worker-ahead has run it, its
    # reclaimer has looked at worker-a's lease more than twice.
    probe = hold.using(run_after=timedelta(seconds=2.5)).enqueue("quick")
    wait_for(lambda: app.get_job(probe.id).status is JobStatus.DONE, message="worker-ahead to run the probe")
    assert app.get_job(probe.id).history[0].worker_id == "worker-ahead"
    for job in held:
        still = app.get_job(job.id)
        assert (still.lease_owner, still.attempt, still.status) == ("worker-a", 1, JobStatus.RUNNING)


@servers_only
def test_worker_with_a_clock_an_hour_behind_does_not_keep_an_expired_lease(app, hold, spawn, tmp_path):
    needs_faketime()
    job = hold.enqueue("late")
    behind = spawn("worker-behind", clock="-1h")
    wait_for(lambda: (tmp_path / "started-worker-behind").exists(), message="its handler to start")
    behind.send_signal(signal.SIGSTOP)
    spawn("worker-b")
    wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="the lease to expire on time")
    behind.send_signal(signal.SIGCONT)
    wait_for(lambda: (tmp_path / "returned-worker-behind").exists(), message="the late handler to return")
    behind.terminate()
    assert behind.wait(30) == 0
    done = app.get_job(job.id)
    assert done.result == "done by worker-b"
    assert [(a.worker_id, a.outcome) for a in done.history] == [
        ("worker-behind", Outcome.EXPIRED), ("worker-b", Outcome.DONE)]


def test_a_pause_survives_a_worker_restart(app, hold, spawn):
    app.pause("billing", force=True)
    waiting = hold.using(queue_name="billing").enqueue("quick")
    other = hold.using(queue_name="other").enqueue("quick")
    first = spawn("worker-a")
    wait_for(lambda: app.get_job(other.id).status is JobStatus.DONE, message="worker-a to run the other queue")
    first.kill()
    first.wait()
    spawn("worker-b")
    later = hold.using(queue_name="other").enqueue("quick")
    wait_for(lambda: app.get_job(later.id).status is JobStatus.DONE, message="worker-b to claim")
    assert app.get_job(waiting.id).status is JobStatus.PENDING and app.paused_queues() == ["billing"]
    app.resume("billing")
    wait_for(lambda: app.get_job(waiting.id).status is JobStatus.DONE, message="worker-b after the resume")
    assert app.get_job(waiting.id).result == "done by worker-b"


PRUNED = 5_000  # enough batches of 20 to be killed among; bench/prune_under_load.py goes big


def _old_history(app) -> None:
    """PRUNED done jobs (with an attempt each) eight days old; 100 failed ones as old (kept for 30
    days); 200 pending jobs no worker here can run, with a stale finished_at as bait. The finished
    ones are counted in leased_throughput, as their finish would have counted them."""
    if app.database_url.startswith("sqlite"):
        now = "((julianday('now') - 2440587.5) * 86400.0)"
        old = f"{now} - 8 * 86400"
        numbers = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) "
        source = "FROM n"
        minute = f"CAST(({old}) / 60 AS INTEGER) * 60"
    elif app.database_url.startswith("mariadb"):
        now = "UNIX_TIMESTAMP(NOW(6))"
        old = f"{now} - 8 * 86400"
        numbers, source = "", "FROM seq_1_to_{count}"
        minute = f"FLOOR(({old}) / 60) * 60"
    else:
        now, old = "now()", "now() - interval '8 days'"
        numbers, source = "", "FROM generate_series(1, {count})"
        minute = f"date_trunc('minute', {old})"
    for count, task, status, attempt in ((PRUNED, "hold", "done", 1), (100, "hold", "failed", 1),
                                         (200, "nobody", "pending", 0)):
        raw_sql(app, numbers.format(count=count) +
                "INSERT INTO leased_jobs (task_name, queue_name, status, args, kwargs, attempt, max_attempts, "
                f"lease_seconds, run_after, created_at, finished_at) SELECT '{task}', 'default', '{status}', '[]', "
                f"'{{}}', {attempt}, 3, 1, {now}, {old}, {old} " + source.format(count=count))
    raw_sql(app, "INSERT INTO leased_attempts (job_id, attempt, worker_id, started_at, finished_at, outcome) "
                 "SELECT id, 1, 'old', finished_at, finished_at, 'done' FROM leased_jobs WHERE attempt = 1")
    raw_sql(app, "INSERT INTO leased_throughput (minute, queue_name, task_name, worker_id, done, failed) "
                 f"SELECT {minute}, 'default', 'hold', 'old', {PRUNED}, 100")


def test_a_worker_killed_mid_prune_loses_nothing_that_should_stay(app, hold, spawn):
    app.counts()  # the schema
    _old_history(app)

    def done() -> int:
        return raw_scalar(app, "SELECT count(*) FROM leased_jobs WHERE status = 'done'")

    def consistent() -> None:
        counts = app.counts()["default"]
        assert (counts["pending"], counts["failed"], counts["running"]) == (200, 100, 0)
        assert raw_scalar(app, "SELECT count(*) FROM leased_attempts "
                               "WHERE job_id NOT IN (SELECT id FROM leased_jobs)") == 0
        assert raw_scalar(app, "SELECT count(*) FROM leased_jobs AS j WHERE attempt = 1 "
                               "AND NOT EXISTS (SELECT 1 FROM leased_attempts AS a WHERE a.job_id = j.id)") == 0
        # Counted once, as they finished: pruning, whole or cut off, changes no count.
        throughput = app.throughput(timedelta(days=9))
        assert (sum(row.done for row in throughput), sum(row.failed for row in throughput)) == (PRUNED, 100)

    consistent()
    pruning = spawn("worker-a", CRASH_PRUNE_BATCH="20")
    wait_for(lambda: done() <= PRUNED - 200, message="worker-a to prune a few batches")
    pruning.kill()
    pruning.wait()
    left = done()
    assert 0 < left < PRUNED, "killed mid-prune"
    consistent()
    spawn("worker-b", CRASH_PRUNE_BATCH="1000")
    wait_for(lambda: done() == 0, timeout=120, message="worker-b to finish pruning")
    consistent()
    print(f"\nkilled mid-prune with {left:,} of {PRUNED:,} done jobs left; the next worker pruned the rest")
