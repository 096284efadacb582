"""The wheel users install: it runs the demo and a worker from a fresh venv, it carries py.typed (so
their checker reads our annotations) and none of the suite's tools, and its version is
leased.__version__, the one place the version is written (pyproject reads it)."""

from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import leased
from paths import ROOT

pytestmark = pytest.mark.system  # pip builds the wheel and installs it in a fresh venv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # pip builds it as a user's pip would, in an isolated environment with hatchling (from pip's cache).
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(ROOT)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    (built_wheel,) = dist.glob("leased-*.whl")
    return built_wheel


def test_the_wheel_is_typed_and_versioned_from_the_package(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        fields = email.message_from_bytes(archive.read(metadata))
    version = fields["Version"]
    assert "leased/py.typed" in names
    # Users' extras only: the suite's tools (Playwright, Django, FastAPI...) are a dependency group,
    # which a wheel never carries.
    assert "test" not in fields.get_all("Provides-Extra")
    assert version == leased.__version__
    assert wheel.name.startswith(f"leased-{leased.__version__}-")


APP = '''
from leased import Leased

app = Leased("sqlite:///jobs.db")


@app.task
def add(a: int, b: int) -> int:
    return a + b
'''

ENQUEUE_AND_WAIT = '''
import sys, time
from app import add, app

job = add.enqueue(2, 3)
deadline = time.monotonic() + 120
while (done := app.get_job(job.id)).status != "done":  # the worker in the other process runs it
    assert time.monotonic() < deadline, done
    time.sleep(0.05)
print(done.result)
'''


def test_the_built_wheel_runs_the_demo_and_a_worker_in_a_fresh_venv(wheel, tmp_path):
    # The wheel users get, installed as they install it (not editable, in a venv holding nothing
    # else), runs the README's first command and a worker: nothing it needs is left out of it.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([venv / "bin" / "pip", "install", "--quiet", str(wheel)], capture_output=True, text=True,
                               timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    work = tmp_path / "project"
    work.mkdir()
    demo = subprocess.run([venv / "bin" / "leased", "demo", "--jobs", "12", "--seed", "7"], cwd=work,
                          capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "12 sample jobs" in demo.stdout and "failed jobs" in demo.stdout, demo.stdout
    (work / "app.py").write_text(APP)
    migrated = subprocess.run([venv / "bin" / "leased", "migrate", "app:app"], cwd=work, capture_output=True,
                              text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    worker = subprocess.Popen([venv / "bin" / "leased", "worker", "app:app", "--poll-interval", "0.1"], cwd=work,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ran = subprocess.run([venv / "bin" / "python", "-c", ENQUEUE_AND_WAIT], cwd=work, capture_output=True,
                             text=True, timeout=180)
    finally:
        worker.terminate()
        log, _ = worker.communicate(timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr + log
    assert ran.stdout.strip() == "5"
    assert worker.returncode == 0, log
