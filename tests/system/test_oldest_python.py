"""The library on the oldest Python it declares (pyproject's requires-python), not only on the 3.12
the suite runs on: every module compiles, every module imports where its dependencies are
installed, and the README's quick start and `leased demo` run.

The suite itself needs 3.12 (Django 6.1's floor), so a 3.12-only construct in the library would
pass every other test and break `pip install leased` on 3.11. The interpreter is found on PATH or
among pyenv's versions; without one the tests skip, unless LEASED_REQUIRE_OLDEST_PYTHON=1 (CI sets
it) makes that an error. Its environment is a fresh venv with the library's required dependencies
only, and leased itself comes from this tree (PYTHONPATH, set by conftest).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from paths import ROOT
from test_readme import quick_start, run

pytestmark = pytest.mark.system

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
FLOOR = tuple(int(part) for part in re.fullmatch(r">=\s*(\d+)\.(\d+)", PROJECT["requires-python"]).groups())
REQUIRED = os.environ.get("LEASED_REQUIRE_OLDEST_PYTHON") == "1"


def _interpreter() -> str | None:
    """A Python whose major.minor is the floor: python3.X on PATH, or pyenv's newest 3.X.*."""
    name = f"python{FLOOR[0]}.{FLOOR[1]}"
    candidates = [shutil.which(name)]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    versions = sorted(Path(pyenv_root, "versions").glob(f"{FLOOR[0]}.{FLOOR[1]}.*"),
                      key=lambda path: [int(part) for part in re.findall(r"\d+", path.name)], reverse=True)
    candidates += [str(version / "bin" / name) for version in versions]
    for candidate in filter(None, candidates):
        try:
            found = subprocess.run([candidate, "-c", "import sys; print(*sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if found.returncode == 0 and tuple(map(int, found.stdout.split())) == FLOOR:
            return candidate
    return None


@pytest.fixture(scope="module")
def oldest(tmp_path_factory) -> str:
    """The venv's python: the floor's interpreter with the library's required dependencies."""
    interpreter = _interpreter()
    if interpreter is None:
        problem = f"no Python {FLOOR[0]}.{FLOOR[1]} (requires-python's floor) on PATH or in pyenv"
        if REQUIRED:
            pytest.fail(problem + " (LEASED_REQUIRE_OLDEST_PYTHON=1)")
        pytest.skip(problem)
    venv = tmp_path_factory.mktemp("oldest-python") / "venv"
    subprocess.run([interpreter, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    installed = subprocess.run([python, "-m", "pip", "install", "-q", *PROJECT["dependencies"]],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    return python


def test_every_module_compiles(oldest, tmp_path):
    # Syntax new in later Pythons (type parameter lists, nested f-string quotes) fails here.
    script = ("import pathlib, sys\n"
              "for path in sorted(pathlib.Path(sys.argv[1]).rglob('*.py')):\n"
              "    compile(path.read_text(), str(path), 'exec')\n")
    run([oldest, "-c", script, str(ROOT / "src" / "leased")], tmp_path)


def test_every_module_imports_where_its_dependencies_are_installed(oldest, tmp_path):
    # Names and arguments new in later Pythons (typing.override, make_dataclass's module=) fail
    # at import. A missing optional dependency (psycopg, starlette, django...) is not this test's.
    script = """
import importlib, pkgutil, leased
imported, optional = [], set()
for module in pkgutil.walk_packages(leased.__path__, "leased."):
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as error:
        if error.name.split(".")[0] == "leased":
            raise
        optional.add(error.name.split(".")[0])
    else:
        imported.append(module.name)
print(len(imported), " ".join(sorted(optional)))
"""
    result = run([oldest, "-c", script], tmp_path)
    count, *missing = result.stdout.split()
    assert int(count) >= 40, result.stdout  # the core, the CLI, the engine and the SQLite backend at least
    assert "click" not in missing and "croniter" not in missing


def test_the_quick_start_runs(oldest, tmp_path):
    (tmp_path / "myapp.py").write_text(quick_start())
    result = run([oldest, "myapp.py"], tmp_path)
    assert result.stdout.splitlines() == ["emailing the owner of proposal p-1", "done sent"]


def test_the_demo_runs(oldest, tmp_path):
    result = run([oldest, "-m", "leased.cli.main", "demo", "--jobs", "12", "--seed", "1"], tmp_path)
    assert "leased demo --dashboard" in result.stdout

