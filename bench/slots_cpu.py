"""What a job costs the worker's process when many slots wait: CPU and context switches per job.

    python bench/slots_cpu.py                          # 10,000 jobs of 50 ms, 500 slots, SQLite
    python bench/slots_cpu.py --slots 10 --sleep 0     # the same for no-op jobs, for comparison
    python bench/slots_cpu.py --database postgresql://postgres@127.0.0.1:5432/test

Drains N queued jobs that sleep with one worker in this process (`run_until_empty`), and reports
utilisation (ideal time ÷ first start to last end), the process's CPU time per job (user and
system, from getrusage) and its voluntary context switches per job. The same is measured for bare
threads doing nothing but the sleeps (a queue of numbers, one thread per slot), which is the floor
any worker with sync handlers on threads pays. At 10,000 starts a second, a cost of C µs per job
takes C ÷ 100 % of a core. A measurement, not a test: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import collections
import resource
import tempfile
import threading
import time
import uuid
from pathlib import Path

from leased import Leased


def usage() -> resource.struct_rusage:
    return resource.getrusage(resource.RUSAGE_SELF)


def report(label: str, jobs: int, slots: int, sleep: float, starts: list[float], ends: list[float],
           before: resource.struct_rusage, after: resource.struct_rusage) -> None:
    actual = max(ends) - min(starts)
    user = (after.ru_utime - before.ru_utime) / jobs * 1e6
    system = (after.ru_stime - before.ru_stime) / jobs * 1e6
    switches = (after.ru_nvcsw - before.ru_nvcsw) / jobs
    busy = f"{jobs * sleep / slots / actual:.2f}" if sleep else "-"
    print(f"{label:14} {jobs / actual:>9,.0f} {busy:>6} {user + system:>8.0f} {user:>6.0f} {system:>6.0f} {switches:>9.1f}")


def bare_threads(jobs: int, slots: int, sleep: float) -> None:
    waiting = collections.deque(range(jobs))
    lock = threading.Lock()
    starts: list[float] = []
    ends: list[float] = []
    ready = threading.Barrier(slots + 1)
    go = threading.Event()

    def serve() -> None:
        ready.wait()
        go.wait()
        while True:
            with lock:
                if not waiting:
                    return
                waiting.popleft()
            starts.append(time.monotonic())
            time.sleep(sleep)
            ends.append(time.monotonic())

    threads = [threading.Thread(target=serve) for _ in range(slots)]
    for thread in threads:
        thread.start()
    ready.wait()
    before = usage()
    go.set()
    for thread in threads:
        thread.join()
    report("bare threads", jobs, slots, sleep, starts, ends, before, usage())


def leased_worker(url: str, jobs: int, slots: int, sleep: float) -> None:
    starts: list[float] = []
    ends: list[float] = []
    app = Leased(url)

    @app.task(name="bench.nap")
    def nap(n: int, seconds: float) -> None:
        starts.append(time.monotonic())
        if seconds:
            time.sleep(seconds)
        ends.append(time.monotonic())

    for first in range(0, jobs, 1_000):
        nap.enqueue_many([(n, sleep) for n in range(first, min(jobs, first + 1_000))])
    before = usage()
    stats = app.run_until_empty(concurrency=slots)
    after = usage()
    app.close()
    assert stats.done == jobs, stats
    report("leased worker", jobs, slots, sleep, starts, ends, before, after)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=500)
    parser.add_argument("--sleep", type=float, default=0.050, help="seconds each job sleeps (0: no-op jobs)")
    parser.add_argument("--database", help="a PostgreSQL or MariaDB URL (a schema or database of its own is "
                        "not made: use a scratch one); default: a temporary SQLite file")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print(f"{options.jobs:,} jobs, {options.slots} slots, each sleeps {options.sleep * 1000:.0f} ms")
    print(f"{'':14} {'jobs/s':>9} {'busy':>6} {'CPU µs':>8} {'user':>6} {'sys':>6} {'switches':>9}  (per job)")
    for _ in range(options.repeats):
        bare_threads(options.jobs, options.slots, options.sleep)
        if options.database:
            leased_worker(options.database, options.jobs, options.slots, options.sleep)
        else:
            with tempfile.TemporaryDirectory() as folder:
                leased_worker(f"sqlite:///{Path(folder) / f'{uuid.uuid4().hex}.db'}", options.jobs, options.slots,
                              options.sleep)


if __name__ == "__main__":
    main()
