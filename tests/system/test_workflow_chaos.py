"""A workflow under chaos: three worker processes drain 2,000 parallel steps and one fan-in step
while a chaos loop SIGKILLs and restarts them. The fan-in runs to completion exactly once, after the
last parent ended, and sees all 2,000 results; no step is lost, stuck or released twice.

The workers run tests/programs/workflow_chaos_app.py. The kills land while the parents drain: every 0.3 to
0.8 s, of a worker that holds running jobs, for up to CHAOS_SECONDS. Then one more, deliberate,
kills the worker whose fan-in attempt has started (its handler waits at a gate for that): the
fan-in's next attempt, after the lease expires, must again see all 2,000 results. Only then is the
gate opened, and nothing is killed after: a kill between the fan-in body's end and its finish's
commit would re-run it (at-least-once), so "its body completed exactly once" is asserted for a run
in which no kill can land there.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import wait_for
from leased import JobStatus, Outcome
from leased.runs import WorkflowStatus
from workflow_chaos_app import register

# Alone: their workers hold one-second leases, which the other xdist workers' load made them miss.
pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.alone]

# The suite's sizes; bench/workflow_chaos.py soaks longer through the same test with WF_CHAOS_* set.
STEPS = int(os.environ.get("WF_CHAOS_STEPS", 2_000))
WORKERS = int(os.environ.get("WF_CHAOS_WORKERS", 3))
CONCURRENCY = int(os.environ.get("WF_CHAOS_CONCURRENCY", 4))
LEASE = 1.5
STEP_MILLIS = int(os.environ.get("WF_CHAOS_STEP_MILLIS", 10))
CHAOS_SECONDS = float(os.environ.get("WF_CHAOS_SECONDS", 3.5))  # or until the last parent ends
PACE = (0.3, 0.8)  # seconds between kills, drawn uniformly
SEED = int(os.environ.get("WF_CHAOS_SEED", 11))
DRAIN_TIMEOUT = float(os.environ.get("WF_CHAOS_DRAIN_TIMEOUT", 120))  # bounds a failing run only
LOCKED = "database is locked"


class Fleet:
    """Slot n runs worker wn-<generation>; a killed one is replaced at once by the next generation."""

    def __init__(self, worker_processes, gate: Path):
        self._start = worker_processes
        self.gate = gate
        self.processes: dict[int, object] = {}
        self.ids: dict[int, str] = {}
        self.generation: Counter = Counter()
        self.kills: list[tuple[float, str]] = []  # (time.time() of the SIGKILL, worker id)
        self.unexpected: list[str] = []
        self.logs: list[str] = []

    def start(self, slot: int) -> None:
        worker_id = f"w{slot}-{self.generation[slot]}"
        self.generation[slot] += 1
        self.processes[slot] = self._start("workflow_chaos_app.py", worker_id, WF_LEASE=str(LEASE),
                                           WF_CONCURRENCY=str(CONCURRENCY), WF_STEP_MILLIS=str(STEP_MILLIS),
                                           WF_GATE=str(self.gate))
        self.ids[slot] = worker_id
        self.logs.append(worker_id)

    def kill(self, slot: int) -> str:
        worker_id, process = self.ids[slot], self.processes[slot]
        self.kills.append((time.time(), worker_id))
        process.kill()
        process.wait()
        self.start(slot)
        return worker_id

    def busy(self, app) -> list[int]:
        """The slots whose worker holds running jobs: a kill there lands mid-job. (A victim drawn
        from every slot would often be a process still starting, which a loaded machine makes
        slow: killed again and again before it claims anything, the fleet would do nothing.)"""
        running = {worker.id for worker in app.workers() if worker.running}
        return [slot for slot, worker_id in self.ids.items() if worker_id in running]

    def slot_of(self, worker_id: str) -> int | None:
        return next((slot for slot, current in self.ids.items() if current == worker_id), None)

    def check_alive(self) -> None:
        """A worker that exits by itself is a finding: note it, and replace it so the run goes on."""
        for slot, process in list(self.processes.items()):
            if process.poll() is not None:
                self.unexpected.append(f"{self.ids[slot]} exited by itself with code {process.returncode}")
                self.start(slot)

    def terminate_all(self, app) -> list[str]:
        # A worker registers once its signal handlers are in: a SIGTERM before then would kill a
        # just-restarted one outright.
        wait_for(lambda: (self.check_alive(), set(self.ids.values()) <= {worker.id for worker in app.workers()})[1],
                 timeout=60, message="every current worker to register")
        for process in self.processes.values():
            process.terminate()
        return [f"{self.ids[slot]} exited with {code} after SIGTERM" for slot, process in self.processes.items()
                if (code := process.wait(30)) != 0]


def _markers(directory: Path, prefix: str) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob(f"{prefix}-*"))]


def test_fan_in_of_2000_steps_runs_once_after_all_of_them_under_sigkill_chaos(app, worker_processes, tmp_path,
                                                                              backend_name):
    step, fan_in = register(app, LEASE)
    app.counts()  # the schema in place before the worker processes race for it
    began = time.monotonic()
    wf = app.workflow("chaos-fan-in")
    parents = [wf.add(step, index, name=f"step-{index}") for index in range(STEPS)]
    wf.add(fan_in, name="fan-in", after=parents)
    run = wf.enqueue()
    fan_in_id = run.job_ids["fan-in"]
    enqueued = time.monotonic() - began
    assert app.get_job(fan_in_id).status is JobStatus.WAITING

    gate = tmp_path / "gate"
    fleet = Fleet(worker_processes, gate)
    rng = random.Random(SEED)
    for slot in range(WORKERS):
        fleet.start(slot)
    started = time.monotonic()

    # The chaos: kills of busy workers at random while the parents drain. The pacing between kills
    # is not synchronisation: every wait for an outcome is on a condition.
    wait_for(lambda: app.counts()["default"]["done"] > 0, timeout=60, message="the workers to start on the steps")
    chaos_began = time.monotonic()
    while time.monotonic() - chaos_began < CHAOS_SECONDS:
        fleet.check_alive()
        if app.get_job(fan_in_id).status is not JobStatus.WAITING:
            break  # the last parent ended: from here on only the deliberate kill below
        if busy := fleet.busy(app):
            fleet.kill(rng.choice(busy))
        time.sleep(rng.uniform(*PACE))
    chaos_kills = len(fleet.kills)
    chaos_seconds = time.monotonic() - chaos_began

    # The deliberate kill: of the (live) worker whose fan-in attempt has started and waits at the gate.
    def started_on_a_live_worker():
        fleet.check_alive()
        live = [seen for seen in _markers(tmp_path, "start") if fleet.slot_of(seen["worker_id"]) is not None]
        return live[-1] if live else None

    first = wait_for(started_on_a_live_worker, timeout=DRAIN_TIMEOUT, message="the fan-in to start on a live worker")
    parents_drained = time.monotonic() - started
    fleet.kill(fleet.slot_of(first["worker_id"]))
    gate.write_text("open")  # no kill after this line
    wait_for(lambda: (fleet.check_alive(), app.get_job(fan_in_id).is_finished)[1], timeout=DRAIN_TIMEOUT,
             message="the fan-in to finish")
    elapsed = time.monotonic() - started
    exits = fleet.terminate_all(app)
    renewals = sum(log.count("could not renew") for log in
                   ((tmp_path / f"{worker_id}.log").read_text(errors="replace") for worker_id in fleet.logs))
    print(f"\n{backend_name}: {STEPS} steps + fan-in, {WORKERS} workers x {CONCURRENCY}, lease {LEASE:g} s: enqueued "
          f"in {enqueued:.2f} s; {chaos_kills} kills in {chaos_seconds:.1f} s of chaos; the parents drained and the "
          f"fan-in started {parents_drained:.1f} s after the workers did, all done after {elapsed:.1f} s; "
          f"'could not renew' logged {renewals} times; unexpected exits: {fleet.unexpected}")
    assert fleet.unexpected == [] and exits == []
    assert chaos_kills >= 1  # the chaos happened while the parents drained

    # What the database says: the run succeeded, every step done once, nothing left behind.
    info = app.get_workflow(run.id)
    assert info.status is WorkflowStatus.SUCCEEDED, info.counts
    assert info.counts == {"done": STEPS + 1} and info.total == STEPS + 1
    counts = app.counts()
    assert set(counts) == {"default"}, counts
    left = {status: n for status, n in counts["default"].items() if n and status != "done"}
    assert left == {} and counts["default"]["done"] == STEPS + 1, counts
    finished = app.throughput(timedelta(days=1))  # each finish counted once, in the transaction that wrote it
    assert (sum(row.done for row in finished), sum(row.failed for row in finished)) == (STEPS + 1, 0)

    by_name = {info_step.name: info_step for info_step in info.steps}
    assert set(by_name) == {f"step-{index}" for index in range(STEPS)} | {"fan-in"}
    for index in range(STEPS):
        parent = by_name[f"step-{index}"]
        assert (parent.status, parent.result, parent.parents, parent.parents_left) == (JobStatus.DONE, index, (), 0)
    final = by_name["fan-in"]
    assert final.job_id == fan_in_id and final.status is JobStatus.DONE
    assert final.parents_left == 0  # each parent's end counted once: not released early, nor counted twice
    assert len(final.parents) == STEPS
    assert final.result == {"results": STEPS, "sum": sum(range(STEPS)), "distinct": STEPS, "min": 0,
                            "max": STEPS - 1}

    # Attempt by attempt: each job's history is 1..attempt, one done (the last); every other attempt
    # expired on a worker killed while it was open. A step may have run more than once only so.
    kills_of: dict[str, list[float]] = defaultdict(list)
    for when, worker_id in fleet.kills:
        kills_of[worker_id].append(when)

    def killed_during(attempt) -> bool:
        opened, closed = attempt.started_at.timestamp() - 0.05, attempt.finished_at.timestamp() + 0.05
        return any(opened <= when <= closed for when in kills_of[attempt.worker_id])

    executions: dict[int, set[tuple[int, str]]] = defaultdict(set)
    for path in tmp_path.glob("step-*"):
        _, index, attempt, worker_id = path.name.split("-", 3)
        executions[int(index)].add((int(attempt), worker_id))
    assert set(executions) == set(range(STEPS)), "a step done without its handler's marker"

    problems: list[str] = []
    expired = duplicates = 0
    histories = {}
    for name, info_step in by_name.items():
        ran = executions[int(name.split("-")[1])] if name != "fan-in" else set()
        if info_step.attempt == 1 and name != "fan-in":
            # Claimed once and done: its one execution is attempt 1's. (Reading each of these
            # histories through get_job would add seconds per database, and say nothing more.)
            if {number for number, _ in ran} != {1} or len(ran) != 1:
                problems.append(f"{name}: done on its first attempt, but its executions were {sorted(ran)}")
            continue
        job = app.get_job(info_step.job_id)
        histories[name] = history = job.history
        if [attempt.number for attempt in history] != list(range(1, job.attempt + 1)):
            problems.append(f"{name}: history numbers {[a.number for a in history]} for attempt {job.attempt}")
        if not history or history[-1].outcome is not Outcome.DONE or history[-1].number != job.attempt:
            problems.append(f"{name}: its last attempt is not the done one: {history[-1:]}")
            continue
        for attempt in history[:-1]:
            expired += 1
            if attempt.outcome is not Outcome.EXPIRED:
                problems.append(f"{name}: attempt {attempt.number} by {attempt.worker_id} ended {attempt.outcome}")
            elif not killed_during(attempt):
                problems.append(f"{name}: attempt {attempt.number} by {attempt.worker_id} expired, and no kill of "
                                f"that worker fell between {attempt.started_at} and {attempt.finished_at}")
        if name == "fan-in":
            continue
        done = history[-1]
        if (done.number, done.worker_id) not in ran:
            problems.append(f"{name}: done by {done.worker_id} on attempt {done.number}, which left no marker")
        extra = ran - {(done.number, done.worker_id)}
        duplicates += bool(extra)
        recorded = {(attempt.number, attempt.worker_id) for attempt in history[:-1]}
        problems += [f"{name}: ran on attempt {number} by {worker_id}, not an expired attempt of its history"
                     for number, worker_id in sorted(extra - recorded)]
    assert problems == [], "\n".join(problems[:50])

    # The fan-in: every start saw all 2,000 parents done; its body completed exactly once, on the
    # attempt that ended done; its first attempt began after the last parent's finish.
    starts, ends = _markers(tmp_path, "start"), _markers(tmp_path, "end")
    assert starts and all((seen["parents"], seen["parents_done"], seen["results"]) == (STEPS, STEPS, STEPS)
                          for seen in starts), starts
    fan_in_history = histories["fan-in"]
    assert len(ends) == 1, ends
    (end,) = ends
    assert (end["attempt"], end["worker_id"]) == (fan_in_history[-1].number, fan_in_history[-1].worker_id)
    assert (end["results"], end["sum"], end["distinct"]) == (STEPS, sum(range(STEPS)), STEPS)
    killed = next(attempt for attempt in fan_in_history if attempt.number == first["attempt"])
    assert (killed.worker_id, killed.outcome) == (first["worker_id"], Outcome.EXPIRED)
    last_parent_end = max(by_name[f"step-{index}"].finished_at for index in range(STEPS))
    assert fan_in_history[0].started_at >= last_parent_end, (fan_in_history[0], last_parent_end)
    assert final.finished_at >= fan_in_history[-1].started_at

    logs = {worker_id: (tmp_path / f"{worker_id}.log").read_text(errors="replace") for worker_id in fleet.logs}
    assert not [worker_id for worker_id, log in logs.items() if LOCKED in log]
    assert not [worker_id for worker_id, log in logs.items() if "Traceback" in log]
    print(f"  fan-in attempts {[(a.number, a.worker_id, a.outcome.value) for a in fan_in_history]}, "
          f"{expired} expired attempts in all, {duplicates} steps ran twice (on attempts whose worker was killed); "
          f"checked in {time.monotonic() - started - elapsed:.1f} s")
