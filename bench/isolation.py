"""Process isolation (@app.task(isolation="process")) against threads and Celery's prefork pool.

    python bench/isolation.py                    # 200 CPU-bound jobs of ~20 ms and 2,000 no-op jobs, 3 rounds
    python bench/isolation.py --cpu-jobs 400 --noop-jobs 5000 --rounds 5
    python bench/isolation.py --no-celery        # leased alone (no Redis needed)

Two workloads, each drained by real worker processes with 2 slots in all (the machine's 2 cores):
- CPU-bound: each job burns about 20 ms of one core in a pure-Python loop (calibrated here first).
  On threads (one `leased worker --concurrency 2`) the two slots take turns on one interpreter
  lock; isolated, each runs in a child of its own, as Celery's prefork pool (`celery worker --pool
  prefork -c 2`, Redis broker) does; `leased worker --processes 2 --concurrency 1` runs two worker
  processes on threads.
- No-op: the cost per job of crossing to a child and back, isolated against threads.
Each job returns its own start and end; a rate is jobs ÷ (last end − first start), so start-up
(the children's spawn, Celery's boot) is left out. The variants alternate within every round, so
that all see the same machine; the medians and the ratios are what to read. Runs in bench's own
virtualenv (celery from bench/requirements.txt). A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "src"))

import bench_venv

WORKER_APP = '''
import os
from leased import Leased
import isolation_tasks

app = Leased(os.environ["LEASED_DATABASE_URL"])
isolation = os.environ["BENCH_ISOLATION"]
app.task(name="cpu", isolation=isolation)(isolation_tasks.cpu)
app.task(name="noop", isolation=isolation)(isolation_tasks.noop)
'''


def calibrate(target_seconds: float = 0.020) -> int:
    import isolation_tasks

    loops = 50_000
    while True:
        began = time.perf_counter()
        isolation_tasks.burn(loops)
        took = time.perf_counter() - began
        if took > 0.05:
            return max(1, int(loops * target_seconds / took))
        loops *= 2


def leased_drain(kind: str, jobs: int, isolation: str, loops: int, slots: int = 2, processes: int = 1) -> float:
    """jobs/s of `leased worker --processes P` with `slots` slots in all, tasks on `isolation`."""
    from leased import Leased

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/jobs.db"
        (Path(folder) / "bench_isolation_app.py").write_text(WORKER_APP)
        app = Leased(url)
        task = app.task(name=kind)(lambda n: n)
        enqueued = task.enqueue_many([(n,) for n in range(jobs)])
        env = {**os.environ, "LEASED_DATABASE_URL": url, "BENCH_ISOLATION": isolation, "BENCH_BURN_LOOPS": str(loops),
               "PYTHONPATH": os.pathsep.join([folder, str(BENCH), str(BENCH.parent / "src")])}
        worker = subprocess.Popen([sys.executable, "-m", "leased.cli.main", "worker", "bench_isolation_app:app",
                                   "--concurrency", str(slots // processes), "--processes", str(processes),
                                   "--poll-interval", "50ms", "--log-level", "warning"],
                                  env=env, cwd=folder)
        try:
            deadline = time.monotonic() + 600
            while app.count_jobs(status="done", task_name=kind) < jobs:
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the worker stopped or took too long (exit {worker.returncode})")
                time.sleep(0.1)
        finally:
            worker.terminate()
            worker.wait(60)
        spans = [app.get_job(job.id).result for job in enqueued]
        app.close()
    return jobs / (max(end for _, end in spans) - min(start for start, _ in spans))


def celery_drain(jobs: int, loops: int, slots: int = 2) -> float:
    """jobs/s of `celery worker --pool prefork -c slots` on the same CPU-bound job."""
    from redis import Redis

    import isolation_tasks

    broker, backend = Redis(db=13), Redis(db=14)
    broker.flushdb()
    backend.flushdb()
    env = {**os.environ, "BENCH_BURN_LOOPS": str(loops), "PYTHONPATH": str(BENCH)}
    worker = subprocess.Popen([str(Path(sys.executable).parent / "celery"), "-A", "isolation_tasks:celery_app",
                               "worker", "--pool", "prefork", "-c", str(slots), "--without-gossip",
                               "--without-mingle", "--without-heartbeat", "--loglevel", "WARNING"],
                              env=env, cwd=BENCH)
    try:
        results = [isolation_tasks.celery_cpu.delay(n) for n in range(jobs)]
        spans = [result.get(timeout=600) for result in results]
    finally:
        worker.terminate()
        worker.wait(60)
        broker.flushdb()
        backend.flushdb()
    return jobs / (max(end for _, end in spans) - min(start for start, _ in spans))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-jobs", type=int, default=200)
    parser.add_argument("--noop-jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-celery", action="store_true", help="leased alone: no Redis, no bench venv")
    options = parser.parse_args()
    if not options.no_celery and not bench_venv.inside(bench_venv.VENV):
        bench_venv.bootstrap(bench_venv.VENV, BENCH / "requirements.txt", bench_venv.EXTRAS, Path(__file__))
    loops = calibrate()
    print(f"calibrated: {loops} loops ≈ 20 ms of one core; load average {os.getloadavg()[0]:.2f}", flush=True)
    figures: dict[str, list[float]] = {}
    for round_number in range(options.rounds):
        for name, run in [("cpu threads", lambda: leased_drain("cpu", options.cpu_jobs, "thread", loops)),
                          ("cpu isolated", lambda: leased_drain("cpu", options.cpu_jobs, "process", loops)),
                          ("cpu --processes 2", lambda: leased_drain("cpu", options.cpu_jobs, "thread", loops,
                                                                     processes=2)),
                          *([] if options.no_celery else [("cpu celery prefork", lambda: celery_drain(
                              options.cpu_jobs, loops))]),
                          ("noop threads", lambda: leased_drain("noop", options.noop_jobs, "thread", loops)),
                          ("noop isolated", lambda: leased_drain("noop", options.noop_jobs, "process", loops))]:
            figures.setdefault(name, []).append(run())
            print(f"round {round_number + 1}: {name}: {figures[name][-1]:,.0f} jobs/s "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    median = {name: statistics.median(values) for name, values in figures.items()}
    print(f"\nmedians of {options.rounds} rounds, 2 slots, SQLite:")
    for name, value in median.items():
        print(f"  {name:20} {value:10,.1f} jobs/s")
    print(f"CPU-bound, isolated ÷ threads: {median['cpu isolated'] / median['cpu threads']:.2f}x")
    print(f"CPU-bound, --processes 2 ÷ --processes 1: {median['cpu --processes 2'] / median['cpu threads']:.2f}x "
          "(the issue's target: 1.7x)")
    if "cpu celery prefork" in median:
        celery = median["cpu celery prefork"]
        print(f"CPU-bound, ÷ Celery prefork -c 2: leased isolated {median['cpu isolated'] / celery:.2f}x, "
              f"leased --processes 2 {median['cpu --processes 2'] / celery:.2f}x")
    cost = 1 / median["noop isolated"] - 1 / median["noop threads"]
    print(f"no-op, isolated ÷ threads: {median['noop isolated'] / median['noop threads']:.2f}x "
          f"({cost * 1e6:,.0f} µs more of the worker's time per job)")


if __name__ == "__main__":
    main()
