"""Exactly-once effects under chaos: three worker processes drain jobs whose transactional handlers
add 1 to a counter row and insert an effect row, while a chaos loop SIGKILLs them, SIGSTOPs them
past their lease and, on PostgreSQL and MariaDB, has the server end their sessions. Afterwards
every job is done, each has exactly one effect row, and the counter equals the number of jobs.

The workers run tests/exactly_once_app.py. A kill or a lost session rolls an attempt's writes back
with it; a worker stopped past its lease finds the lease gone when it resumes, and its fenced end
rolls back. bench/exactly_once.py soaks longer, and runs the same handlers without a transaction
beside it, counting their duplicates.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter

import pytest

from conftest import kill_worker_sessions, raw_rows, raw_scalar, raw_sql, wait_for
from exactly_once_app import TABLES, register
from leased import JobStatus

pytestmark = pytest.mark.slow

# The suite's sizes; bench/exactly_once.py runs bigger with EO_CHAOS_* set.
JOBS = int(os.environ.get("EO_CHAOS_JOBS", 400))
WORKERS = 3
CONCURRENCY = int(os.environ.get("EO_CONCURRENCY", 4))
LEASE = 1.5
CHAOS_SECONDS = float(os.environ.get("EO_CHAOS_SECONDS", 3))  # or until every job is done
PACE = (0.2, 0.6)  # seconds between faults, drawn uniformly: pacing, not synchronisation
SEED = int(os.environ.get("EO_CHAOS_SEED", 7))
DRAIN_TIMEOUT = float(os.environ.get("EO_CHAOS_DRAIN_TIMEOUT", 120))  # bounds a failing run only
TRANSACTIONAL = os.environ.get("EO_TRANSACTIONAL", "1") == "1"


def test_every_job_has_exactly_one_effect_under_kills_stops_and_lost_sessions(app, worker_processes, tmp_path,
                                                                             backend_name, monkeypatch):
    monkeypatch.setenv("EO_LEASE", str(LEASE))
    register(app)
    for statement in TABLES:
        raw_sql(app, statement)
    credit = app.tasks["eo.credit"]
    credit.enqueue_many([(index,) for index in range(JOBS)])

    generation: Counter = Counter()
    processes: dict[int, object] = {}
    ids: dict[int, str] = {}
    faults: Counter = Counter()

    def start(slot: int) -> None:
        ids[slot] = f"w{slot}-{generation[slot]}"
        generation[slot] += 1
        processes[slot] = worker_processes("exactly_once_app.py", ids[slot], EO_LEASE=str(LEASE),
                                           EO_CONCURRENCY=str(CONCURRENCY),
                                           EO_TRANSACTIONAL="1" if TRANSACTIONAL else "0")

    def busy() -> list[int]:
        running = {worker.id for worker in app.workers() if worker.running}
        return [slot for slot, worker_id in ids.items() if worker_id in running]

    for slot in range(WORKERS):
        start(slot)
    rng = random.Random(SEED)
    kinds = ["kill"] + ([] if backend_name == "sqlite" else ["sessions"]) + ["stop"]  # taken in turn
    wait_for(lambda: app.counts()["default"]["done"] > 0, timeout=60, message="the workers to start")
    began = time.monotonic()
    started = time.monotonic()
    while time.monotonic() - began < CHAOS_SECONDS and app.counts()["default"]["done"] < JOBS:
        for slot, process in list(processes.items()):
            assert process.poll() is None, f"{ids[slot]} exited by itself with code {process.returncode}"
        if victims := busy():
            slot = rng.choice(victims)
            fault = kinds[sum(faults.values()) % len(kinds)]
            faults[fault] += 1
            if fault == "kill":
                processes[slot].kill()
                processes[slot].wait()
                start(slot)
            elif fault == "stop":  # past its lease: another worker takes the job over meanwhile
                processes[slot].send_signal(signal.SIGSTOP)
                time.sleep(LEASE * 1.5)
                processes[slot].send_signal(signal.SIGCONT)
            else:
                kill_worker_sessions(app)
        time.sleep(rng.uniform(*PACE))

    wait_for(lambda: app.counts()["default"]["done"] == JOBS, timeout=DRAIN_TIMEOUT, interval=0.1,
             message=f"all {JOBS} jobs done")
    drained = time.monotonic() - started
    for process in processes.values():
        process.terminate()
        assert process.wait(30) == 0

    effects = Counter(job_id for (job_id,) in raw_rows(app, "SELECT job_id FROM eo_effects"))
    counter = raw_scalar(app, "SELECT value FROM eo_counter WHERE id = 1")
    repeated = sum(1 for job in app.list_jobs(task_name="eo.credit", limit=JOBS) if job.attempt > 1)
    duplicates = sum(count - 1 for count in effects.values())
    print(f"\n{backend_name}: {'transactional' if TRANSACTIONAL else 'plain'}, {JOBS} jobs, faults {dict(faults)}, "
          f"{repeated} jobs run more than once, {duplicates} duplicate effects, counter {counter}; "
          f"all done after {drained:.1f} s")
    assert app.count_jobs(status=JobStatus.DONE, task_name="eo.credit", queue_name=None) == JOBS
    if TRANSACTIONAL:  # (the plain handler, faster, may drain before every kind of fault has landed)
        assert set(faults) == set(kinds), f"not every kind of fault landed: {dict(faults)}"
        assert len(effects) == JOBS and duplicates == 0, f"{duplicates} duplicate effects"
        assert counter == JOBS
    log = "".join(path.read_text() for path in tmp_path.glob("w*.log"))
    assert "Traceback" not in log
