"""The README's test command, installed as a fresh machine would: from wheels alone, its own pip
first (tests/faces/test_readme.py checks the command's words; this runs its installs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from paths import ROOT
from test_readme import fresh_machine_commands

pytestmark = pytest.mark.system


@pytest.mark.timeout(900)  # some hundred wheels, from pip's cache or the registry
def test_the_test_command_installs_its_dependency_group_from_wheels_alone(tmp_path):
    # The test command's install steps, up to pytest, in a copy of the project: the venv's own pip
    # (too old for groups) upgrades itself first, then installs leased and the `test` group, all
    # from wheels (PIP_ONLY_BINARY=:all: refuses any source distribution, as a machine without
    # compilers would).
    _, tests = fresh_machine_commands()
    install, run_tests = tests.rsplit(" && ", 1)
    assert run_tests == ".venv/bin/pytest" and "--group test" in install
    for name in ("pyproject.toml", "README.md"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    subprocess.run(["cp", "-r", str(ROOT / "src"), str(tmp_path / "src")], check=True)
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    installed = subprocess.run(["bash", "-c", install], cwd=tmp_path, env={**env, "PIP_ONLY_BINARY": ":all:"},
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    probe = ("import importlib.metadata as m, leased, pytest, sphinx, mypy, playwright; "
             "print(m.version('pip'), leased.__file__)")
    pip_version, leased_file = subprocess.run([".venv/bin/python", "-c", probe], cwd=tmp_path, env=env,
                                              capture_output=True, text=True, check=True).stdout.split()
    assert tuple(int(part) for part in pip_version.split(".")[:2]) >= (25, 1)
    assert Path(leased_file).is_relative_to(tmp_path / "src")  # editable: the checkout's own code
