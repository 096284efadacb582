"""examples/django runs as its README says: migrate, place an order, a worker confirms it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+); not this folder, which is also "django"

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "django"
SOURCE = Path(__file__).parent.parent.parent / "src"


def test_the_django_example_runs(tmp_path):
    env = {**os.environ, "EXAMPLE_DATABASE": str(tmp_path / "db.sqlite3"), "DJANGO_SETTINGS_MODULE": "mysite.settings",
           "PYTHONPATH": os.pathsep.join([str(SOURCE), os.environ.get("PYTHONPATH", "")])}

    def manage(*arguments: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *arguments], cwd=EXAMPLE, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    manage("migrate", "--verbosity", "0")
    manage("check")
    assert "'1'" in manage("shell", "-c", "from shop.tasks import place_order; print(place_order('ada@example.com'))")
    assert "stopped: 1 done, 0 failed" in manage("leased_worker", "--until-empty", "--queues", "default,mail")
    assert manage("shell", "-c", "from shop.tasks import send_confirmation as t; "
                                 "print(t.get_result('1').return_value)").strip().endswith("confirmed order 1 to ada@example.com")
    manage("makemigrations", "--check", "--dry-run")  # leased's models match its hand-written migration
