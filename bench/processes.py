"""CPU-bound jobs: `leased worker --processes 2` against `--processes 1`, side by side.

    python bench/processes.py                      # 400 jobs of 20 ms pure-Python work, SQLite, 3 rounds
    python bench/processes.py --jobs 800 --rounds 5 --concurrency 4
    python bench/processes.py --database postgresql://postgres@127.0.0.1:5432/test

Each job burns about 20 ms of one core in a pure-Python loop (the loop count is calibrated here
first, on this machine), so its threads in one process take turns on one interpreter lock. N jobs
are enqueued in bulk, then drained by a real `leased worker APP --processes P` (the same
--concurrency per process), P = 1 and 2 interleaved in every round so that both see the same
machine. A job returns its own start and end (time.time()); the rate is N ÷ (last end − first
start), so worker start-up is left out. Beside each round, the "bare ratio" runs the same burn()
jobs in plain Python processes without leased, two against one: what the machine gave a second
process at that moment, the ceiling for leased's ratio; "cores" is the handlers' CPU time (each one's
time.thread_time()) over that span: at most 1 for one process. The load average beside each figure says how busy the
machine was: on a shared machine read the ratios, not the rates. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from leased import Leased

BURN_SOURCE = '''
def burn(loops):
    total = 0
    for number in range(loops):
        total += number * number % 7
    return total
'''

APP_SOURCE = '''
import os, time
from leased import Leased

app = Leased(os.environ["BENCH_DATABASE_URL"])
''' + BURN_SOURCE + '''

@app.task(name="bench.burn", max_attempts=1)
def burn_job(loops):
    started, cpu = time.time(), time.thread_time()
    burn(loops)
    return [started, time.time(), time.thread_time() - cpu, os.getpid()]
'''


def calibrate(milliseconds: float) -> int:
    """Loops of the job's burn() that take `milliseconds` of one core here: this thread's CPU time (the
    least of a few tries), which other work on a shared machine does not stretch as it does the wall clock."""
    namespace: dict = {}
    exec(BURN_SOURCE, namespace)
    loops, best = 100_000, float("inf")
    for _ in range(5):
        started = time.thread_time()
        namespace["burn"](loops)
        best = min(best, time.thread_time() - started)
    return int(loops * milliseconds / 1000 / best)


def fresh_url(base: str | None, directory: Path) -> tuple[str, object]:
    """A database of its own for one measurement, and how to drop it."""
    if base is None:
        path = directory / f"bench-{uuid.uuid4().hex[:8]}.db"
        return f"sqlite:///{path}", lambda: [Path(f"{path}{tail}").unlink(missing_ok=True)
                                             for tail in ("", "-wal", "-shm")]
    from leased.testing.plugin import postgres_schema

    context = postgres_schema(base)
    return context.__enter__(), lambda: context.__exit__(None, None, None)


def measure(processes: int, args: argparse.Namespace, loops: int, directory: Path) -> tuple[float, float, float, str]:
    """Jobs per second of one drain, the cores its handlers used (their CPU time ÷ the drain's wall
    time), the 1-minute load average just before it, and how many jobs each process ran."""
    url, drop = fresh_url(args.database, directory)
    try:
        app = Leased(url)
        task = app.task(name="bench.burn", max_attempts=1)(lambda loops: None)
        for start in range(0, args.jobs, 1000):
            task.enqueue_many([[loops]] * min(1000, args.jobs - start))
        load = os.getloadavg()[0]
        env = {**os.environ, "BENCH_DATABASE_URL": url,
               "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT / "src")])}
        worker = subprocess.Popen([sys.executable, "-m", "leased", "worker", "bench_cpu_app:app", "--processes",
                                   str(processes), "--concurrency", str(args.concurrency), "--poll-interval", "50ms",
                                   "--log-level", "warning"], cwd=directory, env=env)
        try:
            deadline = time.monotonic() + args.timeout
            while app.counts().get("default", {}).get("done", 0) < args.jobs:
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"--processes {processes}: the drain did not finish")
                time.sleep(0.1)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
        spans = [job.result for job in app.list_jobs(status="done", limit=10_000)]
        app.close()
        wall = max(end for _, end, _, _ in spans) - min(start for start, _, _, _ in spans)
        split = "/".join(str(count) for _, count in collections.Counter(pid for *_, pid in spans).most_common())
        return args.jobs / wall, sum(cpu for _, _, cpu, _ in spans) / wall, load, split
    finally:
        drop()


def bare(processes: int, jobs: int, loops: int) -> float:
    """The machine's own answer, without leased: jobs per second of `processes` plain Python processes
    running burn(loops) jobs ÷ processes times each, from the first one's start to the last one's end."""
    script = BURN_SOURCE + ("import sys, time\nstarted = time.time()\nfor _ in range(int(sys.argv[1])): "
                            "burn(int(sys.argv[2]))\nprint(started, time.time())\n")
    running = [subprocess.Popen([sys.executable, "-c", script, str(jobs // processes), str(loops)],
                                stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    spans = [tuple(map(float, process.communicate()[0].split())) for process in running]
    return jobs // processes * processes / (max(end for _, end in spans) - min(start for start, _ in spans))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--milliseconds", type=float, default=20.0, help="CPU time per job")
    parser.add_argument("--concurrency", type=int, default=4, help="slots per process")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", help="PostgreSQL URL (a schema per drain); default: a SQLite file each")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    if args.jobs > 10_000:
        parser.error("--jobs: at most 10,000 (the results are read in one page)")
    loops = calibrate(args.milliseconds)
    cores = len(os.sched_getaffinity(0))
    print(f"{args.jobs} jobs of {args.milliseconds:g} ms ({loops:,} loops), --concurrency {args.concurrency} per "
          f"process, {'PostgreSQL' if args.database else 'SQLite'}, {cores} cores, Python "
          f"{sys.version.split()[0]}")
    print(f"{'round':>5} {'1 process jobs/s':>17} {'cores':>5} {'load':>5} {'2 processes jobs/s':>19} {'cores':>5} "
          f"{'load':>5} {'ratio':>6}  {'bare ratio':>10}  jobs per process")
    ratios, bare_ratios, rates = [], [], {1: [], 2: []}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        (directory / "bench_cpu_app.py").write_text(APP_SOURCE)
        for number in range(1, args.rounds + 1):
            one, cores_one, load_one, _ = measure(1, args, loops, directory)
            two, cores_two, load_two, split = measure(2, args, loops, directory)
            bare_ratios.append(bare(2, args.jobs, loops) / bare(1, args.jobs, loops))
            rates[1].append(one)
            rates[2].append(two)
            ratios.append(two / one)
            print(f"{number:>5} {one:>17.1f} {cores_one:>5.2f} {load_one:>5.2f} {two:>19.1f} {cores_two:>5.2f} "
                  f"{load_two:>5.2f} {two / one:>5.2f}x  {bare_ratios[-1]:>9.2f}x  {split}")
    print(f"median: 1 process {statistics.median(rates[1]):.1f}/s, 2 processes {statistics.median(rates[2]):.1f}/s, "
          f"ratio {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f}); the same jobs in bare "
          f"processes without leased, 2 against 1: {statistics.median(bare_ratios):.2f}x "
          f"(range {min(bare_ratios):.2f}-{max(bare_ratios):.2f})")


if __name__ == "__main__":
    main()
