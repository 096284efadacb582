"""The Python of the README and of every page of the docs site runs as written, so it cannot drift
from the code.

Every ```python block is executed as a script in a fresh directory, unless COMPILE_ONLY lists its
section with the reason it cannot run on its own (those are still compiled) or RUN_SEPARATELY names
the test that runs it. Every other block (a shell command, a URL, a diagram) names, in NOT_RUN or
RUN_SEPARATELY, why it is not run here and what checks it instead.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from paths import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(page for page in DOCS.rglob("*.md") if "_build" not in page.parts)]
CLI = [sys.executable, "-m", "leased.cli.main"]

# The block's section heading -> why it is compiled, not run.
COMPILE_ONLY = {
    "On MariaDB": "the reader's own server and credentials",
    "The API in one page": "a tour of the API in fragments: order_is_gone, steps, conn and job_id stand for the "
                           "reader's own, and `await` needs the reader's event loop",
    "The dashboard and metrics": "a Starlette mount inside the reader's ASGI app, with their token",
    "Your own app in tests": "a conftest fixture around the reader's own app (`from myapp import app`)",
    "Alembic": "a revision module, run by Alembic's command: tests/conformance/test_alembic.py runs one",
    "With Django": "fragments of the reader's settings and tasks modules; the runnable project, "
                   "examples/django, runs in tests/django/test_example.py",
}
RUN_SEPARATELY = {
    "Quick start": "test_quick_start_runs_and_prints_what_it_says checks its output too",
    "In your own transaction": "test_enqueue_in_your_own_transaction_runs_as_written checks its output too",
    "Periodic jobs": "test_periodic_jobs_example_registers_and_ticks runs it with a worker",
    "Pausing a queue": "test_pause_and_retention_examples_run checks its output too",
    "Retention: the table does not grow forever": "test_pause_and_retention_examples_run checks its output too",
    "Limits": "test_limits_example_runs_and_prints_what_it_says checks its output too",
    "Why is my job not running?": "test_why_example_runs_and_prints_what_it_says checks its output too",
    "Testing your handlers": "test_the_idempotency_example_catches_the_handler_that_is_not runs it with pytest",
    "Workflows: steps that wait for other steps":
        "test_workflow_example_runs_and_prints_what_it_says checks its output",
    "Two commands on a fresh machine": "the test command is CI's, word for word "
                                       "(test_ci_runs_the_readmes_test_command_word_for_word...), and both "
                                       "venv steps run in "
                                       "test_the_two_commands_one_after_the_other_leave_one_working_venv, "
                                       "the test command's installs in test_the_test_command_installs_its_dependency_"
                                       "group_from_wheels_alone",
    "The docs": "tests/faces/test_docs.py builds the site as this command does, with warnings as errors",
    "A FastAPI request, traced into its job": "test_a_request_traced_into_its_job_prints_the_chain checks its "
                                              "trace",
    "A Django view, traced into its job": "test_a_request_traced_into_its_job_prints_the_chain checks its trace "
                                          "(Django 6 needs Python 3.12)",
}
# Blocks that are not Python, by (page, section heading), or by page for all of its blocks -> why
# they are not run here, and what checks them instead.
NOT_RUN = {
    ("docs/benchmarks.md", None): "the benchmarks' own commands, minutes each against real servers and peers "
                                  "installed from PyPI, and their output; bench/run.py writes this page",
    ("docs/explanation/architecture.md", "Layout"): "a directory tree; tests/unit/test_imports.py holds its layers",
    ("docs/reference/cli.md", "The command line"): "a synopsis; the reference below it is generated from the "
                                                   "commands, and tests/faces/test_cli.py runs them",
    ("docs/howto/dashboard.md", "The dashboard and metrics"): "installs and serves until stopped; "
                                                              "tests/faces/test_web.py serves the dashboard",
    ("docs/howto/django.md", "With Django"):
        "examples/django's commands; tests/system/test_examples_install.py runs them",
    ("docs/howto/failover.md", "Failover (PostgreSQL)"):
        "a URL for the reader's servers; tests/system/test_failover.py connects with one of this form",
    ("docs/howto/pgbouncer.md", "Behind PgBouncer"): "a URL for the reader's servers; tests/system/test_pgbouncer.py "
                                                     "connects with one of this form",
    ("docs/howto/why.md", "Why is my job not running?"): "what `leased why` prints for the reader's job; "
                                                         "tests/features/test_why.py checks the text",
    ("docs/reliability.md", "Behind PgBouncer"): "URLs and log lines of the reader's servers; "
                                                 "tests/system/test_pgbouncer.py checks them",
    ("docs/reliability.md", "Failover"):
        "a URL for the reader's servers; tests/system/test_failover.py connects with one",
    ("docs/reliability.md", "Least privilege (PostgreSQL and MariaDB)"):
        "grants to the reader's roles; tests/conformance/test_postgres_grants.py and "
        "tests/conformance/test_mariadb_grants.py run them",
    ("docs/tutorial.md", "Testing your handlers"):
        "the reader's pytest.ini; tests/features/test_testing.py sets the option",
}


class Block(NamedTuple):
    page: str  # relative to the repository: README.md, docs/howto/limits.md
    heading: str  # the section it is in
    line: int
    language: str  # what follows the opening ```: python, sh, or "" for plain text
    code: str


def code_blocks() -> list[Block]:
    """Every fenced block of the README and the docs pages; MyST directives (```{toctree}) are not code."""
    blocks = []
    for page in PAGES:
        lines, heading, number = page.read_text().splitlines(), "", 0
        while number < len(lines):
            line = lines[number]
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            if line.startswith("```"):
                end = next(index for index in range(number + 1, len(lines)) if lines[index].startswith("```"))
                language = line[3:].strip()
                if not language.startswith("{"):
                    code = "\n".join(lines[number + 1:end]) + "\n"
                    blocks.append(Block(str(page.relative_to(ROOT)), heading, number + 1, language, code))
                number = end
            number += 1
    return blocks


ALL_BLOCKS = code_blocks()
BLOCKS = [(block.heading, block.line, block.code) for block in ALL_BLOCKS if block.language == "python"]
PAGE_OF = {block.heading: block.page for block in ALL_BLOCKS if block.language == "python"}


def section_code(heading: str) -> str:
    """The one ```python block of the section `heading`, on whichever page it is."""
    (code,) = [code for block_heading, _, code in BLOCKS if block_heading == heading]
    return code


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "LEASED_DATABASE_URL"}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def test_every_block_is_checked_by_someone():
    headings = {block.heading for block in ALL_BLOCKS}
    assert set(COMPILE_ONLY) | set(RUN_SEPARATELY) <= headings, "a listed section has no code block any more"
    assert "Quick start" in {heading for heading, _, _ in BLOCKS}
    python_sections = [(block.page, block.heading) for block in ALL_BLOCKS if block.language == "python"]
    assert len({heading for _, heading in python_sections}) == len(set(python_sections)), \
        ("two pages have a python block under the same heading: "
         "COMPILE_ONLY and RUN_SEPARATELY could not tell them apart")


def test_every_block_that_is_not_python_says_why_it_is_not_run_here():
    unexplained = [f"{block.page}:{block.line} ({block.heading}, ```{block.language})" for block in ALL_BLOCKS
                   if block.language != "python" and block.heading not in RUN_SEPARATELY
                   and (block.page, block.heading) not in NOT_RUN and (block.page, None) not in NOT_RUN]
    assert unexplained == [], "a code block neither runs nor says why: add it to NOT_RUN"


def test_every_not_run_entry_still_has_its_block():
    places = {(block.page, block.heading) for block in ALL_BLOCKS} | {(block.page, None) for block in ALL_BLOCKS}
    assert [place for place in NOT_RUN if place not in places] == []


@pytest.mark.parametrize("heading, line, code", BLOCKS,
                         ids=[f"{PAGE_OF[heading]}:{line}" for heading, line, _ in BLOCKS])
def test_readme_block_compiles_or_runs(heading, line, code, tmp_path):
    compile(code, f"{PAGE_OF[heading]}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if heading in COMPILE_ONLY or heading in RUN_SEPARATELY:
        return
    (tmp_path / "example.py").write_text(code)
    run([sys.executable, "example.py"], tmp_path)


def quick_start() -> str:
    return section_code("Quick start")


@pytest.mark.parametrize("section, framework, request_span", [
    ("A FastAPI request, traced into its job", "fastapi", "POST /orders/{order_id}"),
    ("A Django view, traced into its job", "django.tasks", "POST orders/<order_id>"),
])
def test_a_request_traced_into_its_job_prints_the_chain(tmp_path, section, framework, request_span):
    """The framework's request span, the enqueue's send span, the worker's attempt and the handler's
    own span, each the parent of the next: the request's trace continues into the job."""
    pytest.importorskip(framework)
    (tmp_path / "example.py").write_text(section_code(section))
    printed = run([sys.executable, "example.py"], tmp_path).stdout.splitlines()
    assert printed[-1] == f"render receipt < process default < send default < {request_span}"


def test_workflow_example_runs_and_prints_what_it_says(tmp_path):
    code = section_code("Workflows: steps that wait for other steps")
    (tmp_path / "example.py").write_text(code)
    assert run([sys.executable, "example.py"], tmp_path).stdout.strip() == "succeeded 4 of 4 steps done"


def test_quick_start_runs_and_prints_what_it_says(tmp_path):
    (tmp_path / "myapp.py").write_text(quick_start())
    result = run([sys.executable, "myapp.py"], tmp_path)
    assert result.stdout.splitlines() == ["emailing the owner of proposal p-1", "done sent"]


def test_why_example_runs_and_prints_what_it_says(tmp_path):
    code = section_code("Why is my job not running?")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Job 1 (charge on queue billing) is pending."
    assert lines[1].startswith("It is due in ") and lines[2].startswith("No live worker: ")
    assert lines[-1] == "['not_due', 'no_workers']"

def test_importing_the_quick_start_enqueues_nothing(tmp_path):
    # What `leased worker myapp:app` and every other command do first: import the module.
    (tmp_path / "myapp.py").write_text(quick_start())
    run([sys.executable, "-c", "import myapp"], tmp_path)
    run([*CLI, "migrate", "myapp:app"], tmp_path)  # the other commands refuse a SQLite file that is not there
    assert json.loads(run([*CLI, "jobs", "myapp:app", "--json"], tmp_path).stdout) == []
    run([sys.executable, "myapp.py"], tmp_path)
    assert len(json.loads(run([*CLI, "jobs", "myapp:app", "--json"], tmp_path).stdout)) == 2
    assert len(json.loads(run([*CLI, "jobs", "myapp:app", "--json"], tmp_path).stdout)) == 2


def test_the_test_database_is_created_when_missing():
    # The README's test command on a fresh PostgreSQL server: conftest makes the database it needs.
    from conftest import _POSTGRES_PROBLEM, POSTGRES_URL, _create_database_if_missing

    if _POSTGRES_PROBLEM:
        pytest.skip(_POSTGRES_PROBLEM)
    import uuid

    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"leased_created_{uuid.uuid4().hex[:8]}"
    _create_database_if_missing(make_conninfo(POSTGRES_URL, dbname=name))
    with psycopg.connect(make_conninfo(POSTGRES_URL, dbname="postgres"), autocommit=True) as connection:
        try:
            assert connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        finally:
            connection.execute(f'DROP DATABASE "{name}"')


def test_enqueue_in_your_own_transaction_runs_as_written(tmp_path):
    code = section_code("In your own transaction")
    (tmp_path / "example.py").write_text(code)
    result = run([sys.executable, "example.py"], tmp_path)
    assert result.stdout.splitlines() == ["pending"]


def test_periodic_jobs_example_registers_and_ticks(tmp_path):
    """The example as written, with a worker that runs until its first schedule has been seen."""
    code = section_code("Periodic jobs")
    check = ("\nimport threading, time\nworker = app.worker(poll_interval=0.05)\n"
             "def stop_once_seen():\n"
             "    while any(s.last_tick_at is None for s in app.list_schedules()):\n"
             "        time.sleep(0.01)\n"
             "    worker.stop()\n"
             "threading.Thread(target=stop_once_seen).start()\n"
             "worker.run()\nprint([(s.name, s.expression, s.timezone) for s in app.list_schedules()])\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(README.parent / "src")}
    result = subprocess.run([sys.executable, "-c", code + check], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == ("[('prune_sessions', 'every 3600s', 'UTC'), "
                                              "('send_digest', '*/5 * * * *', 'Europe/Paris')]")


def test_limits_example_runs_and_prints_what_it_says(tmp_path):
    code = section_code("Limits")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["{'api': QueueLimit(queue_name='api', concurrency=5, rate_limit=None)}"]


@pytest.mark.parametrize("section, printed", [
    ("Pausing a queue", ["pending", "done"]),
    ("Retention: the table does not grow forever", ["{'done': 0, 'failed': 0, 'cancelled': 0}"]),
])
def test_pause_and_retention_examples_run(tmp_path, section, printed):
    code = section_code(section)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == printed


def test_the_idempotency_example_catches_the_handler_that_is_not(tmp_path):
    """The README's test module, run with pytest and leased's plugin: every mode catches the handler
    that is not idempotent, and passes the one that is."""
    code = section_code("Testing your handlers")
    (tmp_path / "test_emails.py").write_text(code)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q",  # the plugin comes from the pytest11 entry point
                          "-p", "no:cacheprovider", "-p", "no:django",
                          "-rf", "test_emails.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={key: value for key, value in os.environ.items() if key != "LEASED_TEST_DATABASE_URL"})
    assert "3 failed, 3 passed" in run.stdout, run.stdout + run.stderr
    failed = re.findall(r"FAILED test_emails.py::test_a_welcome_email_is_sent_once\[(\w+)-(\w+)\]", run.stdout)
    assert sorted(failed) == [("concurrently", "register"), ("lost_ack", "register"), ("twice", "register")]


def fresh_machine_commands() -> tuple[str, str]:
    """The two commands of "Two commands on a fresh machine": the demo's, then the test suite's."""
    section = README.read_text().split("## Two commands on a fresh machine", 1)[1].split("\n## ", 1)[0]
    demo, tests = re.findall(r"```sh\n(.+?)\n```", section, re.S)
    return demo, tests


def test_ci_runs_the_readmes_test_command_word_for_word_and_installs_nothing_it_builds_against():
    # CI proves the README's command on a fresh machine only if it runs that command, after
    # installing no more than the optional tools the README names (a C header installed first
    # would hide an install that needs it).
    _, tests = fresh_machine_commands()
    ci = (README.parent / ".ci" / "run").read_text()
    assert tests in ci.splitlines()
    installed = " ".join(re.findall(r'missing="\$missing ([^"]+)"', ci))
    assert set(installed.split()) <= {"faketime", "chromium", "pgbouncer", "iproute2"}, installed
    assert "-dev" not in ci and "pkg-config" not in ci


def test_the_two_commands_one_after_the_other_leave_one_working_venv(tmp_path):
    # Their venv steps, in the README's order, in one clone: the test command's Python must be the
    # venv's python and its pip's alike (not the demo's 3.11 python beside 3.12's pip).
    demo, tests = fresh_machine_commands()
    interpreters = [command.split(" -m venv")[0].split()[-1] for command in (demo, tests)]
    missing = [name for name in interpreters if subprocess.run(["bash", "-c", f"command -v {name}"],
                                                               capture_output=True).returncode]
    if missing:
        pytest.skip(f"{', '.join(missing)} not on PATH")
    for command in (demo, tests):
        venv_step = command.split(" && ")[0]
        subprocess.run(["bash", "-c", venv_step], cwd=tmp_path, check=True, timeout=300)
    python = subprocess.run([".venv/bin/python", "-c", "import sys; print(*sys.version_info[:2])"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout.split()
    pip = subprocess.run([".venv/bin/pip", "--version"], cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout
    version = " -c 'import sys; print(*sys.version_info[:2])'"
    expected = subprocess.run(["bash", "-c", tests.split(" -m venv")[0] + version], capture_output=True, text=True,
                              check=True).stdout.split()
    assert python == expected and f"(python {'.'.join(expected)})" in pip, (python, pip)
