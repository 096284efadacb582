"""The linter over the tree, as pyproject.toml's [tool.ruff] configures it (lint only, no formatting)."""

from __future__ import annotations

import subprocess
import sys

from paths import ROOT


def test_the_tree_passes_its_linter():
    checked = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "examples", "bench"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
