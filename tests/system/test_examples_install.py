"""Each example in examples/, installed as its README says and run as its README says: in a fresh
venv with exactly what the README's `pip install` line installs (leased from this checkout), so a
dependency the example needs and the suite's own venv happens to have (greenlet, psycopg) cannot
hide. The FastAPI app is started with uvicorn and sent orders; the Django project migrates, places
an order and a worker confirms it.

pip reuses its cache, so a run takes a few tens of seconds. Without a reachable package registry the
tests skip, unless LEASED_REQUIRE_EXAMPLES=1 (CI sets it) makes that an error.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import wait_for
from leased import Leased
from paths import EXAMPLES
from servers import free_port, get, serving

pytestmark = pytest.mark.system
REQUIRED = os.environ.get("LEASED_REQUIRE_EXAMPLES") == "1"


def readme_commands(example: str) -> list[str]:
    """The lines of the example README's ```sh block, comments dropped."""
    (block,) = re.findall(r"```sh\n(.+?)\n```", (EXAMPLES / example / "README.md").read_text(), re.S)
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def user_env(venv: Path, **variables: str) -> dict[str, str]:
    """A shell of the venv's as a user's: none of the suite's own settings (PYTHONPATH to this src,
    Django's settings module, leased's database URL)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE") and not key.startswith("LEASED_")}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(venv),
            **variables}


def install(example: str, tmp_path: Path) -> Path:
    """A fresh venv with the README's `pip install` line run in the example's folder (no more)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    (line,) = [command for command in readme_commands(example) if command.startswith("pip install")]
    installed = subprocess.run(["bash", "-c", line], cwd=EXAMPLES / example, env=user_env(venv),
                               capture_output=True, text=True, timeout=600)
    if installed.returncode != 0:
        probe = subprocess.run([str(venv / "bin" / "pip"), "download", "--no-deps", "-d", str(tmp_path / "probe"),
                                "pip"], capture_output=True, text=True, timeout=300)
        if probe.returncode != 0 and not REQUIRED:
            pytest.skip(f"the package registry is unreachable: {probe.stderr.strip().splitlines()[-1:]}")
        raise AssertionError(f"{line!r} failed:\n{installed.stdout}{installed.stderr}")
    return venv


def post_json(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def fastapi_venv(tmp_path_factory) -> Path:
    return install("fastapi", tmp_path_factory.mktemp("fastapi-example"))


@pytest.mark.parametrize("backend_name", ["sqlite", "postgres"], indirect=True)
def test_the_fastapi_example_installs_and_serves_as_its_readme_says(fastapi_venv, backend_name, database_url,
                                                                    tmp_path):
    # On SQLite the README's line as it stands (shop.db in the app's folder); on PostgreSQL with the
    # test's database URL in place of it: psycopg comes from leased[postgres], nothing else.
    start = next(command for command in readme_commands("fastapi") if "uvicorn shop:api" in command)
    app_dir = tmp_path / "app"  # its shop.db goes here, not into the checkout
    app_dir.mkdir()
    shutil.copy(EXAMPLES / "fastapi" / "shop.py", app_dir)
    readmes_url = re.search(r"LEASED_DATABASE_URL=(\S+)", start).group(1)
    if backend_name == "postgres":
        start = start.replace(f"LEASED_DATABASE_URL={readmes_url}", f"LEASED_DATABASE_URL={shlex.quote(database_url)}")
        url = database_url
    else:
        url = readmes_url.replace(":///", f":///{app_dir}/", 1)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    token = re.search(r"LEASED_DASHBOARD_TOKEN=(\S+)", start).group(1)
    with serving(f"{start} --port {port}", app_dir, user_env(fastapi_venv), base + "/docs", tmp_path / "uvicorn.log"):
        status, placed = post_json(base + "/orders", {"order_id": 1, "email": "ada@example.com"})
        assert status == 201, placed
        assert post_json(base + "/orders", {"order_id": 1, "email": "eve@example.com"}) == (
            409, {"detail": "order 1 was placed already"})
        jobs = Leased(url)
        try:
            wait_for(lambda: jobs.get_job(placed["job_id"]).status == "done", timeout=60,
                     message="the lifespan's worker to send the receipt")
        finally:
            jobs.close()
        basic = base64.b64encode(f":{token}".encode()).decode()
        status, _, page = get(f"{base}/jobs/jobs/{placed['job_id']}", Authorization=f"Basic {basic}")
        assert status == 200 and "send_receipt" in page, page
        assert get(base + "/jobs/")[0] == 401


def test_the_django_example_installs_and_runs_as_its_readme_says(tmp_path):
    venv = install("django", tmp_path)
    env = user_env(venv, EXAMPLE_DATABASE=str(tmp_path / "db.sqlite3"))
    outputs = []
    for command in readme_commands("django"):
        if command.startswith("pip install"):
            continue
        if "leased_worker" in command:
            command += " --until-empty"  # the README's worker runs until Ctrl-C; this one until nothing is due
        done = subprocess.run(["bash", "-c", command], cwd=EXAMPLES / "django", env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, f"{command!r}:\n{done.stdout}{done.stderr}"
        outputs.append(done.stdout)
    assert "stopped: 1 done, 0 failed" in outputs[-2]
    assert outputs[-1].strip().endswith("confirmed order 1 to ada@example.com")
    checked = subprocess.run(["bash", "-c", "python manage.py check"], cwd=EXAMPLES / "django", env=env,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
