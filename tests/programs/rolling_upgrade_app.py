"""The program of a rolling upgrade (tests/rolling_upgrade.py): the same file runs on the previous
release's leased and on this checkout's, whichever PYTHONPATH names, so it uses only the API both have.

    python rolling_upgrade_app.py worker NAME     runs jobs until SIGTERM
    python rolling_upgrade_app.py producer NAME   enqueues jobs at $UPGRADE_RATE a second until SIGTERM

Database from $LEASED_DATABASE_URL; records in $UPGRADE_RECORDS, one file per process, a line per event:
a producer writes `KEY SECONDS` once enqueue() has returned (the job is committed by then), a worker's
handler `KEY SECONDS NAME` as it starts, both in time.time() seconds of this one machine. The first line
of every file names the leased the process imported, so a test can see which release ran.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import leased
from leased import Leased
from rolling_upgrade import TASK

app = Leased(os.environ["LEASED_DATABASE_URL"])
RECORDS = Path(os.environ.get("UPGRADE_RECORDS", "."))
WORKER_NAME = ""  # the process's name, from its command line


class Records:
    """One process's file of records: whole lines appended with one write each, from any thread."""

    def __init__(self, name: str):
        self.descriptor = os.open(RECORDS / f"{name}.records", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.add(f"leased {Path(leased.__file__).resolve().parent}")

    def add(self, line: str) -> None:
        os.write(self.descriptor, (line + "\n").encode())


records: Records | None = None


@app.task(name=TASK, max_attempts=5, lease=30)
def record(key: str) -> None:
    records.add(f"{key} {time.time():.6f} {WORKER_NAME}")


def produce(rate: float) -> None:
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())  # the enqueue under way finishes and is recorded
    number, began = 0, time.monotonic()
    while not stopping.is_set():
        number += 1
        key = f"{WORKER_NAME}-{number}"
        app.tasks[TASK].enqueue(key)
        records.add(f"{key} {time.time():.6f}")
        # A steady rate, not a burst after a slow enqueue: the next one is due at number / rate.
        stopping.wait(max(0.0, began + number / rate - time.monotonic()))


if __name__ == "__main__":
    role, WORKER_NAME = sys.argv[1], sys.argv[2]
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {WORKER_NAME} %(levelname)s %(name)s %(message)s")
    records = Records(WORKER_NAME)
    if role == "producer":
        produce(float(os.environ.get("UPGRADE_RATE", "40")))
    else:
        app.worker(concurrency=int(os.environ.get("UPGRADE_CONCURRENCY", "4")), worker_id=WORKER_NAME,
                   poll_interval=float(os.environ.get("UPGRADE_POLL", "0.2"))).run()
