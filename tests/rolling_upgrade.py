"""A rolling upgrade as teams deploy one, with the previous release's code taken from git history:
its workers and a producer run under load, then this checkout's code migrates and its workers start
beside them (or its workers start first and migrate as they start). Shared by
tests/system/test_rolling_upgrade.py (seconds a run) and bench/stalls.py (a longer soak).

Each process is rolling_upgrade_app.py on one release's `src`, in a subprocess of its own; what the
producers saw enqueued and what the handlers ran is read from their record files afterwards.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

from paths import PROGRAMS, ROOT, TESTS

NEW_SOURCE = ROOT / "src"
PROGRAM = PROGRAMS / "rolling_upgrade_app.py"
TASK = "upgrade.record"  # the one task the program's producers enqueue and its workers run

# Earlier releases a rolling upgrade starts from, by the schema version they run: the last commit
# before migration 0021 (bef9734 added it) and the last before 0025 (9db4098). OLD_RELEASE, the
# previous release, is the newest; add one here when a newer migration makes a newer previous release.
OLDER_RELEASES = {
    20: "1ee9b314fbf31a3a0d6d3f299d259c0688ffc5a5",
    24: "9219a745d150b242beb379f8970eb18e7a5b2438",
}
OLD_RELEASE = OLDER_RELEASES[max(OLDER_RELEASES)]
# This release's schema versions (the files, the same on every database): numbers merged from branches
# may leave a gap (0028 before 0026).
VERSIONS = sorted(int(path.name[:4]) for path in (NEW_SOURCE / "leased/backends/sqlite/migrations").glob("[0-9]*.sql"))

# Orders of a deploy: `leased migrate` from the new release, then its workers; or the new workers
# first, each migrating as it starts (Leased's default), two at once.
MIGRATE_THEN_ROLL = "migrate-then-roll"
NEW_WORKERS_FIRST = "new-workers-first"


class OldReleaseUnavailable(Exception):
    """This checkout has no git history holding OLD_RELEASE (a tarball, a shallow clone)."""


def old_release_source(destination: Path, commit: str = OLD_RELEASE) -> Path:
    """A commit's `src` (OLD_RELEASE's unless told), written under `destination` from git history (once:
    a second call reuses it)."""
    source = destination / "src"
    if (source / "leased" / "__init__.py").exists():
        return source
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src"],
                                 capture_output=True, check=True, timeout=60).stdout
    except FileNotFoundError as error:
        raise OldReleaseUnavailable(f"git is not installed ({error})") from error
    except subprocess.CalledProcessError as error:
        raise OldReleaseUnavailable(f"{ROOT} has no commit {commit[:7]} in its git history "
                                    f"({error.stderr.decode().strip()})") from error
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(destination, filter="data")
    return source


@dataclass
class Load:
    """How hard and how long: the test's is short, the benchmark's a soak."""

    rate: float = 40.0  # jobs a second, each producer
    concurrency: int = 4
    poll_interval: float = 0.2
    before: float = 1.0  # seconds of old processes alone, after their first job ran
    beside: float = 1.0  # seconds of old and new side by side, after both ran a job on the new schema


@dataclass
class Outcome:
    enqueued: dict[str, float]  # key: when its producer's enqueue returned
    runs: list[tuple[str, float, str]]  # key, when a handler began it, by which process
    releases: dict[str, str]  # process name: the leased package it imported
    exit_codes: dict[str, int]
    migrate_output: str
    alive_before_stop: dict[str, bool]
    logs: dict[str, str] = field(default_factory=dict)
    timeline: list[tuple[str, float]] = field(default_factory=list)  # what happened, when (time.time())

    def phases(self) -> list[tuple[str, float]]:
        """The timeline in seconds from the start, for a failure message or a benchmark's log."""
        start = self.timeline[0][1] if self.timeline else 0.0
        return [(what, round(when - start, 2)) for what, when in self.timeline]

    @property
    def waits(self) -> list[float]:
        """Seconds each job that ran waited between its producer seeing it enqueued and a handler
        beginning it (every worker has free slots at this load: the time it sat pending beside them)."""
        return self._waits(self.enqueued)

    def waits_between(self, first: str, last: str) -> list[float]:
        """The waits of the jobs enqueued between two points of the timeline."""
        marks = dict(self.timeline)
        return self._waits([key for key, at in self.enqueued.items() if marks[first] <= at < marks[last]])

    def _waits(self, keys) -> list[float]:
        first_start: dict[str, float] = {}
        for key, began, _ in self.runs:
            first_start[key] = min(began, first_start.get(key, began))
        return [max(0.0, first_start[key] - self.enqueued[key]) for key in keys if key in first_start]

    @property
    def _counts(self) -> Counter:
        return Counter(key for key, _, _ in self.runs)

    @property
    def lost(self) -> list[str]:
        counts = self._counts
        return sorted(key for key in self.enqueued if counts[key] == 0)

    @property
    def run_twice(self) -> list[str]:
        return sorted(key for key, count in self._counts.items() if count > 1)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)] if ordered else 0.0


class Fleet:
    """The processes of one upgrade, each on one release's code, recording into one folder."""

    def __init__(self, database_url: str, old_source: Path, folder: Path, load: Load, new_source: Path = NEW_SOURCE):
        self.database_url, self.folder, self.load = database_url, folder, load
        self.sources = {"old": old_source, "new": new_source}
        self.processes: dict[str, subprocess.Popen] = {}

    def environment(self, release: str) -> dict[str, str]:
        # PYTHONPATH whole, not prepended to: the tests' own points at this checkout's src.
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROGRAMS), str(TESTS), str(self.sources[release])]),
                "LEASED_DATABASE_URL": self.database_url, "UPGRADE_RECORDS": str(self.folder),
                "UPGRADE_RATE": str(self.load.rate), "UPGRADE_CONCURRENCY": str(self.load.concurrency),
                "UPGRADE_POLL": str(self.load.poll_interval)}

    def migrate(self, release: str) -> str:
        """`leased migrate` of one release, as a deploy's migration step runs it: its output."""
        done = subprocess.run([sys.executable, "-m", "leased", "migrate", "rolling_upgrade_app:app"],
                              env=self.environment(release), capture_output=True, text=True, timeout=180)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise AssertionError(f"the {release} release's `leased migrate` exited {done.returncode}: {output}")
        return output

    def start(self, release: str, role: str, name: str) -> None:
        log = open(self.folder / f"{name}.log", "w")
        self.processes[name] = subprocess.Popen([sys.executable, str(PROGRAM), role, name],
                                                env=self.environment(release), stdout=log, stderr=subprocess.STDOUT)

    def stop(self, name: str) -> int:
        """SIGTERM, as a deploy stops a process: its exit code, once it has exited."""
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=60)

    def finish(self, producers: tuple[str, ...], workers: tuple[str, ...], migrate_output: str,
               timeline: list[tuple[str, float]]) -> Outcome:
        """Stop the producers, wait for every job they saw enqueued, stop the workers, and read it all."""
        alive = {name: process.poll() is None for name, process in self.processes.items()}
        exit_codes = {name: self.stop(name) for name in producers}
        wait_until(lambda: not unrun(self), 60, "every enqueued job to run", self, fail=False)
        timeline.append(("every job ran", time.time()))
        exit_codes |= {name: self.stop(name) for name in workers}
        timeline.append(("workers stopped", time.time()))
        enqueued, runs, releases = self.records()
        return Outcome(enqueued, runs, releases, exit_codes, migrate_output, alive,
                       {log.stem: log.read_text() for log in self.folder.glob("*.log")}, timeline)

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()

    def records(self) -> tuple[dict[str, float], list[tuple[str, float, str]], dict[str, str]]:
        enqueued, runs, releases = {}, [], {}
        for path in self.folder.glob("*.records"):
            lines = path.read_text().splitlines()
            if lines:
                releases[path.stem] = lines[0].split(" ", 1)[1]
            for line in lines[1:]:
                fields = line.split(" ")
                if len(fields) == 2:
                    enqueued[fields[0]] = float(fields[1])
                else:
                    runs.append((fields[0], float(fields[1]), fields[2]))
        return enqueued, runs, releases

    def ran_since(self, names: tuple[str, ...], since: float) -> set[str]:
        """Which of the named processes' handlers began a job after `since`."""
        return {name for _, began, name in self.records()[1] if name in names and began > since}

    def wait_started(self, workers: tuple[str, ...]) -> None:
        """Until the workers have logged their start line (both releases say `worker NAME started`):
        jobs enqueued from then on wait beside them, not for their start-up."""
        wait_until(lambda: all(f"worker {name} started" in (self.folder / f"{name}.log").read_text()
                               for name in workers),
                   60, f"the start lines of {', '.join(workers)}", self)

    def check_alive(self) -> None:
        dead = {name: process.returncode for name, process in self.processes.items() if process.poll() is not None}
        if dead:
            raise AssertionError(f"processes stopped: {dead}\n" + self.log_tail(*dead))

    def log_tail(self, *names: str) -> str:
        return "\n".join(f"--- {name}\n" + "\n".join((self.folder / f"{name}.log").read_text().splitlines()[-20:])
                         for name in names)


def wait_until(condition, timeout: float, what: str, fleet: Fleet, fail: bool = True) -> None:
    """Poll until `condition()` holds, failing at once if any process stopped; the timeout only bounds
    a failing run (with fail=False it returns, and the caller's checks say what is missing)."""
    deadline = time.monotonic() + timeout
    while not condition():
        fleet.check_alive()
        if time.monotonic() > deadline:
            if not fail:
                return
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n"
                                 + fleet.log_tail(*fleet.processes))
        time.sleep(0.05)


def unrun(fleet: Fleet) -> set[str]:
    enqueued, runs, _ = fleet.records()
    return enqueued.keys() - {key for key, _, _ in runs}


OLD_WORKERS, NEW_WORKERS = ("old-worker-1", "old-worker-2"), ("new-worker-1", "new-worker-2")
PRODUCERS = ("old-producer", "new-producer")


def roll(database_url: str, old_source: Path, folder: Path, order: str, load: Load,
         new_source: Path = NEW_SOURCE) -> Outcome:
    """The whole upgrade: old processes under load, the upgrade in `order`, both side by side, then
    the producers stop, every job they saw enqueued is waited for, and the workers stop."""
    fleet = Fleet(database_url, old_source, folder, load, new_source)
    timeline = []

    def mark(what: str) -> None:
        timeline.append((what, time.time()))

    try:
        mark("start")
        fleet.migrate("old")
        mark("old schema")
        for name in OLD_WORKERS:
            fleet.start("old", "worker", name)
        fleet.wait_started(OLD_WORKERS)
        fleet.start("old", "producer", "old-producer")
        wait_until(lambda: fleet.ran_since(OLD_WORKERS, 0) == set(OLD_WORKERS), 60, "the old workers' first jobs",
                   fleet)
        mark("old workers running")
        time.sleep(load.before)  # old processes alone under load for a while: the soak's length, not a wait
        mark("upgrade begins")
        migrate_output = ""
        if order == MIGRATE_THEN_ROLL:
            migrate_output = fleet.migrate("new")
            mark("migrated")
        for name in NEW_WORKERS:
            fleet.start("new", "worker", name)
        wait_until(lambda: fleet.ran_since(NEW_WORKERS, 0) == set(NEW_WORKERS), 60, "the new workers' first jobs",
                   fleet)
        mark("new workers running")
        migrated = timeline[-1][1]  # the schema is the new one by now: its workers have run jobs
        fleet.start("new", "producer", "new-producer")
        wait_until(lambda: any(key.startswith("new-producer-") for key in fleet.records()[0]), 60,
                   "the new producer's first job", fleet)
        wait_until(lambda: fleet.ran_since(OLD_WORKERS + NEW_WORKERS, migrated) == set(OLD_WORKERS + NEW_WORKERS),
                   60, "every worker, old and new, to run a job on the new schema", fleet)
        mark("all workers ran a job on the new schema")
        time.sleep(load.beside)
        return fleet.finish(PRODUCERS, OLD_WORKERS + NEW_WORKERS, migrate_output, timeline)
    finally:
        fleet.kill_all()
