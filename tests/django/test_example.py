"""examples/django runs as its README says: migrate, place an order, a worker confirms it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urljoin

import pytest

pytest.importorskip("django.tasks")  # Django 6 (Python 3.12+); not this folder, which is also "django"
pytestmark = pytest.mark.system

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
    printed = manage("shell", "-c", "from shop.tasks import send_confirmation as t; "
                                    "print(t.get_result('1').return_value)")
    assert printed.strip().endswith("confirmed order 1 to ada@example.com")
    manage("makemigrations", "--check", "--dry-run")  # leased's models match its hand-written migration


def test_the_django_examples_admin_is_served_with_its_css(tmp_path):
    # runserver serves static files only with django.contrib.staticfiles and STATIC_URL: without
    # them the admin's pages load and their stylesheets answer 404 (an unstyled admin).
    from servers import free_port, get, serving

    env = {**os.environ, "EXAMPLE_DATABASE": str(tmp_path / "db.sqlite3"), "DJANGO_SETTINGS_MODULE": "mysite.settings",
           "PYTHONPATH": os.pathsep.join([str(SOURCE), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=EXAMPLE, env=env, check=True,
                   timeout=120)
    base = f"http://127.0.0.1:{free_port()}"
    with serving([sys.executable, "manage.py", "runserver", "--noreload", base.removeprefix("http://")], EXAMPLE, env,
                 base + "/admin/login/", tmp_path / "runserver.log"):
        status, _, page = get(base + "/admin/login/")
        assert status == 200, page
        stylesheets = re.findall(r'<link rel="stylesheet" href="([^"]+)"', page)
        assert stylesheets, page
        for href in stylesheets:  # as a browser resolves them
            status, content_type, _ = get(urljoin(base + "/admin/login/", href))
            assert (status, content_type.split(";")[0]) == (200, "text/css"), href


def test_the_examples_database_is_ignored_by_git():
    """Following the README in a checkout makes examples/django/db.sqlite3: `git status` must not list it."""
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=EXAMPLE, capture_output=True, text=True)
    if inside.stdout.strip() != "true":
        pytest.skip("not a git checkout")
    for name in ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm", "db.sqlite3-journal"):
        ignored = subprocess.run(["git", "check-ignore", "--quiet", "--no-index", name], cwd=EXAMPLE)
        assert ignored.returncode == 0, f"examples/django/{name} is not ignored"
