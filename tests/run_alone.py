"""A readers-writer lock between the xdist workers of one test run, on two files in a directory
they share: a test marked `alone` (it restarts or reconfigures a shared server, or reads what every
session on it is doing) holds it exclusively, every other test shares it.

The `gate` file gives the exclusive holder precedence: it takes the gate before it waits for the
tests under way to end, and a test takes the gate (briefly) before it shares the lock, so the
workers' next tests queue behind it rather than starving it. flock's locks go with the process:
a worker that dies releases its hold.
"""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class RunAlone:
    def __init__(self, directory: Path) -> None:
        self.gate = directory / "run-alone.gate"
        self.lock = directory / "run-alone.lock"

    @contextmanager
    def shared(self) -> Iterator[None]:
        with open(self.lock, "a") as lock:
            with open(self.gate, "a") as gate:
                fcntl.flock(gate, fcntl.LOCK_EX)
                fcntl.flock(lock, fcntl.LOCK_SH)
            yield  # the gate closed (and released) at once: only the shared hold lasts the test

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with open(self.gate, "a") as gate, open(self.lock, "a") as lock:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
