"""Real worker processes, really killed: SIGKILL mid-job, and SIGSTOP past the lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import wait_for
from leased import JobStatus, Outcome

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


@pytest.fixture
def spawn(database_url, tmp_path):
    processes = []

    def start(worker_id: str) -> subprocess.Popen:
        log = open(tmp_path / f"{worker_id}.log", "w")
        env = {**os.environ, "LEASED_DATABASE_URL": database_url, "CRASH_MARKERS": str(tmp_path),
               "PYTHONPATH": str(HERE)}
        process = subprocess.Popen([sys.executable, str(HERE / "crash_app.py"), worker_id], env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait()


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
    @app.task(name="hold", lease=1.0, takes_context=True, max_attempts=3)
    def hold(context, mode): ...

    app.counts()  # schema in place before the processes race for it
    workers = [spawn(f"worker-{n}") for n in range(3)]
    producer = ("import os, sys; sys.path.insert(0, sys.argv[1]); import crash_app\n"
                "for n in range(150): crash_app.hold.enqueue('quick')")
    env = {**os.environ, "LEASED_DATABASE_URL": database_url}
    producers = [subprocess.Popen([sys.executable, "-c", producer, str(HERE)], env=env,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for process in producers:
        _, errors = process.communicate(timeout=120)
        assert process.returncode == 0, errors
    wait_for(lambda: app.counts().get("default", {}).get("done") == 300, timeout=120, message="300 jobs done")
    for process in workers:
        process.terminate()
        assert process.wait(30) == 0
    logs = "".join((tmp_path / f"worker-{n}.log").read_text() for n in range(3))
    assert "locked" not in logs and "Traceback" not in logs
    done = [app.get_job(job.id) for job in app.list_jobs(status="done", limit=300)]
    assert {job.history[0].worker_id for job in done} <= {"worker-0", "worker-1", "worker-2"}
    assert all(len(job.history) == 1 for job in done)
