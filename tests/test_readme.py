"""The README's quick start runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"


def test_quick_start_runs_and_prints_what_it_says(tmp_path):
    quick_start = README.read_text().split("## Quick start", 1)[1]
    code = re.search(r"```python\n(.*?)```", quick_start, re.DOTALL)[1]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["emailing the owner of proposal p-1", "done sent"]


@pytest.mark.parametrize("section, printed", [
    ("### Pausing a queue", ["pending", "done"]),
    ("### Retention: the table does not grow forever", ["{'done': 0, 'failed': 0, 'cancelled': 0}"]),
])
def test_pause_and_retention_examples_run(tmp_path, section, printed):
    code = re.search(r"```python\n(.*?)```", README.read_text().split(section, 1)[1], re.DOTALL)[1]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == printed
