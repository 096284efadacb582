"""A worker process for the crash tests: python crash_app.py WORKER_ID (database from $LEASED_DATABASE_URL)."""

import logging
import os
import sys
import threading
import time
from pathlib import Path

from leased import Backoff, Leased

app = Leased(os.environ["LEASED_DATABASE_URL"])
MARKERS = Path(os.environ.get("CRASH_MARKERS", "."))


@app.task(name="hold", lease=1.0, takes_context=True, max_attempts=3)
def hold(context, mode):
    if context.attempt == 1 and mode == "forever":
        time.sleep(3600)
    if context.attempt == 1 and mode == "progress":
        context.progress(7, 14, "halfway there")  # carried by the next renewal, then the worker is killed
        time.sleep(3600)
    if context.attempt == 1 and mode == "late":
        (MARKERS / f"started-{context.worker_id}").touch()
        # Deliberately deaf to cancellation: it will try to finish after losing its lease. (An Event's
        # wait, not time.sleep, which libfaketime breaks for a clock set back.)
        threading.Event().wait(2)
        (MARKERS / f"returned-{context.worker_id}").touch()
        return f"late from {context.worker_id}"
    if mode == "exit":
        os._exit(3)  # a poison job: takes its worker process down with it, every time
    if mode == "sleep":
        time.sleep(0.3)
    return f"done by {context.worker_id}"


@app.task(name="await_go", lease=10.0, takes_context=True)
def await_go(context):
    """Sleeps, then waits for signal "go": its workers are killed while it sleeps and while it waits,
    when it holds no lease (a long one: the test is not about leases running out under load)."""
    context.sleep(2)
    payload = context.wait_for("go")
    (MARKERS / f"seen-{context.job_id}-{context.attempt}").touch()  # once per attempt that got the payload
    return payload


@app.task(name="share")
def share():
    """A quick job under the default lease: a 1 s lease on a loaded machine expires when a process
    stalls past it, which is the lease doing its work, not the sharing the test is about."""
    return "shared"


@app.task(name="interrupting", max_attempts=2, backoff=Backoff(base=0, jitter=0))
def interrupting():
    raise KeyboardInterrupt("raised by the handler, not by a signal")  # before: stopped its worker


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    worker = app.worker(concurrency=2, poll_interval=0.05, worker_id=sys.argv[1])
    if os.environ.get("CRASH_PRUNE_BATCH"):  # prune at once, in many small batches, for the mid-prune kill
        from leased.engine import pruner

        pruner.FIRST_PASS_WITHIN = 0.0
        worker.pruner.batch_size = int(os.environ["CRASH_PRUNE_BATCH"])
    worker.run()
