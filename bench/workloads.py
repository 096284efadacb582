"""The workloads. Each takes an adapter and returns plain numbers (or raises Failed / Unsupported).

Every step is bounded in time: a peer that hangs or fails is reported with the reason and the
suite goes on.
"""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass

from common import Failed, ProbeReceiver, Workers, percentile, wait_for_done
from peers.base import Peer, Unsupported


@dataclass
class Limits:
    jobs: int = 20_000
    enqueue_seconds: float = 60.0  # an enqueue loop stops here and reports what it did
    drain_seconds: float = 60.0     # a drain stops here and reports its rate so far
    concurrency: int = 10
    latency_jobs: int = 200
    latency_gap: float = 0.020
    sleep_jobs: int = 2_000
    sleep_seconds: float = 0.050
    steady_sleep_jobs: int = 20_000  # 500 slots at 10,000 starts a second for 2 s, after the first wave
    crash_jobs: int = 100
    crash_nap: float = 2.0
    crash_wait: float = 60.0


@contextmanager
def deadline(seconds: float, what: str):
    """Raise Failed in the main thread if a step (a library call that hangs) takes too long."""
    def expired(signum, frame):
        raise Failed(f"{what}: no answer within {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _enqueue_timed(enqueue, numbers: list[int], limit: float) -> tuple[int, float, bool]:
    """Enqueue in slices of 1,000 until done or past the limit: (jobs, seconds, cut short)."""
    started = time.perf_counter()
    done = 0
    with deadline(limit + 60, "enqueue"):
        for start in range(0, len(numbers), 1_000):
            enqueue(numbers[start:start + 1_000])
            done = min(start + 1_000, len(numbers))
            if time.perf_counter() - started > limit and done < len(numbers):
                return done, time.perf_counter() - started, True
    return done, time.perf_counter() - started, False


def drain(peer: Peer, processes: int, queued: int, limits: Limits, tag: str) -> dict:
    concurrency = 1 if peer.one_job_per_process else limits.concurrency
    workers = peer.start_workers(processes, concurrency, tag=tag)
    try:
        with deadline(limits.drain_seconds + 60, "drain"):
            drained = wait_for_done(peer.count_done, queued, limits.drain_seconds, workers)
    finally:
        workers.stop()
    if drained.done == 0:
        raise Failed(f"no job finished within {limits.drain_seconds:.0f} s")
    return {"rate": drained.rate, "jobs": drained.done, "seconds": drained.seconds, "partial": drained.timed_out}


def throughput(peer: Peer, limits: Limits, bulk: bool) -> dict[str, dict]:
    """One repeat of workloads 1 and 2 on a fresh store: enqueue N jobs one at a time (or in bulk),
    then drain them with one worker process (or, after bulk, with two)."""
    out: dict[str, dict] = {}
    numbers = list(range(limits.jobs))
    with deadline(120, "setup"):
        peer.setup()
    try:
        enqueue_key, drain_key, processes = ("enqueue_bulk", "drain_2p", 2) if bulk else ("enqueue_one", "drain_1p", 1)
        try:
            if bulk:
                jobs, seconds, cut = _enqueue_timed(lambda ns: peer.enqueue_bulk("noop", ns), numbers,
                                                    limits.enqueue_seconds)
            else:
                jobs, seconds, cut = _enqueue_timed(lambda ns: peer.enqueue_one("noop", ns), numbers,
                                                    limits.enqueue_seconds)
            out[enqueue_key] = {"rate": jobs / seconds, "jobs": jobs, "seconds": seconds, "partial": cut}
        except Unsupported as reason:
            out[enqueue_key] = {"unsupported": str(reason)}
            # Still drain: queue the jobs one at a time, untimed.
            jobs, _, _ = _enqueue_timed(lambda ns: peer.enqueue_one("noop", ns), numbers, limits.enqueue_seconds)
        except Failed as error:
            out[enqueue_key] = {"error": str(error)}
            return out
        try:
            out[drain_key] = drain(peer, processes, jobs, limits, drain_key)
        except Failed as error:
            out[drain_key] = {"error": str(error)}
    finally:
        with deadline(120, "teardown"):
            peer.teardown()
    return out


def latency(peer: Peer, limits: Limits) -> dict:
    """Workload 3 on a fresh store (see latency_on)."""
    with deadline(120, "setup"):
        peer.setup()
    try:
        return latency_on(peer, limits)
    finally:
        with deadline(120, "teardown"):
            peer.teardown()


def latency_on(peer: Peer, limits: Limits) -> dict:
    """Probes enqueued `latency_gap` apart into an idle worker, on the store as `peer` has set it
    up; from the enqueue call to the handler's start."""
    receiver = ProbeReceiver()
    workers: Workers | None = None
    try:
        concurrency = 1 if peer.one_job_per_process else limits.concurrency
        workers = peer.start_workers(1, concurrency, env={"BENCH_PROBE_PORT": str(receiver.port)}, tag="latency")
        with deadline(90, "warm-up"):
            peer.enqueue_one("probe", [-1])
            receiver.collect({-1}, 60)
        if -1 not in receiver.started:
            workers.check_alive()
            raise Failed("the warm-up job did not start within 60 s")
        time.sleep(1.0)  # idle
        enqueued: dict[int, float] = {}
        next_at = time.monotonic()
        with deadline(limits.latency_jobs * limits.latency_gap + 120, "latency enqueue"):
            for n in range(limits.latency_jobs):
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                enqueued[n] = time.monotonic()
                peer.enqueue_one("probe", [n])
                next_at += limits.latency_gap
            receiver.collect(set(enqueued), 30)
            wait_for_done(peer.count_done, limits.latency_jobs + 1, 15, workers)
            in_store = peer.count_done()
        latencies = [(receiver.started[n] - at) * 1000 for n, at in enqueued.items() if n in receiver.started]
        if not latencies:
            raise Failed("no probe started")
        return {"p50": percentile(latencies, 0.50), "p95": percentile(latencies, 0.95),
                "p99": percentile(latencies, 0.99), "max": max(latencies), "started": len(latencies),
                "jobs": limits.latency_jobs, "done_in_store": in_store}
    finally:
        if workers is not None:
            workers.stop()
        receiver.close()


def slots(peer: Peer, limits: Limits, slot_count: int, processes: int = 1, jobs: int | None = None) -> dict:
    """Workload 4: `jobs` (default limits.sleep_jobs) jobs that sleep, `slot_count` at once across
    `processes` worker processes (the slots split evenly); ideal time / actual, actual from the
    first job's start to the last one's end (reported by the jobs themselves)."""
    jobs = jobs or limits.sleep_jobs
    if peer.one_job_per_process:
        raise Unsupported(f"one job per worker process: {slot_count} slots would be {slot_count} processes")
    receiver = ProbeReceiver()
    with deadline(120, "setup"):
        peer.setup()
    workers: Workers | None = None
    try:
        numbers = list(range(jobs))
        with deadline(limits.enqueue_seconds + 60, "enqueue"):
            try:
                peer.enqueue_bulk("nap", numbers, limits.sleep_seconds)
            except Unsupported:
                peer.enqueue_one("nap", numbers, limits.sleep_seconds)
        workers = peer.start_workers(processes, slot_count // processes,
                                     env={"BENCH_PROBE_PORT": str(receiver.port), "BENCH_REPORT_END": "1"},
                                     tag=f"slots{slot_count}x{processes}")
        ends = {-(n + 1) for n in numbers}
        with deadline(limits.drain_seconds + 60, "slots"):
            receiver.collect(set(numbers) | ends, limits.drain_seconds)
            wait_for_done(peer.count_done, jobs, 15, workers)
            in_store = peer.count_done()
        starts = [at for n, at in receiver.started.items() if n >= 0]
        finished = [at for n, at in receiver.started.items() if n < 0]
        if len(finished) < len(numbers):
            raise Failed(f"only {len(finished)} of {len(numbers)} jobs ended within {limits.drain_seconds:.0f} s")
        actual = max(finished) - min(starts)
        ideal = jobs * limits.sleep_seconds / slot_count
        return {"utilisation": ideal / actual, "seconds": actual, "ideal": ideal,
                "done_in_store": in_store}
    finally:
        if workers is not None:
            workers.stop()
        receiver.close()
        with deadline(120, "teardown"):
            peer.teardown()


def crash(peer: Peer, limits: Limits) -> dict:
    """Workload 5: SIGKILL a worker holding `crash_jobs` running jobs; a second worker is started at
    once; time from the kill until the store counts every job done."""
    if peer.one_job_per_process:
        raise Unsupported("one job per worker process: no worker holds 100 running jobs")
    receiver = ProbeReceiver()
    with deadline(120, "setup"):
        peer.setup()
    first: Workers | None = None
    second: Workers | None = None
    try:
        extra = peer.crash_settings()
        numbers = list(range(limits.crash_jobs))
        env = {"BENCH_PROBE_PORT": str(receiver.port), **extra}
        first = peer.start_workers(1, limits.crash_jobs, env=env, tag="crash-a")
        with deadline(limits.enqueue_seconds + 60, "enqueue"):
            try:
                peer.enqueue_bulk("nap", numbers, limits.crash_nap)
            except Unsupported:
                peer.enqueue_one("nap", numbers, limits.crash_nap)
        with deadline(120, "first start"):
            receiver.collect(set(numbers), 60)
        running = sum(1 for n in numbers if n in receiver.started)
        if running < len(numbers):
            raise Failed(f"only {running} of {len(numbers)} jobs started on the first worker")
        first.kill()
        killed_at = time.monotonic()
        done_before = peer.count_done()
        second = peer.start_workers(1, limits.crash_jobs, env=env, tag="crash-b")
        with deadline(limits.crash_wait + 60, "recovery"):
            while peer.count_done() < len(numbers):
                if time.monotonic() - killed_at > limits.crash_wait:
                    return {"recovered": False, "done": peer.count_done(), "done_before_kill": done_before,
                            "waited": limits.crash_wait}
                second.check_alive()
                time.sleep(0.1)
        return {"recovered": True, "seconds": time.monotonic() - killed_at, "done_before_kill": done_before,
                "nap": limits.crash_nap}
    finally:
        for workers in (first, second):
            if workers is not None:
                workers.stop()
        receiver.close()
        with deadline(120, "teardown"):
            peer.teardown()
