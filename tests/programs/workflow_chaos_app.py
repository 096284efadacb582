"""The worker program of the workflow chaos test (tests/system/test_workflow_chaos.py):
`python workflow_chaos_app.py WORKER_ID`, its database from $LEASED_DATABASE_URL.

Two tasks, registered by register(app) in the workers and in the test's producer alike:

    wfchaos.step(index)  a parallel step: sleeps a little, leaves an execution marker
                         step-<index>-<attempt>-<worker>, returns its index
    wfchaos.fan_in()     the step after all of them: writes start-<attempt>-<pid> with what it saw at
                         its start (how many parents, how many had ended done, how many results),
                         waits for the gate file, then writes end-<attempt>-<pid> and returns a
                         summary of the results

The gate: the test writes WF_GATE (a path) once the chaos is over, after it has killed the worker
holding the fan-in's first attempt; no process is killed after the gate exists. So an `end-`
marker is a run of the fan-in's body to completion, and the test can demand exactly one (a kill
after the body's last line but before its finish commits would re-run it: at-least-once, which
the gate rules out instead of tolerating).

Markers are written to a temporary name and renamed, so a SIGKILL never leaves a partial one.
Environment: CRASH_MARKERS (the marker directory), WF_LEASE, WF_CONCURRENCY, WF_STEP_MILLIS, WF_GATE.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from leased import Backoff, Leased

STEP = "wfchaos.step"
FAN_IN = "wfchaos.fan_in"
MAX_ATTEMPTS = 50  # no step is killed fifty times: a failed step is a finding, not chaos
MARKERS = Path(os.environ.get("CRASH_MARKERS", "."))


def register(app: Leased, lease: float | None = None):
    """The two tasks on `app`: the same names and options for the producer and the workers."""
    lease = float(os.environ.get("WF_LEASE", "1.5")) if lease is None else lease
    step_seconds = float(os.environ.get("WF_STEP_MILLIS", "10")) / 1000

    @app.task(name=STEP, lease=lease, max_attempts=MAX_ATTEMPTS, takes_context=True,
              backoff=Backoff(base=0.05, cap=0.2))
    def step(context, index: int) -> int:
        time.sleep(step_seconds)  # deaf to cancellation, as a sync handler may well be
        _marker(f"step-{index}-{context.attempt}-{context.worker_id}", "")
        return index

    @app.task(name=FAN_IN, lease=lease, max_attempts=MAX_ATTEMPTS, takes_context=True,
              backoff=Backoff(base=0.05, cap=0.2))
    def fan_in(context) -> dict:
        started = time.time()
        parents = context.parents
        results = context.parent_results
        seen = {"attempt": context.attempt, "worker_id": context.worker_id, "pid": os.getpid(),
                "started": started, "parents": len(parents),
                "parents_done": sum(1 for parent in parents.values() if parent.succeeded),
                "results": len(results)}
        _marker(f"start-{context.attempt}-{os.getpid()}", json.dumps(seen))
        gate = Path(os.environ["WF_GATE"])
        while not gate.exists():
            if context.cancelled.wait(0.02):
                context.raise_if_cancelled()
        values = sorted(results.values())
        summary = {"results": len(results), "sum": sum(values), "distinct": len(set(values)),
                   "min": values[0] if values else None, "max": values[-1] if values else None}
        _marker(f"end-{context.attempt}-{os.getpid()}", json.dumps({**seen, **summary, "ended": time.time()}))
        return summary

    return step, fan_in


def _marker(name: str, text: str) -> None:
    temporary = MARKERS / f".{name}.{threading.get_ident()}.tmp"
    temporary.write_text(text)
    os.replace(temporary, MARKERS / name)


if __name__ == "__main__":
    worker_id = sys.argv[1]
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {worker_id} %(levelname)s %(name)s %(message)s")
    app = Leased(os.environ["LEASED_DATABASE_URL"])
    register(app)
    app.worker(concurrency=int(os.environ.get("WF_CONCURRENCY", "4")), poll_interval=0.05,
               shutdown_grace=15.0, worker_id=worker_id).run()
