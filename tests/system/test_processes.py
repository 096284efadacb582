"""`leased worker APP --processes N`: a real supervisor and its real worker processes.

The handlers of tests/programs/processes_app.py return the pid that ran them and hold their first attempt
until the test drops a `go` file, so every wait below is on a condition the test can see: a file,
a worker row, a log line, an exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest
from click.testing import CliRunner

from conftest import wait_for
from leased import JobStatus, Outcome
from leased.cli import supervisor
from leased.cli.main import cli
from leased.worker_ids import supervisor_pid
from paths import PROGRAMS, pythonpath

pytestmark = [pytest.mark.slow, pytest.mark.system]
sqlite_only = pytest.mark.parametrize("backend_name", ["sqlite"], indirect=True)
# The supervisor with a short first restart wait, so that a process dying five times does not take
# the test eight seconds of backoff; everything else is the `leased worker` command as shipped.
QUICK_RESTARTS = ("import sys; from leased.cli import supervisor; supervisor.FIRST_BACKOFF_SECONDS = 0.05; "
                  "from leased.cli.main import main; sys.argv[0] = 'leased'; main()")


@pytest.fixture
def hold(app):
    """The producer's view of processes_app's task: same name and options; the workers run the real one."""

    @app.task(name="hold", lease=1.0, takes_context=True, max_attempts=3)
    def hold(context): ...

    app.counts()  # the schema, before the processes race for it
    return hold


@pytest.fixture
def supervise(database_url, tmp_path):
    """start(*options, quick=False, url=None, app_spec=..., **env): `leased worker APP --processes 2
    --concurrency 1 *options`, logging to tmp_path/supervisor.log; killed (with its group) afterwards."""
    started: list[subprocess.Popen] = []

    def start(*options: str, quick: bool = False, url: str | None = None, app_spec: str = "processes_app:app",
              **env: str) -> subprocess.Popen:
        command = [sys.executable, "-c", QUICK_RESTARTS] if quick else [sys.executable, "-m", "leased"]
        log = open(tmp_path / "supervisor.log", "w")
        process = subprocess.Popen(
            [*command, "worker", app_spec, "--processes", "2", "--concurrency", "1",
             "--poll-interval", "50ms", *options],
            cwd=PROGRAMS, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "LEASED_DATABASE_URL": url or database_url, "CRASH_MARKERS": str(tmp_path),
                 "PYTHONPATH": pythonpath(), **env})
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def log_of(tmp_path) -> str:
    return (tmp_path / "supervisor.log").read_text()


def children(app, supervisor_process) -> dict[str, int]:
    """Live worker rows of this supervisor: worker id -> pid."""
    return {worker.id: worker.pid for worker in app.workers()
            if worker.alive and supervisor_pid(worker.id) == supervisor_process.pid}


def holding(tmp_path) -> dict[int, int]:
    """Job id -> pid of the process holding its first attempt."""
    return {int(job): int(pid) for pid, job in (path.name.split("-")[1:] for path in tmp_path.glob("holding-*"))}


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie its new parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@sqlite_only
def test_two_processes_run_jobs_side_by_side_and_sigterm_lets_both_finish(app, hold, supervise, tmp_path):
    jobs = [hold.enqueue() for _ in range(2)]
    process = supervise()
    # One slot each: both first attempts held at once means two processes hold one each.
    wait_for(lambda: len(holding(tmp_path)) == 2, message="both jobs held")
    pids = set(holding(tmp_path).values())
    assert len(pids) == 2 and process.pid not in pids
    workers = wait_for(lambda: len(found := children(app, process)) == 2 and found, message="both rows")
    assert set(workers.values()) == pids  # each registered as today, its id naming its supervisor
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: log_of(tmp_path).count(" stopping: no new jobs; 1 running") == 2,
             message="both processes to take the first phase")
    (tmp_path / "go").touch()
    assert process.wait(timeout=30) == 0, log_of(tmp_path)
    assert all(gone(pid) for pid in pids)
    for job in jobs:
        done = app.get_job(job.id)
        assert done.status is JobStatus.DONE and [a.outcome for a in done.history] == [Outcome.DONE]
    assert {app.get_job(job.id).result for job in jobs} == pids
    assert "every worker process exited cleanly" in log_of(tmp_path) and "Traceback" not in log_of(tmp_path)


@sqlite_only
def test_a_second_sigterm_is_passed_on_as_the_second(app, hold, supervise, tmp_path):
    jobs = [hold.enqueue() for _ in range(2)]
    process = supervise()
    wait_for(lambda: len(holding(tmp_path)) == 2, message="both jobs held")
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: log_of(tmp_path).count(" stopping: no new jobs") == 2, message="the first phase")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0, log_of(tmp_path)
    assert log_of(tmp_path).count("forced stop, cancelling 1 running job") == 2
    for job in jobs:  # released at once, not waited for
        released = app.get_job(job.id)
        assert released.status is JobStatus.PENDING and released.history[0].outcome is Outcome.SHUTDOWN


@sqlite_only
def test_a_killed_process_is_restarted_and_its_job_comes_back_by_the_lease(app, hold, supervise, tmp_path):
    job = hold.enqueue()
    process = supervise()
    wait_for(lambda: len(holding(tmp_path)) == 1, message="the job held")
    (killed,) = holding(tmp_path).values()
    first = wait_for(lambda: len(found := children(app, process)) == 2 and found, message="both rows")
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: (f"(pid {killed}) killed by SIGKILL; restarting it in {supervisor.FIRST_BACKOFF_SECONDS:g}s"
                      in log_of(tmp_path)),
             message="the supervisor to name the signal")
    restarted = wait_for(lambda: set(children(app, process).values()) - set(first.values()),
                         message="a new process to register")
    assert killed not in restarted
    done = wait_for(lambda: (found := app.get_job(job.id)).status is JobStatus.DONE and found,
                    message="the job to come back by its lease and run again")
    killed_id = next(worker_id for worker_id, pid in first.items() if pid == killed)
    # Its 1 s lease may lapse (and the other process reclaim it) before the supervisor's release
    # lands: the poison-job tests below take a 30 s lease to see the release itself.
    assert done.history[0].worker_id == killed_id
    assert done.history[0].outcome in (Outcome.EXPIRED, Outcome.CRASHED)
    assert done.history[1].outcome is Outcome.DONE and done.result != killed
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0, log_of(tmp_path)


@sqlite_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_supervisor_takes_its_processes_down_gracefully(app, hold, supervise, tmp_path):
    process = supervise()
    pids = set(wait_for(lambda: len(found := children(app, process)) == 2 and found, message="both rows").values())
    process.kill()
    process.wait()
    wait_for(lambda: all(gone(pid) for pid in pids), message="both processes to exit")
    text = log_of(tmp_path)
    assert text.count(" stopping: no new jobs") == 2 and text.count(" stopped: ") == 2, text
    assert not children(app, process)  # signed off, not left to go silent


@sqlite_only
def test_a_process_that_keeps_dying_stops_the_supervisor_loudly(app, supervise, tmp_path):
    process = supervise(quick=True, PROCESSES_DIE_AT_START="1")
    assert process.wait(timeout=60) == 1
    errors = [line for line in log_of(tmp_path).splitlines() if " ERROR " in line]
    assert len(errors) == 1, log_of(tmp_path)
    assert (f"died {supervisor.MAX_DEATHS} times within {supervisor.DEATH_WINDOW_SECONDS:g}s "
            "(last: exited with status 3); stopping the others") in errors[0]
    assert log_of(tmp_path).count("exited with status 3; restarting it in") >= supervisor.MAX_DEATHS - 1


@sqlite_only
def test_a_command_that_cannot_work_is_not_restarted(supervise, tmp_path):
    process = supervise(app_spec="processes_app:typo")
    assert process.wait(timeout=60) == 1
    text = log_of(tmp_path)
    assert "error: module 'processes_app' has no attribute 'typo'" in text, text
    assert "restarting" not in text and "cannot start (its error is above)" in text, text


def open_files(pid: int) -> list[str]:
    """What the process's descriptors point at: paths, pipe:[…], socket:[…]."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed meanwhile
            pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
@pytest.mark.parametrize("backend_name", ["postgres"], indirect=True)
def test_the_supervisor_holds_no_database_connection(app, hold, supervise, database_url, tmp_path):
    import psycopg

    name = f"leased-processes-{uuid.uuid4().hex[:8]}"
    process = supervise(url=f"{database_url}&application_name={name}")
    pids = set(wait_for(lambda: len(found := children(app, process)) == 2 and found, message="both rows").values())
    [hold.enqueue() for _ in range(2)]
    wait_for(lambda: len(holding(tmp_path)) == 2, message="both jobs held")

    def connections() -> int:
        with psycopg.connect(database_url, autocommit=True) as connection:
            return connection.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                      (name,)).fetchone()[0]

    assert connections() >= 2 * 2  # each process's pool and its listener
    assert all(any(target.startswith("socket:") for target in open_files(pid)) for pid in pids)
    assert not any(target.startswith("socket:") for target in open_files(process.pid)), open_files(process.pid)
    (tmp_path / "go").touch()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0, log_of(tmp_path)
    assert connections() == 0


@pytest.mark.parametrize("value, message", [
    ("0", "'0' is neither a whole number from 1 nor 'auto'"),
    ("two", "'two' is neither a whole number from 1 nor 'auto'"),
    ("-3", "'-3' is neither"),
])
def test_processes_must_be_a_whole_number_or_auto(value, message):
    result = CliRunner().invoke(cli, ["worker", "any:app", "--processes", value])
    assert result.exit_code == 2
    assert "Invalid value for '--processes'" in result.output and message in result.output, result.output
    assert "--processes auto for one per core" in result.output


def test_auto_is_the_cores_this_process_may_use():
    assert supervisor.process_count("auto") == len(os.sched_getaffinity(0))
    assert supervisor.process_count("3") == 3


# Poison jobs (issue 41): a job whose attempts take their process down is quarantined after its
# max_crashes, on every database, while the healthy jobs beside it run.
@pytest.mark.parametrize("task_name, how", [
    ("kills_its_worker", "killed by SIGKILL"), ("kills_its_worker_async", "killed by SIGKILL"),
    ("segfaults", "killed by SIGSEGV"), ("segfaults_isolated", "the handler's child process was killed by SIGSEGV")])
def test_a_job_that_kills_its_process_is_quarantined_after_max_crashes(app, supervise, tmp_path, task_name, how):
    app.counts()  # the schema, before the processes race for it
    # The producer's views of poison_app's tasks: same names and options; the workers run the real ones.
    poison = app.task(name=task_name, lease=30.0, max_attempts=5, max_crashes=2)(lambda: None).enqueue()
    healthy = app.task(name="healthy", priority=-1)(lambda: None).enqueue_many([()] * 20)
    process = supervise("--log-jobs", quick=True, app_spec="poison_app:app")
    quarantined = wait_for(lambda: (found := app.get_job(poison.id)).status is JobStatus.FAILED and found,
                           timeout=120, message=f"the poison job to be quarantined\n{log_of(tmp_path)}")
    assert quarantined.quarantined and (quarantined.crashes, quarantined.attempt) == (2, 2), "before max_attempts (5)"
    assert [attempt.outcome for attempt in quarantined.history] == [Outcome.CRASHED] * 2
    assert all(how in attempt.error_message for attempt in quarantined.history), quarantined.history
    if task_name != "segfaults_isolated":  # ended by the supervisor at once, not by the 30 s lease
        assert all("(seen by its supervisor)" in attempt.error_message for attempt in quarantined.history)
    assert "quarantined after 2 crashes: " in quarantined.last_error
    wait_for(lambda: all(app.get_job(job.id).status is JobStatus.DONE for job in healthy), timeout=120,
             message="the healthy jobs to run beside it")
    why = CliRunner().invoke(cli, ["why", "--database", app.database_url, str(poison.id)])
    assert "quarantined after 2 crashes" in why.output, why.output
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) in (0, 1), log_of(tmp_path)
