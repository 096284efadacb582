"""What tracing costs (leased.tracing): enqueue and drain with OpenTelemetry off, on, and (optionally)
with the code of another checkout (--before-src), in one run, alternating, as ratios.

    python bench/tracing.py                                   # SQLite and PostgreSQL, 5 rounds
    python bench/tracing.py --before-src /tmp/before/src      # and another checkout's code (a git worktree)
    python bench/tracing.py --backend sqlite --rounds 7 --jobs 5000

Each measurement is a process of its own (whether OpenTelemetry is imported is a process's state):
- off: OpenTelemetry never imported, as in an app that does not trace;
- on: the SDK with a BatchSpanProcessor and an exporter that drops what it is given, every job
  enqueued inside a span (so each has a send span, and each attempt a process span);
- before, before-on: like off and on, with the code at --before-src.
Each process enqueues --jobs jobs one call at a time (enqueue/s), then drains them with one worker of
concurrency 10 (drain/s), and counts the process's CPU time per job of each (µs): on a machine shared
with other work the CPU time varies less than the rate. A fresh database per measurement. Handlers
are no-ops unless --job-cpu-us gives each one that much CPU work (tracing's share shrinks as a job
does more).

Last, in one process, what one attempt's tracing costs (its thread's CPU time) against the SDK's own
span with the same attributes, and against its cheapest span (a name, no attributes): the part of
the overhead that is the SDK's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
MODES = ("off", "on", "before", "before-on")


def busy(microseconds: float) -> None:
    """CPU work for as long as `microseconds` of this thread's CPU time."""
    until = time.thread_time() + microseconds / 1e6
    while time.thread_time() < until:
        pass


def child(mode: str, url: str, jobs: int, job_cpu_us: float) -> dict[str, float]:
    if mode.endswith("on"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class Dropped(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Dropped()))
        trace.set_tracer_provider(provider)
        span = trace.get_tracer("bench").start_as_current_span("request")
    else:
        import contextlib

        span = contextlib.nullcontext()
    from leased import Leased

    app = Leased(url)
    task = app.task(name="bench.noop")((lambda n: busy(job_cpu_us)) if job_cpu_us else (lambda n: None))
    with span:
        started, cpu_started = time.perf_counter(), time.process_time()
        for n in range(jobs):
            task.enqueue(n)
        enqueued, cpu_enqueued = time.perf_counter(), time.process_time()
    stats = app.run_until_empty(concurrency=10)
    drained, cpu_drained = time.perf_counter(), time.process_time()
    assert stats.done == jobs, stats
    if not mode.endswith("on"):
        assert not [name for name in sys.modules if name.startswith("opentelemetry")]
    app.close()
    return {"enqueue": jobs / (enqueued - started), "drain": jobs / (drained - enqueued),
            "enqueue cpu": (cpu_enqueued - cpu_started) / jobs * 1e6,
            "drain cpu": (cpu_drained - cpu_enqueued) / jobs * 1e6}


def span_costs(rounds: int) -> dict[str, float]:
    """µs per attempt: leased's span (start_attempt, current while the handler runs, end_attempt)
    and the SDK's cheapest span under the same parent, alternating; medians of `rounds`."""
    import timeit

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from leased import tracing

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped(), max_queue_size=100_000))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("bench")
    with tracer.start_as_current_span("request"):
        trace_context = tracing.current_trace_context()

    class Claimed:  # what start_attempt reads of a ClaimedJob
        id, task_name, queue_name, attempt, max_attempts = 12345, "bench.noop", "default", 1, 3

    job = Claimed()
    job.trace_context = trace_context

    def attempt() -> None:
        span = tracing.start_attempt(job, "worker-1")
        with tracing.current(span):
            pass
        tracing.end_attempt(span, "done", False)

    parent = trace.set_span_in_context(trace.NonRecordingSpan(tracing._extracted(trace_context)))
    attributes = {"messaging.system": "leased", "messaging.operation.type": "process",
                  "messaging.operation.name": "process", "messaging.destination.name": "default",
                  "messaging.message.id": "12345", "leased.task": "bench.noop", "leased.attempt": 1,
                  "leased.max_attempts": 3, "leased.worker_id": "worker-1"}

    def bare() -> None:
        tracer.start_span("process default", context=parent).end()

    def attributed() -> None:  # the same attributes, set by the SDK alone
        span = tracer.start_span("process default", context=parent, attributes=attributes)
        span.set_attributes({"leased.outcome": "done", "leased.will_retry": False})
        span.end()

    number = 5000
    measured = {"attempt span": attempt, "SDK span with its attributes": attributed, "bare SDK span": bare}
    times: dict[str, list[float]] = {name: [] for name in measured}
    for _ in range(rounds):
        for name, call in measured.items():
            # This thread's CPU time, not the wall clock: on a shared machine the wall clock counts
            # the time other processes ran.
            times[name].append(timeit.Timer(call, timer=time.thread_time).timeit(number) / number * 1e6)
    provider.shutdown()
    return {name: sorted(values)[len(values) // 2] for name, values in times.items()}


def measure(mode: str, backend: str, jobs: int, job_cpu_us: float, before_src: str | None,
            round_: int) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    from common import drop_fresh_database, fresh_database

    name = f"leased_bench_tracing_{mode}_{round_}"
    url, path = fresh_database(backend, name, "tracing")
    src = before_src if mode.startswith("before") else str(HERE.parent / "src")
    try:
        done = subprocess.run([sys.executable, __file__, "--child", mode, "--url", url, "--jobs", str(jobs),
                               "--job-cpu-us", str(job_cpu_us)],
                              env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise SystemExit(f"{mode} on {backend} failed:\n{done.stderr}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        drop_fresh_database(backend, name, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgres", "mariadb"))
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--job-cpu-us", type=float, default=0.0, help="CPU work per job, µs (0: no-op jobs)")
    parser.add_argument("--before-src", help="the src folder of the code to compare with (modes before, before-on)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--child-spans", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(options.child, options.url, options.jobs, options.job_cpu_us)))
        return
    if options.child_spans:
        print(json.dumps(span_costs(options.rounds)))
        return
    modes = [mode for mode in MODES if not mode.startswith("before") or options.before_src]
    print(f"{options.jobs} jobs ({options.job_cpu_us:g} µs of CPU each), {options.rounds} rounds alternating "
          f"{', '.join(modes)}; medians: jobs/s, and CPU µs per job; load average {_load()}")
    print(f"{'backend':9} {'figure':12} " + " ".join(f"{mode:>9}" for mode in modes) +
          "  on/off" + ("  before-on/before  off/before" if options.before_src else ""))
    for backend in options.backend or ["sqlite", "postgres"]:
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for round_ in range(options.rounds):
            for mode in modes:
                results[mode].append(measure(mode, backend, options.jobs, options.job_cpu_us, options.before_src,
                                             round_))
        for figure in ("enqueue", "drain", "enqueue cpu", "drain cpu"):
            medians = {mode: sorted(r[figure] for r in results[mode])[len(results[mode]) // 2] for mode in modes}
            # A rate's ratio is on/off; a cost's is off/on, so that both read "on runs at 0.x of off".
            cost = figure.endswith("cpu")
            ratios = f"  {_ratio(medians, 'on', 'off', cost):6.2f}"
            if options.before_src:
                ratios += (f"  {_ratio(medians, 'before-on', 'before', cost):16.2f}"
                           f"  {_ratio(medians, 'off', 'before', cost):10.2f}")
            print(f"{backend:9} {figure:12} " + " ".join(f"{medians[mode]:9.0f}" for mode in modes) + ratios)
    sources = [("", str(HERE.parent / "src"))] + ([("before ", options.before_src)] if options.before_src else [])
    for label, src in sources:
        done = subprocess.run([sys.executable, __file__, "--child-spans", "--rounds", str(options.rounds)],
                              env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, timeout=600,
                              check=True)
        spans = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{label}µs per attempt: " + ", ".join(f"{name} {value:.1f}" for name, value in spans.items()) +
              f"; load average {_load()}")


def _ratio(medians: dict[str, float], mode: str, base: str, cost: bool) -> float:
    """`mode` against `base` as "runs at 0.x of": a rate's ratio, or a cost's inverse."""
    return medians[base] / medians[mode] if cost else medians[mode] / medians[base]


def _load() -> str:
    return " ".join(f"{load:.1f}" for load in os.getloadavg())

if __name__ == "__main__":
    main()
