"""The app of tests/system/test_processes.py, run by `leased worker processes_app:app --processes N`.

Its handlers record which process ran them (each returns os.getpid()) and wait on files in
$CRASH_MARKERS, so that the test decides when they end. With $PROCESSES_DIE_AT_START set, every
process that imports it dies at once: a deploy broken for good.
"""

import os
import threading
import time
from pathlib import Path

from leased import Leased

if os.environ.get("PROCESSES_DIE_AT_START"):
    os._exit(3)

app = Leased(os.environ["LEASED_DATABASE_URL"])
MARKERS = Path(os.environ.get("CRASH_MARKERS", "."))


def wait_until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        threading.Event().wait(0.01)


@app.task(name="hold", lease=1.0, takes_context=True, max_attempts=3)
def hold(context):
    """First attempt: say which process holds it, and wait for the test's go; later ones return at once."""
    if context.attempt == 1:
        (MARKERS / f"holding-{os.getpid()}-{context.job_id}").touch()
        wait_until(lambda: (MARKERS / "go").exists() or context.is_cancelled, timeout=60)
    return os.getpid()
