"""Where a worker's time goes while it drains: CPU of the worker and of the database, and a py-spy profile.

    bench/.venv/bin/python bench/profile.py leased-pg          # or any name from run.py --only
    bench/.venv/bin/python bench/profile.py leased-pg --jobs 20000 --seconds 8 --idle

Queues the jobs in bulk, starts one worker process (concurrency 10), samples it with
`py-spy record` while it drains, and prints: jobs/s, CPU seconds per 1,000 jobs in the worker and
in PostgreSQL's backends, and the functions with the most samples (self and inclusive). The
flame graph goes to bench/work/profile-NAME.svg.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import WORK, pg_url, venv_bin
from peers import all_peers
from peers.base import Unsupported

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def postgres_backends(database: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"postgres: .* {database} "], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def summarise(raw: Path, top: int) -> None:
    """py-spy's raw format: one collapsed stack per line, `frame;frame;... count`."""
    own, inclusive = collections.Counter(), collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        count = int(count)
        total += count
        frames = [frame.split(" (")[0] + " (" + frame.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  if " (" in frame else frame for frame in stack.split(";")]
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    print(f"\n{total} samples. Most self time:")
    for frame, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    print("Most inclusive time:")
    for frame, count in inclusive.most_common(top + 10):
        print(f"  {100 * count / total:5.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("peer")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=8.0, help="how long py-spy samples")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--idle", action="store_true", help="sample waiting threads too (wall-clock view)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--analyze", action="store_true",
                        help="PostgreSQL: ANALYZE the database after queueing, so the planner has statistics")
    options = parser.parse_args()
    peer = next(p for p in all_peers() if p.name == options.peer)
    peer.setup()
    try:
        numbers = list(range(options.jobs))
        try:
            peer.enqueue_bulk("noop", numbers)
        except Unsupported:
            peer.enqueue_one("noop", numbers)
        if options.analyze and getattr(peer, "database", None):
            import psycopg

            with psycopg.connect(pg_url(peer.database), autocommit=True) as connection:
                connection.execute("ANALYZE")
        workers = peer.start_workers(1, options.concurrency, tag="profile")
        try:
            pid = workers.processes[0].pid
            while peer.count_done() == 0:
                time.sleep(0.05)
            database = getattr(peer, "database", None)
            backends = postgres_backends(database) if database else []
            done0, worker0, db0, t0 = peer.count_done(), cpu_seconds([pid]), cpu_seconds(backends), time.monotonic()
            raw = WORK / f"profile-{peer.name}.txt"
            svg = WORK / f"profile-{peer.name}.svg"
            spy = [venv_bin("py-spy"), "record", "--pid", str(pid), "--duration", str(int(options.seconds)),
                   "--rate", "200", "--nonblocking"] + (["--idle"] if options.idle else [])
            subprocess.run(spy + ["--format", "raw", "--output", str(raw)], check=True, capture_output=True)
            done1, worker1, db1, t1 = peer.count_done(), cpu_seconds([pid]), cpu_seconds(backends), time.monotonic()
            jobs = done1 - done0
            print(f"{peer.label}: {jobs} jobs in {t1 - t0:.1f} s = {jobs / (t1 - t0):,.0f} jobs/s while sampled")
            if jobs:
                print(f"CPU per 1,000 jobs: worker {1000 * (worker1 - worker0) / jobs:.2f} s, "
                      f"database backends {1000 * (db1 - db0) / jobs:.2f} s "
                      f"(worker busy {100 * (worker1 - worker0) / (t1 - t0):.0f}% of one core)")
            summarise(raw, options.top)
            subprocess.run([venv_bin("py-spy"), "record", "--pid", str(pid), "--duration", "3", "--rate", "200",
                            "--nonblocking", "--format", "flamegraph", "--output", str(svg)], capture_output=True)
            print(f"flame graph: {svg}")
        finally:
            workers.stop()
    finally:
        peer.teardown()


if __name__ == "__main__":
    main()
