"""How long a pending job waits beside idle workers (issue 40): across a TRUNCATE of the jobs
tables, an older release's workers and producer writing on the new schema, and a rolling upgrade under
load in both orders. Prints a table: per database and scenario, the jobs, those lost or run twice,
and the p99 and longest wait from a producer seeing a job enqueued to a handler beginning it.

    PYTHONPATH=src .venv/bin/python bench/stalls.py                         # every database, 20 s each
    PYTHONPATH=src .venv/bin/python bench/stalls.py --backend postgres --seconds 60 --rate 100
    PYTHONPATH=src .venv/bin/python bench/stalls.py --old <commit> --new <commit>   # any two releases

Workers have free slots throughout (two per release, 4 slots each, against two producers' `--rate`
jobs a second of a job that takes no time), so a job's wait is the time it sat pending beside idle
workers: a poll at most (`--poll`, 0.2 s unless told) when nothing stalls. The processes are tests/rolling_upgrade.py's,
whose short run is tests/system/test_rolling_upgrade.py; the older release is its OLD_RELEASE unless --old.
Exits 1 if a job was lost or a process stopped.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import connections
import rolling_upgrade
from rolling_upgrade import MIGRATE_THEN_ROLL, NEW_WORKERS_FIRST, Fleet, Load, Outcome, percentile

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
MARIADB_URL = "mariadb://root@127.0.0.1:3306/mysql"  # any database: each run makes its own
BACKENDS = ["sqlite", "postgres", "mariadb"]
TRUNCATE = "after-truncate"
EMPTIED = "emptied-producer"  # whose jobs the scenario deletes: not counted as lost
SCENARIOS = [TRUNCATE, MIGRATE_THEN_ROLL, NEW_WORKERS_FIRST]
# What a test suite's teardown or a "clear the queue" does to the tables, as each database allows it.
CLEAR_THE_QUEUE = {"postgres": ["TRUNCATE leased_jobs, leased_attempts CASCADE"],
                   "sqlite": ["DELETE FROM leased_attempts", "DELETE FROM leased_jobs"],
                   "mariadb": ["DELETE FROM leased_attempts", "DELETE FROM leased_jobs"]}


def after_truncate(url: str, backend: str, folder: Path, load: Load, new_source: Path) -> Outcome:
    """The issue's reproduction: ten jobs pending, the tables emptied behind leased's back, then fresh
    workers and a producer for the soak's length (one release: the new one on both sides)."""
    fleet = Fleet(url, new_source, folder, load, new_source)
    timeline = [("start", time.time())]
    try:
        fleet.migrate("new")
        # Ten jobs pending, enqueued by the release measured (a producer of its own, before any worker).
        fleet.start("new", "producer", EMPTIED)
        rolling_upgrade.wait_until(lambda: len(fleet.records()[0]) >= 10, 60, "ten pending jobs", fleet)
        fleet.stop(EMPTIED)
        connection = connections.connect(url, autocommit=True)
        for statement in CLEAR_THE_QUEUE[backend]:
            connections.execute(connection, statement)
        connection.close()
        timeline.append(("emptied", time.time()))
        workers = rolling_upgrade.NEW_WORKERS
        for name in workers:
            fleet.start("new", "worker", name)
        fleet.wait_started(workers)
        fleet.start("new", "producer", "new-producer")
        rolling_upgrade.wait_until(lambda: fleet.records()[0], 60, "the producer's first job", fleet)
        timeline.append(("producing", time.time()))
        time.sleep(load.before + load.beside)  # the soak's length, not a wait for anything
        outcome = fleet.finish(("new-producer",), workers, "", timeline)
        outcome.enqueued = {key: at for key, at in outcome.enqueued.items() if not key.startswith(f"{EMPTIED}-")}
        return outcome
    finally:
        fleet.kill_all()


def database(backend: str, folder: Path):
    from contextlib import nullcontext

    from leased.testing.plugin import mariadb_database, postgres_schema

    if backend == "sqlite":
        return nullcontext(f"sqlite:///{folder / 'jobs.db'}")
    return postgres_schema(POSTGRES_URL) if backend == "postgres" else mariadb_database(MARIADB_URL)


def measure(backend: str, scenario: str, options: argparse.Namespace, old_source: Path, new_source: Path,
            folder: Path) -> Outcome:
    load = Load(rate=options.rate, concurrency=4, poll_interval=options.poll,
                before=options.seconds / 2, beside=options.seconds / 2)
    with database(backend, folder) as url:
        if scenario == TRUNCATE:
            return after_truncate(url, backend, folder, load, new_source)
        return rolling_upgrade.roll(url, old_source, folder, scenario, load, new_source)


def row(backend: str, scenario: str, outcome: Outcome) -> str:
    waits = outcome.waits
    upgrading = ("-" if scenario == TRUNCATE else
                 f"{max(outcome.waits_between('upgrade begins', 'new workers running'), default=0.0):.2f}")
    beside = ("-" if scenario == TRUNCATE else
              f"{max(outcome.waits_between('new workers running', 'every job ran'), default=0.0):.2f}")
    stopped = [name for name, alive in outcome.alive_before_stop.items() if not alive]
    return (f"| {backend} | {scenario} | {len(outcome.enqueued)} | {len(outcome.lost)} | {len(outcome.run_twice)} "
            f"| {percentile(waits, 0.99):.2f} | {max(waits, default=0.0):.2f} | {upgrading} | {beside} "
            f"| {', '.join(stopped) or 'none'} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", nargs="+", choices=BACKENDS, default=BACKENDS)
    parser.add_argument("--scenario", nargs="+", choices=SCENARIOS, default=SCENARIOS)
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="load per scenario (split before/after the upgrade)")
    parser.add_argument("--rate", type=float, default=50.0, help="jobs a second, each producer")
    parser.add_argument("--poll", type=float, default=0.2, help="the workers' poll interval, seconds")
    parser.add_argument("--old", default=rolling_upgrade.OLD_RELEASE, help="the older release's commit")
    parser.add_argument("--new", default=None, help="the newer release's commit (default: this checkout's src)")
    options = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="leased-stalls-") as scratch:
        old_source = rolling_upgrade.old_release_source(Path(scratch) / "old", options.old)
        new_source = (rolling_upgrade.old_release_source(Path(scratch) / "new", options.new) if options.new
                      else rolling_upgrade.NEW_SOURCE)
        print(f"older release {options.old[:10]}, newer {options.new[:10] if options.new else 'this checkout'}; "
              f"{options.seconds:.0f} s at {options.rate:.0f} jobs/s a producer\n")
        print("| database | scenario | jobs | lost | run twice | p99 wait s | max wait s | max while upgrading s "
              "| max beside s | processes stopped |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for backend in options.backend:
            for scenario in options.scenario:
                folder = Path(scratch) / f"{backend}-{scenario}"
                folder.mkdir()
                try:
                    outcome = measure(backend, scenario, options, old_source, new_source, folder)
                except AssertionError as error:  # a process stopped, or a phase never came
                    print(f"| {backend} | {scenario} | failed: {str(error).splitlines()[0]} |||||||")
                    print(str(error), file=sys.stderr)
                    failed = True
                    continue
                print(row(backend, scenario, outcome), flush=True)
                failed |= bool(outcome.lost) or not all(outcome.alive_before_stop.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
