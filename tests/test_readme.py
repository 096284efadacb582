"""The README's quick start runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_quick_start_runs_and_prints_what_it_says(tmp_path):
    quick_start = README.read_text().split("## Quick start", 1)[1]
    code = re.search(r"```python\n(.*?)```", quick_start, re.DOTALL)[1]
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["emailing the owner of proposal p-1", "done sent"]


def test_periodic_jobs_example_registers_and_ticks(tmp_path):
    """The example as written, with a worker that runs until its first schedule has been seen."""
    section = README.read_text().split("### Periodic jobs", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)[1]
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
