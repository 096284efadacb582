"""The `leased` command against every backend: in this process through click's CliRunner, and as
a real `leased` process where the test is about the process (the worker, signals, the entry point).

A small app module is written to tmp_path and the CLI runs there, the way a user runs it from
their project directory. Jobs are executed in-process (run_until_empty) where the test is about
the inspection commands, and by `leased worker` where it is about the worker.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import pytest

from conftest import running_worker, wait_for
from leased import Leased
from leased.backends import parse_database_url
from leased.backends.ports import ClaimRequest
from leased.cli.main import describe_job
from leased.jobs import Outcome
from servers import free_port

APP = "tasks_app:app"

APP_SOURCE = """
import os
from leased import Leased

app = Leased(os.environ["TEST_APP_URL"])


@app.task(name="add")
def add(a, b):
    return a + b


@app.task(name="boom", max_attempts=1)
def boom():
    raise ValueError("kaboom")


@app.task(name="sneaky", max_attempts=1)
def sneaky():
    raise ValueError("\\x1b[2J\\x07\\u202eevil\\nsecond line")


not_an_app = 42
"""
# A handler's error message that would clear the screen, ring the bell and reverse the text after it.
SNEAKY = "\x1b[2J\x07\u202eevil\nsecond line"
RAW_CONTROLS = ("\x1b", "\x07", "\u202e")
SNEAKY_SHOWN = "\\x1b[2J\\x07\\u202eevil"


def register_tasks(app: Leased) -> None:
    """The same handlers as APP_SOURCE, for running jobs in the test process."""

    @app.task(name="add")
    def add(a, b):
        return a + b

    @app.task(name="boom", max_attempts=1)
    def boom():
        raise ValueError("kaboom")

    @app.task(name="sneaky", max_attempts=1)
    def sneaky():
        raise ValueError(SNEAKY)


# Run in a process of their own, as a user runs them: they install signal handlers, configure logging
# and supervise processes. Every other command runs in this process through click's CliRunner (a
# `leased` process spends nearly all its time importing); the tests that start `leased` as a process
# (the worker's, the demo's, `python -m leased`, a terminal's) keep the entry point itself covered.
IN_A_PROCESS = {"worker", "demo"}


class Cli:
    """Runs `leased` commands in a project directory whose app uses `url`: in this process through
    click's CliRunner, `worker` and `demo` as `python -m leased.cli.main`."""

    def __init__(self, cwd: Path, url: str):
        self.cwd = cwd
        self.url = url
        (cwd / "tasks_app.py").write_text(APP_SOURCE)
        (cwd / "broken_app.py").write_text("import os\nratio = 1 / 0\n")
        # This checkout's leased, not whichever the virtualenv has installed (a relative PYTHONPATH
        # such as `src` would not survive the change of directory).
        self.env = {**os.environ, "TEST_APP_URL": url, "PYTHONPATH": str(Path(__file__).parent.parent / "src")}
        self.env.pop("LEASED_DATABASE_URL", None)  # the "neither APP nor --database" case must stay reachable

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "leased.cli.main", *args]

    def run(self, *args: str, code: int = 0, timeout: float = 60) -> subprocess.CompletedProcess:
        if args and args[0] in IN_A_PROCESS:
            result = subprocess.run(self.command(*args), cwd=self.cwd, env=self.env, capture_output=True, text=True,
                                    timeout=timeout)
        else:
            result = self.run_here(*args)
        assert result.returncode == code, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        assert "Traceback" not in result.stderr, result.stderr
        return result

    def run_here(self, *args: str) -> subprocess.CompletedProcess:
        """The command in this process, as its own process would see it: run from the project
        directory with the project's environment, the user's modules imported afresh (and their apps
        closed afterwards), a time zone from the environment in force."""
        from click.testing import CliRunner

        from leased.cli.main import cli

        environment = {name: value for name, value in self.env.items() if os.environ.get(name) != value}
        environment.update({name: None for name in os.environ if name not in self.env})
        previous_directory, previous_path = os.getcwd(), list(sys.path)
        self._forget_project_modules()
        os.chdir(self.cwd)
        try:
            with _time_zone(self.env.get("TZ")):
                outcome = CliRunner(env=environment).invoke(cli, list(args), prog_name="leased")
        finally:
            os.chdir(previous_directory)
            sys.path[:] = previous_path
            self._forget_project_modules()
        if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
            raise AssertionError(f"leased {shlex.join(args)} raised:\n{''.join(traceback.format_exception(outcome.exception))}"
                                 f"stdout:\n{outcome.stdout}\nstderr:\n{outcome.stderr}")
        return subprocess.CompletedProcess(["leased", *args], outcome.exit_code, outcome.stdout, outcome.stderr)

    def _forget_project_modules(self) -> None:
        """The app modules in the project directory unimported, their apps closed: the next command
        imports them again, with the environment it runs in (as a new process would)."""
        importlib.invalidate_caches()  # a module written since the last import is found
        for name, module in list(sys.modules.items()):
            if Path(getattr(module, "__file__", None) or "/").parent == self.cwd:
                del sys.modules[name]
                for value in vars(module).values():
                    if isinstance(value, Leased):
                        value.close()

    def json(self, *args: str) -> object:
        return json.loads(self.run(*args, "--json").stdout)

    def error(self, *args: str, code: int = 1) -> str:
        """The one line a failing command prints on stderr."""
        lines = self.run(*args, code=code).stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
        return lines[0]


@contextmanager
def _time_zone(zone: str | None) -> Iterator[None]:
    """The process's local time zone as `zone` (TZ's syntax) for the block, if given."""
    if zone is None or zone == os.environ.get("TZ"):
        yield
        return
    previous = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = previous
        time.tzset()


def existing(url: str) -> str:
    """`url`, its SQLite file made (empty: the app migrates it on first use), for commands other
    than `migrate` refuse a SQLite file that does not exist."""
    path = parse_database_url(url).sqlite_path
    if path is not None:
        Path(path).touch()
    return url


@pytest.fixture
def cli(tmp_path, database_url) -> Cli:
    return Cli(tmp_path, existing(database_url))


@pytest.fixture
def sqlite_cli(tmp_path) -> Cli:
    """For checks that do not depend on the backend: one run is enough."""
    return Cli(tmp_path, existing(f"sqlite:///{tmp_path / 'jobs.db'}"))


def test_enqueue_inspect_retry_cancel_round_trip(cli, app):
    register_tasks(app)
    added = cli.json("enqueue", APP, "add", "[1, 2]")
    assert (added["status"], added["task_name"], added["args"]) == ("pending", "add", [1, 2])
    failing = cli.json("enqueue", APP, "boom", "--queue", "other", "--priority", "5")
    assert (failing["queue_name"], failing["priority"]) == ("other", 5)
    later = cli.json("enqueue", APP, "add", "[1]", "--kwargs", '{"b": 2}', "--delay", "1h",
                     "--idempotency-key", "once")
    delay = datetime.fromisoformat(later["run_after"]) - datetime.fromisoformat(later["created_at"])
    assert 3590 < delay.total_seconds() < 3610
    assert cli.json("enqueue", APP, "add", "[5]", "--kwargs", '{"b": 2}', "--idempotency-key", "once")["id"] == later["id"]
    printed = cli.run("enqueue", APP, "add", "[3, 4]").stdout
    assert printed.startswith("job ") and " pending: add on queue default, runs now" in printed
    other_add = int(printed.split()[1])

    app.run_until_empty()  # everything due: both adds done, boom failed; `later` waits

    table = cli.run("jobs", APP).stdout.splitlines()
    assert table[0].split() == ["ID", "TASK", "QUEUE", "STATUS", "ATTEMPT", "RUN", "AFTER/FINISHED", "LAST", "ERROR"]
    rows = {int(line.split()[0]): line for line in table[1:]}
    assert set(rows) == {added["id"], failing["id"], later["id"], other_add}
    assert " failed " in rows[failing["id"]] and "ValueError: kaboom" in rows[failing["id"]]
    assert " done " in rows[added["id"]] and "1/3" in rows[added["id"]]
    assert [job["id"] for job in cli.json("jobs", "--database", cli.url, "--status", "failed")] == [failing["id"]]
    paged = cli.run("jobs", APP, "--task", "add", "--limit", "1")
    assert len(paged.stdout.splitlines()) == 2 and f"--before-id {other_add}" in paged.stderr
    assert "no jobs match" in cli.run("jobs", APP, "--queue", "nowhere").stdout

    shown = " ".join(cli.run("show", APP, str(failing["id"])).stdout.split())  # labels are padded to fit
    for text in ["status failed", "last error ValueError: kaboom", "attempts", "error ValueError: kaboom",
                 "traceback of attempt 1", "Traceback (most recent call last)", "raise ValueError"]:
        assert text in shown, shown
    detail = cli.json("show", "--database", cli.url, str(added["id"]))
    assert detail["result"] == 3 and [attempt["outcome"] for attempt in detail["history"]] == ["done"]
    assert detail["history"][0]["duration_seconds"] >= 0
    assert "result 3" in " ".join(cli.run("show", "--database", cli.url, str(added["id"])).stdout.split())

    counts = cli.json("stats", APP)
    assert counts["default"] == {"pending": 1, "running": 0, "done": 2, "failed": 0, "cancelled": 0, "waiting": 0}
    assert counts["other"]["failed"] == 1
    stats = cli.run("stats", "--database", cli.url).stdout.splitlines()
    assert stats[0].split() == ["QUEUE", "PENDING", "RUNNING", "DONE", "FAILED", "CANCELLED", "WAITING", "TOTAL"]
    assert stats[-1].split() == ["(all)", "1", "0", "2", "1", "0", "0", "4"]

    assert "is pending again" in cli.run("retry", APP, str(failing["id"])).stdout
    assert app.get_job(failing["id"]).status == "pending"
    assert "cannot retry" in cli.error("retry", APP, str(failing["id"]))
    assert cli.run("cancel", "--database", cli.url, str(later["id"])).stdout.strip() == f"job {later['id']} (add) cancelled"
    assert app.get_job(later["id"]).status == "cancelled"
    assert "cannot cancel" in cli.error("cancel", "--database", cli.url, str(later["id"]))
    assert cli.error("show", APP, "999999") == "error: no job with id 999999"


def test_migrate_applies_once_and_prints_sql(cli):
    from leased.backends.sqlite.backend import MIGRATIONS

    every_version = ", ".join(f"{migration.version:04d}" for migration in MIGRATIONS)  # the same on each backend
    assert cli.run("migrate", "--database", cli.url).stdout.strip() == f"applied migrations {every_version}"
    assert cli.run("migrate", APP).stdout.strip() == "schema up to date: no migrations to apply"
    assert "CREATE TABLE" in cli.run("migrate", "--database", cli.url, "--sql").stdout


def test_migrate_sql_leaves_the_database_alone(sqlite_cli, tmp_path):
    fresh = tmp_path / "fresh.db"
    assert "CREATE TABLE leased_jobs" in sqlite_cli.run("migrate", "--database", f"sqlite:///{fresh}", "--sql").stdout
    # Through an APP whose Leased would migrate on first use, too.
    sqlite_cli.env["TEST_APP_URL"] = f"sqlite:///{fresh}"
    assert "CREATE TABLE leased_jobs" in sqlite_cli.run("migrate", APP, "--sql").stdout
    assert not fresh.exists()


@pytest.mark.parametrize("args, message", [
    (["enqueue", APP, "add", '{"a": 1}'], "ARGS_JSON must be a JSON array of positional arguments"),
    (["enqueue", APP, "add", "[1,"], "ARGS_JSON is not valid JSON"),
    (["enqueue", APP, "add", "[1]", "--kwargs", "[2]"], "--kwargs must be a JSON object"),
    (["enqueue", APP, "add", "[1]", "--kwargs", "{"], "--kwargs is not valid JSON"),
    (["enqueue", APP, "nope"], "unknown task 'nope'; known tasks: add, boom"),
    (["enqueue", APP, "add", "[1]"], "arguments do not match add(a, b)"),
    (["enqueue", APP, "add", "[1, 2]", "--priority", "100000"], "invalid priority 100000"),
    # Ids past 64 bits reached SQLite as an OverflowError traceback; "²" passed str.isdigit().
    (["show", APP, "9223372036854775808"], "no job with id 9223372036854775808"),
    (["retry", APP, "99999999999999999999"], "no job with id 99999999999999999999"),
    (["workflow", APP, "99999999999999999999"], "no workflow with id 99999999999999999999"),
    (["show", APP, "\u00b2"], "a job id is a whole number, got '\u00b2'"),
    (["jobs", "missing_module:app"], "cannot import 'missing_module'"),
    (["jobs", "tasks_app:nothing"], "module 'tasks_app' has no attribute 'nothing'"),
    (["jobs", "tasks_app:not_an_app"], "not a leased.Leased instance"),
    (["worker", "tasks_app:not_an_app"], "not a leased.Leased instance"),
    (["jobs", "tasks_app"], "invalid APP 'tasks_app'"),
    (["jobs", "broken_app:app"], "importing 'broken_app' failed: ZeroDivisionError: division by zero"),
    (["jobs"], "give APP (module:attribute) or --database URL"),
    (["retry", "7"], "give APP (module:attribute) or --database URL"),
    (["jobs", APP, "--database", "sqlite:///other.db"], "give APP or --database, not both"),
    (["show", "--database", "sqlite:///missing.db", "1"], "no SQLite database at 'missing.db' ("),
    (["show", APP, "abc"], "a job id is a whole number"),
    (["stats", "--database", "oracle://localhost/jobs"], "unsupported database URL scheme"),
    (["stats", "--database", "postgresql://postgres@127.0.0.1:1/test"], ""),  # unreachable, or no driver
])
def test_user_mistakes_are_one_line_errors(sqlite_cli, args, message):
    assert message in sqlite_cli.error(*args)


def test_commands_refuse_a_sqlite_file_that_does_not_exist_and_only_migrate_creates_it(tmp_path):
    cli = Cli(tmp_path, "sqlite:///shop.db")  # relative: run from another directory, it names another file
    refusal = (f"error: no SQLite database at 'shop.db' ({tmp_path / 'shop.db'}: the path is relative); "
               f"create it with: leased migrate {APP}")
    for command in (["jobs", APP], ["enqueue", APP, "add", "[1, 2]"], ["stats", APP], ["worker", APP]):
        assert cli.error(*command) == refusal  # before: a new, empty database, and a worker idling there
        assert not (tmp_path / "shop.db").exists()
    assert cli.error("jobs", "--database", "sqlite:///shop.db") == refusal.replace(APP, "--database sqlite:///shop.db")
    cli.run("migrate", APP)
    assert (tmp_path / "shop.db").exists()
    cli.run("jobs", APP)


def test_usage_errors_exit_2_without_traceback(sqlite_cli):
    assert "not a duration" in sqlite_cli.run("enqueue", APP, "add", "[1, 2]", "--delay", "5x", code=2).stderr
    assert "is not an id" in sqlite_cli.run("jobs", APP, "--before-id", "99999999999999999999", code=2).stderr
    too_far = sqlite_cli.run("enqueue", APP, "add", "[1, 2]", "--delay", "999999999d", code=2).stderr
    assert "more than 100 years" in too_far and "Traceback" not in too_far
    assert "missing JOB_ID" in sqlite_cli.run("show", APP, code=2).stderr
    # What was typed is quoted escaped: click printed extra arguments as typed, controls and all.
    extra = sqlite_cli.run("jobs", APP, "b", "Z\x07\u202e\x1b[2J", code=2).stderr
    assert "unexpected extra argument" in extra and "Z\\x07\\u202e\\x1b[2J" in extra, extra
    assert not any(character in extra for character in "\x07\u202e\x1b"), extra
    command = sqlite_cli.run("jo\x07bs", code=2).stderr
    assert "\\x07" in command and "\x07" not in command, command


def run_worker_until_finished(cli: Cli, app: Leased, jobs: list, log: Path, *options: str) -> str:
    """`leased worker APP *options` until every job has finished, then SIGTERM; its log."""
    with log.open("w") as stderr:
        worker = subprocess.Popen(cli.command("worker", APP, "--poll-interval", "100ms", *options),
                                  cwd=cli.cwd, env=cli.env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: all(app.get_job(job.id).is_finished for job in jobs) or worker.poll() is not None,
                 message="the worker to finish every job")
        assert worker.poll() is None, log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    return log.read_text()


def test_worker_runs_jobs_and_stops_on_sigterm(cli, app, tmp_path):
    register_tasks(app)
    jobs = [app.get_task("add").enqueue(n, n) for n in range(5)] + [app.get_task("boom").enqueue()]
    text = run_worker_until_finished(cli, app, jobs, tmp_path / "worker.log", "--concurrency", "2")
    assert [app.get_job(job.id).result for job in jobs[:5]] == [0, 2, 4, 6, 8]
    assert app.get_job(jobs[5].id).status == "failed"
    # The start line names the database served (SQLite's by its absolute path): a worker on the wrong
    # one shows at once.
    assert "INFO    worker" in text and f" started on {app.backend.where}: concurrency 2" in text
    assert " stopped: 5 done, 1 failed, 0 retried (of 6 claimed)\n" in text  # a sentence, not WorkerStats(...)
    assert "ERROR   job" in text and "failed for good: ValueError: kaboom" in text
    assert "Traceback" not in text
    assert ": done in " not in text  # quiet by default: no line per job (see --log-jobs)


def test_terminal_controls_in_an_error_are_shown_escaped(sqlite_cli):
    app = Leased(sqlite_cli.url)
    register_tasks(app)
    job = app.get_task("sneaky").enqueue()
    app.run_until_empty()
    app.close()
    for command in (["show", APP, str(job.id)], ["why", APP, str(job.id)], ["jobs", APP],
                    ["show", APP, str(job.id), "--json"]):
        printed = sqlite_cli.run(*command).stdout
        assert not any(control in printed for control in RAW_CONTROLS), (command, printed)
    shown = sqlite_cli.run("show", APP, str(job.id)).stdout
    assert SNEAKY_SHOWN in shown
    # The traceback keeps its lines and indentation: only what a terminal would obey is escaped.
    assert f"\n      raise ValueError(SNEAKY)\n  ValueError: {SNEAKY_SHOWN}\n  second line\n" in shown
    assert SNEAKY_SHOWN in sqlite_cli.run("why", APP, str(job.id)).stdout
    assert json.loads(sqlite_cli.run("show", APP, str(job.id), "--json").stdout)["last_error"] == f"ValueError: {SNEAKY}"


def test_worker_log_escapes_terminal_controls_in_an_error(sqlite_cli, tmp_path):
    app = Leased(sqlite_cli.url)
    register_tasks(app)
    jobs = [app.get_task("sneaky").enqueue()]
    try:
        text = run_worker_until_finished(sqlite_cli, app, jobs, tmp_path / "worker.log")
    finally:
        app.close()
    assert "failed for good: ValueError: " + SNEAKY_SHOWN in text
    assert not any(control in text for control in RAW_CONTROLS), text


def test_worker_log_jobs_logs_a_line_per_attempt_at_info(sqlite_cli, tmp_path):
    app = Leased(sqlite_cli.url)
    register_tasks(app)
    jobs = [app.get_task("add").enqueue(n, n) for n in range(3)] + [app.get_task("boom").enqueue()]
    try:
        text = run_worker_until_finished(sqlite_cli, app, jobs, tmp_path / "worker.log", "--log-jobs")
    finally:
        app.close()
    lines = [line for line in text.splitlines() if ": done in " in line]
    assert sorted(int(line.split(" job ")[1].split()[0]) for line in lines) == [job.id for job in jobs[:3]]
    assert all(" INFO    job " in line and "(add) attempt 1: done in " in line for line in lines), lines
    boom = [line for line in text.splitlines() if f"job {jobs[3].id} " in line]
    assert len(boom) == 1 and "failed for good" in boom[0]  # a failure is logged once, by the worker


def test_worker_log_format_json_writes_an_object_per_line_naming_each_job(sqlite_cli, tmp_path):
    app = Leased(sqlite_cli.url)
    register_tasks(app)
    jobs = [app.get_task("add").enqueue(1, 2), app.get_task("sneaky").enqueue()]
    try:
        text = run_worker_until_finished(sqlite_cli, app, jobs, tmp_path / "worker.log", "--log-jobs",
                                         "--log-format", "json")
    finally:
        app.close()
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one object
    assert text.isascii()  # a handler's controls and bidi marks are escaped by JSON itself
    worker_id = lines[0]["worker_id"]
    assert all(line["worker_id"] == worker_id for line in lines)
    [done] = [line for line in lines if line.get("outcome") == "done"]
    assert done.items() >= {"job_id": jobs[0].id, "task": "add", "queue": "default", "attempt": 1}.items()
    assert done["duration_seconds"] >= 0 and done["level"] == "info"
    [failed] = [line for line in lines if line.get("outcome") == "error"]
    assert failed.items() >= {"job_id": jobs[1].id, "task": "sneaky", "attempt": 1, "max_attempts": 1,
                              "level": "error", "error_type": "ValueError"}.items()


def test_demo_runs_to_completion_and_replays_with_a_seed(tmp_path):
    runner = Cli(tmp_path, "sqlite:///unused.db")

    def failures(url: str) -> list[tuple[int, str, str]]:
        return [(job["id"], job["task_name"], job["last_error"])
                for job in runner.json("jobs", "--database", url, "--status", "failed")]

    custom = f"sqlite:///{tmp_path / 'custom.db'}"
    out = runner.run("demo", "--database", custom, "--jobs", "12", "--seed", "5", timeout=30).stdout
    assert "12 sample jobs" in out and "12/12" in out and "finished in" in out
    assert f"leased jobs --database {custom} --status failed" in out
    assert len(out.splitlines()) < 60  # not a TTY: a few progress lines, not one per poll
    expected = failures(custom)

    for _ in range(2):  # the default file in the current directory, recreated each run
        out = runner.run("demo", "--jobs", "12", "--seed", "5", "--concurrency", "3", timeout=30).stdout
        assert "leased jobs --database sqlite:///leased-demo.db --status failed" in out
        assert (tmp_path / "leased-demo.db").exists()
    counts = runner.json("stats", "--database", "sqlite:///leased-demo.db")
    assert sum(counts["demo"].values()) == 12 and counts["demo"]["pending"] == counts["demo"]["running"] == 0
    assert failures("sqlite:///leased-demo.db") == expected


def test_the_demos_progress_shows_at_most_its_concurrency_running():
    from leased.cli.demo import progress_text

    # The worker claims a little ahead of its free slots: the database counts those jobs running too.
    line = progress_text({"pending": 30, "running": 6, "done": 4}, 1, 40, 4)
    assert "  running 4 (+2 claimed ahead)  done 4  " in line  # before: "running 6" under a concurrency of 4
    assert "  running 3  done 0  " in progress_text({"running": 3}, 0, 40, 4)


def test_demo_with_dashboard_serves_it_with_a_worker_until_interrupted(tmp_path):
    import urllib.request

    port = free_port()
    output = tmp_path / "demo.out"
    with open(output, "w") as sink:
        demo = subprocess.Popen([sys.executable, "-m", "leased.cli.main", "demo", "--jobs", "6", "--seed", "1",
                                 "--dashboard", str(port)], cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "dashboard on" in output.read_text(), message="the dashboard to start")
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
        assert "demo" in page and "Workers" in page
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=30)
    assert demo.returncode == 0, output.read_text()


def test_why_explains_a_job_in_words_and_as_json(cli, app):
    register_tasks(app)
    failed = app.get_task("boom").enqueue()
    waiting = app.get_task("add").using(queue_name="billing").enqueue(1, 2)
    app.run_until_empty(queues=["default"])
    text = cli.run("why", APP, str(failed.id)).stdout.splitlines()
    assert text == [f"Job {failed.id} (boom on queue default) has failed.",
                    "It used its only attempt, which failed with ValueError: kaboom.",
                    f"`leased retry {APP} {failed.id}` (or Retry on the dashboard) puts it back to pending, due "
                    f"now, with one more attempt (attempt 2 of 2)."]  # the APP the user typed, not "APP"
    by_url = cli.run("why", "--database", cli.url, str(failed.id)).stdout
    assert f"`leased retry --database {shlex.quote(cli.url)} {failed.id}`" in by_url
    from_environment = subprocess.run(cli.command("why", str(failed.id)), cwd=cli.cwd, capture_output=True, text=True,
                                      env={**cli.env, "LEASED_DATABASE_URL": cli.url}, timeout=60).stdout
    assert f"`leased retry {failed.id}`" in from_environment
    explained = cli.json("why", "--database", cli.url, str(waiting.id))
    assert (explained["job_id"], explained["status"]) == (waiting.id, "pending")
    assert [reason["code"] for reason in explained["reasons"]] == ["no_workers"]
    assert explained["reasons"][0]["message"].endswith("`leased worker APP`.")  # a URL alone has no handlers
    assert cli.json("why", APP, str(waiting.id))["reasons"][0]["message"].endswith(f"`leased worker {APP}`.")
    assert set(explained["reasons"][0]) == {"code", "message", "data"}
    assert cli.error("why", APP, "999999") == "error: no job with id 999999"

# Day one (issue 9): what a new user hit.
def test_a_duplicate_enqueue_says_it_returned_the_existing_job(cli):
    first = cli.run("enqueue", APP, "add", "[1, 2]", "--idempotency-key", "K", "--delay", "1h").stdout
    job_id = int(first.split()[1])
    again = cli.run("enqueue", APP, "add", "[1, 2]", "--idempotency-key", "K").stdout.strip()
    assert again == f"job {job_id} already pending with idempotency key K (not enqueued again)"
    assert cli.json("enqueue", APP, "add", "[1, 2]", "--idempotency-key", "K")["created"] is False
    assert cli.json("enqueue", APP, "add", "[1, 2]", "--idempotency-key", "L")["created"] is True


def test_jobs_shows_the_last_error_only_where_it_explains_the_status(cli, app):
    attempts = []

    @app.task(name="flaky", max_attempts=1)
    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("first time unlucky")

    fixed = flaky.enqueue()
    app.run_until_empty()
    app.retry(fixed.id)
    never_failed = flaky.enqueue()
    app.run_until_empty()  # the retry succeeds: done, with the old error still in its row
    attempts.clear()
    broken = flaky.enqueue()
    app.run_until_empty()  # failed for good
    attempts.clear()
    retried = flaky.enqueue()
    app.run_until_empty()
    app.retry(retried.id)  # pending again after a failed attempt: the error says why
    assert app.get_job(fixed.id).last_error and app.get_job(fixed.id).status == "done"
    rows = {int(line.split()[0]): line for line in cli.run("jobs", "--database", cli.url).stdout.splitlines()[1:]}
    assert "first time unlucky" not in rows[fixed.id] and " done " in rows[fixed.id]
    assert "first time unlucky" not in rows[never_failed.id]
    assert " failed " in rows[broken.id] and "ValueError: first time unlucky" in rows[broken.id]
    assert " pending " in rows[retried.id] and "ValueError: first time unlucky" in rows[retried.id]
    shown = " ".join(cli.run("show", "--database", cli.url, str(fixed.id)).stdout.split())
    assert "last error" not in shown and "error ValueError: first time unlucky" in shown  # the attempts keep it


def test_the_argument_mismatch_of_a_context_task_does_not_ask_for_the_context(sqlite_cli):
    (sqlite_cli.cwd / "context_app.py").write_text(
        "import os\nfrom leased import Leased\napp = Leased(os.environ['TEST_APP_URL'])\n\n"
        "@app.task(name='mail', takes_context=True)\ndef mail(context, to, subject='hi'):\n    pass\n")
    message = sqlite_cli.error("enqueue", "context_app:app", "mail")
    assert "arguments do not match mail(to, subject='hi')" in message and "context" not in message


def test_an_app_that_raises_on_import_is_pointed_at_its_own_line(sqlite_cli):
    (sqlite_cli.cwd / "bad_config.py").write_text("import json\n\nsettings = json.loads('{')\n")
    message = sqlite_cli.error("jobs", "bad_config:app")
    assert "importing 'bad_config' failed: JSONDecodeError" in message
    assert "(at bad_config.py:3;" in message, message


def test_worker_warns_about_a_queue_never_seen(cli, app):
    register_tasks(app)
    app.get_task("add").using(queue_name="billing").enqueue(1, 2)
    assert app.known_queue_names() == {"billing", "default"}  # a job's queue, and the tasks' queue
    worker = subprocess.Popen(cli.command("worker", APP, "--queues", "billing,biling"), cwd=cli.cwd, env=cli.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        wait_for(lambda: lines.append(worker.stderr.readline()) or " started on " in lines[-1] or worker.poll(),
                 message="the worker to start")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    warnings = [line for line in lines if "WARNING" in line]
    assert len(warnings) == 1 and "queue 'biling' has no jobs and no task of this app uses it" in warnings[0]
    assert "known queues: billing, default" in warnings[0]


def test_retry_every_failed_job_and_cancel_every_pending_one(cli, app):
    register_tasks(app)
    failing = [app.get_task("boom").enqueue() for _ in range(3)]
    other = app.get_task("boom").using(queue_name="other").enqueue()
    app.run_until_empty()
    assert cli.run("retry", APP, "--failed", "--queue", "default", "--yes").stdout.strip() == (
        "3 failed jobs (queue default) pending again, to run now")
    assert [app.get_job(job.id).status for job in failing + [other]] == ["pending"] * 3 + ["failed"]
    assert "no failed jobs (task add): nothing to retry" in cli.run("retry", APP, "--failed", "--task", "add").stdout

    waiting = app.get_task("add").using(run_after=timedelta(hours=1)).enqueue(1, 2)
    refused = cli.error("cancel", "--database", cli.url, "--pending", "--task", "boom")
    assert refused == ("error: refusing to cancel 3 pending jobs (task boom) without confirmation: "
                       "stdin is not a terminal; add --yes")
    assert cli.run("cancel", APP, "--pending", "--task", "boom", "-y").stdout.strip() == (
        "3 pending jobs (task boom) cancelled")
    assert [app.get_job(job.id).status for job in failing] == ["cancelled"] * 3
    assert app.get_job(waiting.id).status == "pending"
    assert "--pending acts on many jobs" in cli.run("cancel", APP, "--pending", "7", code=2).stderr
    assert "go with --failed" in cli.run("retry", APP, "7", "--task", "boom", code=2).stderr


def test_bulk_actions_ask_first_on_a_terminal(cli, app):
    import pty

    register_tasks(app)
    jobs = [app.get_task("add").enqueue(n, n) for n in range(2)]

    def answer(reply: str) -> str:
        controller, terminal = pty.openpty()
        try:
            os.write(controller, reply.encode())
            result = subprocess.run(cli.command("cancel", APP, "--pending"), cwd=cli.cwd, env=cli.env, stdin=terminal,
                                    capture_output=True, text=True, timeout=60)
        finally:
            os.close(controller)
            os.close(terminal)
        assert result.returncode == 0, result.stderr
        return result.stdout

    declined = answer("n\n")
    assert "cancel 2 pending jobs? [y/N]" in declined and "nothing changed" in declined
    assert [app.get_job(job.id).status for job in jobs] == ["pending"] * 2
    assert "2 pending jobs cancelled" in answer("y\n")
    assert [app.get_job(job.id).status for job in jobs] == ["cancelled"] * 2


def test_a_failed_demo_email_succeeds_when_retried(database_url, monkeypatch):
    # The demo invites the reader to retry a failed job and watch it run: an email that failed
    # all its attempts goes through on the retry, as the relay is back.
    from leased.cli import demo

    demo_app = demo.make_app(database_url)
    try:
        email = demo_app.get_task("demo.send_email").enqueue("ada@example.com", "Welcome aboard")
        # A seed under which this job's every attempt times out (a pure function: no luck involved).
        unlucky = next(seed for seed in range(10_000)
                       if all(demo.email_relay_times_out(seed, email.id, n) for n in range(1, demo.EMAIL_ATTEMPTS + 1)))
        monkeypatch.setattr(demo, "_seed", unlucky)
        with running_worker(demo_app, poll_interval=0.05):
            failed = demo_app.wait(email.id, timeout=30)
            assert (failed.status, failed.attempt) == ("failed", demo.EMAIL_ATTEMPTS)
            demo_app.retry(email.id)
            retried = demo_app.wait(email.id, timeout=30)
        assert retried.status == "done" and retried.result == "sent 'Welcome aboard' to ada@example.com"
    finally:
        demo_app.close()


def test_the_demos_closing_hints_name_what_failed(tmp_path):
    from leased.cli import demo

    demo_app = demo.make_app(f"sqlite:///{tmp_path / 'demo.db'}")
    try:
        charge = demo_app.get_task("demo.charge_card").enqueue("ord_0001", 500, demo.DECLINED_CARD)
        demo_app.run_until_empty()
        failed = demo_app.list_jobs(status="failed")
        assert [job.id for job in failed] == [charge.id]
        assert "email" not in demo.what_to_retry(failed) and "card charge" in demo.what_to_retry(failed)
        shown = io.StringIO()
        demo.summarize(demo_app, demo_app.database_url, [charge.id], 0, 1.0, shown)
        worker_hint = shown.getvalue().splitlines()[-1]
        assert worker_hint.endswith("# runs it again: the card is declined again; Ctrl-C stops"), worker_hint
    finally:
        demo_app.close()


def test_queue_limits_are_set_listed_shown_and_cleared(cli):
    assert cli.run("limits", APP).stdout.strip() == "no queue has a limit"
    assert cli.run("limit", APP, "billing", "--concurrency", "5", "--rate", "100/m", "--force").stdout.strip() == (
        "queue billing: concurrency 5, rate 100/m")  # no task or job uses it yet: forced
    assert cli.json("limits", "--database", cli.url) == {"billing": {"concurrency": 5, "rate_limit": "100/m"}}
    stats = cli.run("stats", APP).stdout.splitlines()
    assert stats[-2].split() == ["QUEUE", "CONCURRENCY", "RATE"] and stats[-1].split() == ["billing", "5", "100/m"]
    assert cli.run("limit", APP, "billing", "--clear").stdout.strip() == "queue billing: no limits"
    assert cli.json("limits", APP) == {}


def test_fairness_weights_are_set_and_listed(cli):
    assert cli.run("fairness", APP, "default").stdout.splitlines() == [
        "queue default: default weight 1", "no key has jobs waiting"]
    assert cli.run("fairness", APP, "default", "--weight", "tenant-a=3", "--weight", "b=0.5",
                   "--default", "2").stdout.splitlines()[0] == "queue default: default weight 2; b=0.5, tenant-a=3"
    assert cli.run("fairness", APP, "default", "--weight", "tenant-a=1").stdout.splitlines()[0] == (
        "queue default: default weight 2; b=0.5, tenant-a=1"), "the default and other keys are kept"


@pytest.mark.needs("fair_claims")
def test_fairness_lists_the_waiting_keys_next_served_first(cli):
    app = Leased(cli.url)
    try:
        @app.task(name="work", fairness_key="{tenant}")
        def work(tenant): ...

        work.enqueue_many([("a",), ("a",), ("b",)])
    finally:
        app.close()
    shown = cli.run("show", APP, "1").stdout
    assert "fairness key" in shown and shown.split("fairness key", 1)[1].split()[0] == "a"
    table = cli.run("fairness", APP, "default", "--weight", "a=3").stdout.splitlines()[1:]
    assert [line.split() for line in table] == [["KEY", "WAITING", "WEIGHT", "PASS"], ["a", "2", "3", "0.00"],
                                                ["b", "1", "1", "0.00"]]


@pytest.mark.parametrize("args, message", [
    (["fairness", APP, "default", "--weight", "a"], "invalid --weight 'a': write KEY=N"),
    (["fairness", APP, "default", "--weight", "a=x"], "invalid --weight 'a=x': write KEY=N"),
    (["fairness", APP, "default", "--weight", "a=0"], "invalid weight of 'a' 0.0: give a number > 0"),
    (["fairness", APP, "default", "--default", "-1"], "invalid default weight -1.0: give a number > 0"),
    (["limit", APP, "default", "--concurrency", "0"], "invalid --concurrency 0: use a whole number >= 1"),
    (["limit", APP, "default", "--rate", "100/x"], "invalid rate_limit '100/x'"),
    (["limit", APP, "default", "--rate", "0/m"], "invalid rate_limit '0/m'"),
    (["limit", APP, "billing"], "give --concurrency N and/or --rate N/UNIT, or --clear alone"),
    (["limit", APP, "billing", "--clear", "--concurrency", "2"], "or --clear alone"),
])
def test_bad_limits_are_one_line_errors(sqlite_cli, args, message):
    assert message in sqlite_cli.error(*args)


def test_pause_resume_stats_and_prune(cli, app):
    register_tasks(app)
    app.get_task("add").enqueue(1, 2)
    assert "queue default paused" in cli.run("pause", APP, "default").stdout
    assert "was paused already" in cli.run("pause", "--database", cli.url, "default").stdout
    assert "paused: default (for " in cli.run("stats", APP).stdout
    assert app.run_until_empty().claimed == 0
    error = cli.error("pause", APP, "biling")
    assert "unknown queue 'biling'" in error and "known queues: default" in error and "--force" in error
    assert "invalid queue_name" in cli.error("pause", APP, "no spaces", "--force")
    assert "queue reports paused" in cli.run("pause", "--database", cli.url, "reports", "--force").stdout
    assert cli.run("resume", APP, "default").stdout.strip() == "queue default resumed"
    assert cli.run("resume", APP, "default").stdout.strip() == "queue default was not paused"
    assert app.run_until_empty().done == 1
    assert "paused: reports" in cli.run("stats", "--database", cli.url).stdout

    assert cli.run("prune", APP, "--dry-run").stdout.strip() == "would delete 0 done, 0 failed, 0 cancelled (0 jobs)"
    assert cli.run("prune", APP, "--older-than", "1ms", "--dry-run").stdout.startswith("would delete 1 done")
    assert cli.run("prune", "--database", cli.url, "--older-than", "1ms").stdout.startswith("deleted 1 done")
    assert app.counts() == {}
    assert "'soon' is not a duration" in cli.run("prune", APP, "--older-than", "soon", code=2).stderr


def test_without_the_schema_every_command_says_to_migrate_and_the_worker_exits_at_once(cli, capabilities):
    (cli.cwd / "unmigrated_app.py").write_text(
        "import os\nfrom leased import Leased\n\napp = Leased(os.environ['TEST_APP_URL'], migrate=False)\n\n\n"
        "@app.task(name='add')\ndef add(a, b):\n    return a + b\n")
    if capabilities.file_database:
        Path(parse_database_url(cli.url).sqlite_path).unlink()  # a path to nothing: no command but migrate makes it
    missing = "no SQLite database at" if capabilities.file_database else "leased's schema is missing from"
    for command in (["worker", "unmigrated_app:app"], ["jobs", "unmigrated_app:app"], ["show", "unmigrated_app:app", "1"],
                    ["enqueue", "unmigrated_app:app", "add", "[1, 2]"]):
        line = cli.error(*command)
        assert missing in line and "leased migrate" in line, (command, line)
    cli.run("migrate", "unmigrated_app:app")  # what the line says; then the same commands work
    assert json.loads(cli.run("enqueue", "unmigrated_app:app", "add", "[1, 2]", "--json").stdout)["status"] == "pending"


def test_queue_typos_are_refused_alike_with_words_that_fit_the_command(sqlite_cli):
    resume = sqlite_cli.error("resume", APP, "zzz")
    assert resume.startswith("error: unknown queue 'zzz': no task or job uses it (known queues: default)")
    assert resume.endswith("so it is not paused") and "force" not in resume  # --force is pause's
    limit = sqlite_cli.error("limit", APP, "defualt", "--concurrency", "5")  # as `pause` refuses it
    assert limit.startswith("error: unknown queue 'defualt' (did you mean 'default'?)") and limit.endswith("use --force")
    pause = sqlite_cli.error("pause", APP, "defualt")  # before: "use force=True (--force)", Python's words
    assert pause.startswith("error: unknown queue 'defualt' (did you mean 'default'?)") and pause.endswith(
        "to pause it before its first job, use --force")
    assert sqlite_cli.run("limit", APP, "later", "--concurrency", "5", "--force").stdout.strip() == \
        "queue later: concurrency 5"
    assert sqlite_cli.error("limit", APP, "default", "--concurrency", "0") == \
        "error: invalid --concurrency 0: use a whole number >= 1 (--clear removes the limits)"


def test_typos_in_enqueue_and_jobs_are_named(sqlite_cli):
    mistyped = sqlite_cli.run("enqueue", APP, "add", "[1, 2]", "--queue", "defualt")
    assert mistyped.stdout.startswith("job ")  # still enqueued: a new queue may be meant
    assert mistyped.stderr.strip() == (
        "warning: queue 'defualt' (did you mean 'default'?) is new: no task, schedule, worker or job of this app "
        "uses it (known queues: default); the job waits there until a worker serves it")
    assert sqlite_cli.run("enqueue", APP, "add", "[1, 2]", "--queue", "default").stderr == ""
    assert sqlite_cli.run("enqueue", APP, "add", "[1, 2]", "--queue", "defualt").stderr == ""  # it has a job now
    assert sqlite_cli.run("jobs", APP, "--task", "ad").stdout.strip() == \
        "no jobs match: unknown task 'ad' (did you mean 'add'?)"
    assert sqlite_cli.run("jobs", APP, "--task", "boom").stdout.strip() == "no jobs match"  # known, just no jobs
    assert sqlite_cli.run("jobs", APP, "--queue", "zzz").stdout.strip() == "no jobs match: unknown queue 'zzz'"
    assert "unknown task 'ad' (did you mean 'add'?); known tasks: add, boom" in sqlite_cli.error("enqueue", APP, "ad")
    as_json = sqlite_cli.run("jobs", APP, "--task", "ad", "--json")
    assert (as_json.stdout.strip(), as_json.stderr.strip()) == ("[]", "no jobs match: unknown task 'ad' (did you mean "
                                                                      "'add'?)")
    assert sqlite_cli.run("retry", APP, "--failed", "--task", "bom").stdout.strip() == (
        "no failed jobs (task bom): nothing to retry; unknown task 'bom' (did you mean 'boom'?)")


def test_python_dash_m_leased_runs_the_command(sqlite_cli):
    result = subprocess.run([sys.executable, "-m", "leased", "--help"], cwd=sqlite_cli.cwd, env=sqlite_cli.env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: leased [OPTIONS] COMMAND")


def test_every_time_shown_names_its_zone(sqlite_cli):
    sqlite_cli.env["TZ"] = "Asia/Tokyo"  # the viewer's zone: not UTC, so a time without its zone would mislead
    job = int(sqlite_cli.run("enqueue", APP, "add", "[1, 2]").stdout.split()[1])
    row = sqlite_cli.run("jobs", APP).stdout.splitlines()[1]
    assert row.split()[5:8][-1] == "JST", row
    shown = sqlite_cli.run("show", APP, str(job)).stdout
    assert [line.split()[-1] for line in shown.splitlines() if line.strip().startswith(("created", "run after"))] \
        == ["JST", "JST"]


def test_piped_tables_print_error_text_whole(sqlite_cli):
    """Cut to 120 columns when not on a terminal, an error read "PermanentEr...": a pipe, a log or
    grep gets it whole ($COLUMNS still fits a table to a width)."""
    from conftest import raw_sql

    app = Leased(sqlite_cli.url)
    register_tasks(app)
    job = app.get_task("boom").enqueue()
    long_error = "PermanentError: " + "the ledger and the bank disagree " * 8
    raw_sql(app, f"UPDATE leased_jobs SET status = 'failed', last_error = '{long_error}' WHERE id = {job.id}")
    assert long_error.strip() in sqlite_cli.run("jobs", APP).stdout
    sqlite_cli.env["COLUMNS"] = "100"
    assert long_error.strip() not in sqlite_cli.run("jobs", APP).stdout
    app.close()


def test_show_names_releases_at_shutdown_beside_an_attempt_count_past_the_budget(app):
    # A release is counted but never fails the job, so a job released on its last attempt runs a
    # fourth of three: `show` says why rather than print "4 of 3" alone.
    @app.task(name="slow", max_attempts=1)
    def slow(): ...

    job = slow.enqueue()
    (claimed,) = app.backend.claim(ClaimRequest("w1", ("slow",), None, 1))
    app.backend.release([claimed.lease], Outcome.SHUTDOWN, "released at shutdown")
    app.backend.claim(ClaimRequest("w2", ("slow",), None, 1))
    shown = " ".join(describe_job(app.get_job(job.id)).split())
    assert "attempt 2 of 1, 1 of them released at shutdown (counted, but a release never fails the job)" in shown
