"""What a job costs the worker's process when many slots wait: CPU and context switches per job.

    python bench/slots_cpu.py                          # 10,000 jobs of 50 ms, 500 slots, SQLite
    python bench/slots_cpu.py --handlers async         # the same with an async handler
    python bench/slots_cpu.py --slots 10 --sleep 0     # the same for no-op jobs, for comparison
    python bench/slots_cpu.py --database postgresql://postgres@127.0.0.1:5432/test

Drains N queued jobs that sleep with one worker in this process (`run_until_empty`), and reports
utilisation (ideal time ÷ first start to last end), the process's CPU time per job (user and
system, from getrusage) and its voluntary context switches per job. The same is measured for bare
threads doing nothing but the sleeps (a queue of numbers, one thread per slot), which is the floor
any worker with sync handlers on threads pays (for async handlers: bare asyncio tasks, one per
slot). At 10,000 starts a second, a cost of C µs per job takes C ÷ 100 % of a core.

Where the idle time lies: "wave ms" is how long the first wave took to start (the first to the
slots-th start), "middle busy" the utilisation over the run less two sleeps at each end (the
steady state, without the ramp up and the tail), and "handoff" the time a thread took from one
job's end to its next job's start (median / 90th percentile; sync handlers only).
A measurement, not a test: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import resource
import tempfile
import threading
import time
import uuid
from itertools import pairwise
from pathlib import Path

from leased import Leased


def usage() -> resource.struct_rusage:
    return resource.getrusage(resource.RUSAGE_SELF)


def report(label: str, jobs: int, slots: int, sleep: float, runs: list[tuple[int, float, float]],
           before: resource.struct_rusage, after: resource.struct_rusage) -> None:
    """`runs`: (thread, start, end) of each job."""
    first, last = min(start for _, start, _ in runs), max(end for _, _, end in runs)
    actual = last - first
    user = (after.ru_utime - before.ru_utime) / jobs * 1e6
    system = (after.ru_stime - before.ru_stime) / jobs * 1e6
    switches = (after.ru_nvcsw - before.ru_nvcsw) / jobs
    busy = f"{jobs * sleep / slots / actual:.2f}" if sleep else "-"
    print(f"{label:14} {jobs / actual:>9,.0f} {busy:>6} {user + system:>8.0f} {user:>6.0f} {system:>6.0f} "
          f"{switches:>9.1f}{where_time_went(runs, slots, sleep, first, last) if sleep else ''}")


def where_time_went(runs: list[tuple[int, float, float]], slots: int, sleep: float, first: float, last: float) -> str:
    """Where the slots' idle time lies: the first wave's starts spread over how long, how busy the
    slots were in the middle (the run less a wave at each end), and how long a thread took from one
    job's end to its next job's start (median and 90th percentile)."""
    starts = sorted(start for _, start, _ in runs)
    spread = starts[min(slots, len(starts)) - 1] - starts[0]
    low, high = first + 2 * sleep, last - 2 * sleep
    held = sum(max(0.0, min(end, high) - max(start, low)) for _, start, end in runs)
    middle = f"{held / slots / (high - low):.2f}" if high > low else "-"
    by_thread: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    for thread, start, end in runs:
        by_thread[thread].append((start, end))
    gaps = sorted(following[0] - previous[1] for spans in map(sorted, by_thread.values())
                  for previous, following in pairwise(spans))
    handoff = (f"{gaps[len(gaps) // 2] * 1000:.2f}/{gaps[len(gaps) * 9 // 10] * 1000:.1f}" if gaps else "-")
    return f"   {spread * 1000:>7.1f} {middle:>6} {handoff:>10}"


def bare_threads(jobs: int, slots: int, sleep: float) -> None:
    waiting = collections.deque(range(jobs))
    lock = threading.Lock()
    runs: list[tuple[int, float, float]] = []
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
            start = time.monotonic()
            time.sleep(sleep)
            runs.append((threading.get_ident(), start, time.monotonic()))

    threads = [threading.Thread(target=serve) for _ in range(slots)]
    for thread in threads:
        thread.start()
    ready.wait()
    before = usage()
    go.set()
    for thread in threads:
        thread.join()
    report("bare threads", jobs, slots, sleep, runs, before, usage())


def bare_tasks(jobs: int, slots: int, sleep: float) -> None:
    """The floor for async handlers: one event loop, one task per slot doing nothing but the sleeps."""
    waiting = collections.deque(range(jobs))
    runs: list[tuple[int, float, float]] = []

    async def serve(slot: int) -> None:
        while waiting:
            waiting.popleft()
            start = time.monotonic()
            await asyncio.sleep(sleep)
            runs.append((slot, start, time.monotonic()))

    async def all_slots() -> None:
        await asyncio.gather(*(serve(slot) for slot in range(slots)))

    before = usage()
    asyncio.run(all_slots())
    report("bare tasks", jobs, slots, sleep, runs, before, usage())


def leased_worker(url: str, jobs: int, slots: int, sleep: float, handlers: str) -> None:
    runs: list[tuple[int, float, float]] = []
    app = Leased(url)

    if handlers == "sync":
        @app.task(name="bench.nap")
        def nap(n: int, seconds: float) -> None:
            start = time.monotonic()
            if seconds:
                time.sleep(seconds)
            runs.append((threading.get_ident(), start, time.monotonic()))
    else:  # each job is a task of its own: no slot to follow from one job to the next
        @app.task(name="bench.nap")
        async def nap(n: int, seconds: float) -> None:
            start = time.monotonic()
            if seconds:
                await asyncio.sleep(seconds)
            runs.append((n, start, time.monotonic()))

    for first in range(0, jobs, 1_000):
        nap.enqueue_many([(n, sleep) for n in range(first, min(jobs, first + 1_000))])
    before = usage()
    stats = app.run_until_empty(concurrency=slots)
    after = usage()
    app.close()
    assert stats.done == jobs, stats
    report(f"leased, {handlers}", jobs, slots, sleep, runs, before, after)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=500)
    parser.add_argument("--sleep", type=float, default=0.050, help="seconds each job sleeps (0: no-op jobs)")
    parser.add_argument("--database", help="a PostgreSQL or MariaDB URL (a schema or database of its own is "
                        "not made: use a scratch one); default: a temporary SQLite file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--handlers", choices=["sync", "async"], default="sync",
                        help="leased's handlers: sync functions on threads (beside bare threads), or async "
                        "functions on the worker's loop (beside bare asyncio tasks)")
    options = parser.parse_args()
    print(f"{options.jobs:,} jobs, {options.slots} slots, each sleeps {options.sleep * 1000:.0f} ms")
    print(f"{'':14} {'jobs/s':>9} {'busy':>6} {'CPU µs':>8} {'user':>6} {'sys':>6} {'switches':>9}"
          + (f"   {'wave ms':>7} {'middle':>6} {'handoff ms':>10}" if options.sleep else ""))
    print(f"{'':14} {'':>9} {'':>6} {'(per job)':>33}"
          + (f"   {'':>7} {'busy':>6} {'p50/p90':>10}" if options.sleep else ""))
    for _ in range(options.repeats):
        (bare_threads if options.handlers == "sync" else bare_tasks)(options.jobs, options.slots, options.sleep)
        if options.database:
            leased_worker(options.database, options.jobs, options.slots, options.sleep, options.handlers)
        else:
            with tempfile.TemporaryDirectory() as folder:
                leased_worker(f"sqlite:///{Path(folder) / f'{uuid.uuid4().hex}.db'}", options.jobs, options.slots,
                              options.sleep, options.handlers)


if __name__ == "__main__":
    main()
