"""Exactly-once effects under chaos: three worker processes drain jobs whose transactional handlers
add 1 to a counter row and insert an effect row, while a chaos loop SIGKILLs them, SIGSTOPs them
past their lease and, on PostgreSQL and MariaDB, has the server end their sessions. Afterwards
every job is done, each has exactly one effect row, and the counter equals the number of jobs.
The same faults hit handlers of three durable steps (TaskContext.step): a transactional step's
effect happens once per job, a plain step's at least once and never after its record committed.

The workers run tests/programs/exactly_once_app.py. A kill or a lost session rolls an attempt's writes back
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
from exactly_once_app import STEPS_TASK, TABLES, TASK, register
from leased import JobStatus
from leased.backends import DIALECTS

# Alone: their workers hold one-second leases, which the other xdist workers' load made them miss.
pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.alone]

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


class Chaos:
    """Three worker processes and the faults dealt them, in turn, while they drain `jobs` jobs."""

    def __init__(self, app, worker_processes, backend_name: str):
        self.app, self._start_process = app, worker_processes
        self.generation: Counter = Counter()
        self.processes: dict[int, object] = {}
        self.ids: dict[int, str] = {}
        self.faults: Counter = Counter()
        # Taken in turn; a database of sessions on a server has them killed too.
        server = not DIALECTS[backend_name].capabilities.file_database
        self.kinds = ["kill"] + (["sessions"] if server else []) + ["stop"]

    def start(self, slot: int) -> None:
        self.ids[slot] = f"w{slot}-{self.generation[slot]}"
        self.generation[slot] += 1
        self.processes[slot] = self._start_process(
            "exactly_once_app.py", self.ids[slot], EO_LEASE=str(LEASE), EO_CONCURRENCY=str(CONCURRENCY),
            EO_TRANSACTIONAL="1" if TRANSACTIONAL else "0")

    def busy(self) -> list[int]:
        running = {worker.id for worker in self.app.workers() if worker.running}
        return [slot for slot, worker_id in self.ids.items() if worker_id in running]

    def run(self, jobs: int) -> float:
        """Deal faults for CHAOS_SECONDS (or until every job is done), then wait for the drain;
        returns the seconds from the workers' start to the last job done."""
        for slot in range(WORKERS):
            self.start(slot)
        started = time.monotonic()
        rng = random.Random(SEED)
        done = lambda: self.app.counts()["default"]["done"]
        wait_for(lambda: done() > 0, timeout=60, message="the workers to start")
        began = time.monotonic()
        while time.monotonic() - began < CHAOS_SECONDS and done() < jobs:
            for slot, process in list(self.processes.items()):
                assert process.poll() is None, f"{self.ids[slot]} exited by itself with code {process.returncode}"
            if victims := self.busy():
                self._fault(rng.choice(victims))
            time.sleep(rng.uniform(*PACE))
        wait_for(lambda: done() == jobs, timeout=DRAIN_TIMEOUT, interval=0.1, message=f"all {jobs} jobs done")
        drained = time.monotonic() - started
        for process in self.processes.values():
            process.terminate()
            assert process.wait(30) == 0
        return drained

    def _fault(self, slot: int) -> None:
        fault = self.kinds[sum(self.faults.values()) % len(self.kinds)]
        self.faults[fault] += 1
        process = self.processes[slot]
        if fault == "kill":
            process.kill()
            process.wait()
            self.start(slot)
        elif fault == "stop":  # past its lease: another worker takes the job over meanwhile
            process.send_signal(signal.SIGSTOP)
            time.sleep(LEASE * 1.5)
            process.send_signal(signal.SIGCONT)
        else:
            kill_worker_sessions(self.app)


def _prepared(app, monkeypatch) -> None:
    monkeypatch.setenv("EO_LEASE", str(LEASE))
    register(app)
    for statement in TABLES:
        raw_sql(app, statement)


def _no_traceback(tmp_path) -> None:
    log = "".join(path.read_text() for path in tmp_path.glob("w*.log"))
    assert "Traceback" not in log


def test_every_job_has_exactly_one_effect_under_kills_stops_and_lost_sessions(app, worker_processes, tmp_path,
                                                                             backend_name, monkeypatch):
    _prepared(app, monkeypatch)
    app.tasks[TASK].enqueue_many([(index,) for index in range(JOBS)])
    chaos = Chaos(app, worker_processes, backend_name)
    drained = chaos.run(JOBS)

    effects = Counter(job_id for (job_id,) in raw_rows(app, "SELECT job_id FROM eo_effects"))
    counter = raw_scalar(app, "SELECT value FROM eo_counter WHERE id = 1")
    repeated = sum(1 for job in app.list_jobs(task_name=TASK, limit=JOBS) if job.attempt > 1)
    duplicates = sum(count - 1 for count in effects.values())
    print(f"\n{backend_name}: {'transactional' if TRANSACTIONAL else 'plain'}, {JOBS} jobs, "
          f"faults {dict(chaos.faults)}, {repeated} jobs run more than once, {duplicates} duplicate effects, "
          f"counter {counter}; all done after {drained:.1f} s")
    assert app.count_jobs(status=JobStatus.DONE, task_name=TASK, queue_name=None) == JOBS
    if TRANSACTIONAL:  # (the plain handler, faster, may drain before every kind of fault has landed)
        assert set(chaos.faults) == set(chaos.kinds), f"not every kind of fault landed: {dict(chaos.faults)}"
        assert len(effects) == JOBS and duplicates == 0, f"{duplicates} duplicate effects"
        assert counter == JOBS
    _no_traceback(tmp_path)


def test_durable_steps_under_kills_stops_and_lost_sessions(app, worker_processes, tmp_path, backend_name,
                                                           monkeypatch):
    """Three steps per job, the worker killed anywhere: the transactional step's effect happens
    once per job; a plain step's at least once, and never by an attempt after the one that
    recorded it."""
    _prepared(app, monkeypatch)
    jobs = JOBS // 2
    app.tasks[STEPS_TASK].enqueue_many([(index,) for index in range(jobs)])
    chaos = Chaos(app, worker_processes, backend_name)
    drained = chaos.run(jobs)

    effects: dict[tuple[int, str], list[int]] = {}
    for job_id, step, attempt in raw_rows(app, "SELECT job_id, step, attempt FROM eo_step_effects"):
        effects.setdefault((job_id, step), []).append(attempt)
    ran_again = 0
    for job in app.list_jobs(task_name=STEPS_TASK, limit=jobs):
        assert job.status is JobStatus.DONE
        recorded = {step.name: step.attempt for step in app.job_steps(job.id)}
        assert set(recorded) == {"plain", "tx", "last"}
        assert effects[job.id, "tx"] == [recorded["tx"]], f"job {job.id}: tx step ran {effects[job.id, 'tx']}"
        for name in ("plain", "last"):
            attempts = effects[job.id, name]
            assert max(attempts) <= recorded[name], f"job {job.id}: step {name} ran after its record"
            ran_again += len(attempts) - 1
    print(f"\n{backend_name}: durable steps, {jobs} jobs, faults {dict(chaos.faults)}, plain steps run again "
          f"{ran_again} times, every transactional step once; all done after {drained:.1f} s")
    _no_traceback(tmp_path)
