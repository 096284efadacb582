"""What tracing costs (leased.tracing): enqueue and drain with OpenTelemetry off, on, and (optionally)
with the code before tracing existed, in one run, alternating, as ratios.

    python bench/tracing.py                                   # SQLite and PostgreSQL, 5 rounds
    python bench/tracing.py --before-src /tmp/before/src      # and the code before (a git worktree)
    python bench/tracing.py --backend sqlite --rounds 7 --jobs 5000

Each measurement is a process of its own (whether OpenTelemetry is imported is a process's state):
- off: OpenTelemetry never imported, as in an app that does not trace;
- on: the SDK with a BatchSpanProcessor and an exporter that drops what it is given, every job
  enqueued inside a span (so each has a send span, and each attempt a process span);
- before: like off, on the code at --before-src.
Each process enqueues --jobs jobs one call at a time (enqueue/s), then drains them with one worker of
concurrency 10 (drain/s). A fresh database per measurement.
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
MODES = ("off", "on", "before")


def child(mode: str, url: str, jobs: int) -> dict[str, float]:
    if mode == "on":
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
    task = app.task(name="bench.noop")(lambda n: None)
    with span:
        started = time.perf_counter()
        for n in range(jobs):
            task.enqueue(n)
        enqueued = time.perf_counter()
    stats = app.run_until_empty(concurrency=10)
    drained = time.perf_counter()
    assert stats.done == jobs, stats
    if mode != "on":
        assert not [name for name in sys.modules if name.startswith("opentelemetry")]
    app.close()
    return {"enqueue": jobs / (enqueued - started), "drain": jobs / (drained - enqueued)}


def measure(mode: str, backend: str, jobs: int, before_src: str | None, round_: int) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    from common import drop_fresh_database, fresh_database

    name = f"leased_bench_tracing_{mode}_{round_}"
    url, path = fresh_database(backend, name, "tracing")
    src = before_src if mode == "before" else str(HERE.parent / "src")
    try:
        done = subprocess.run([sys.executable, __file__, "--child", mode, "--url", url, "--jobs", str(jobs)],
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
    parser.add_argument("--before-src", help="the src folder of the code to compare with (mode 'before')")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(child(options.child, options.url, options.jobs)))
        return
    modes = [mode for mode in MODES if mode != "before" or options.before_src]
    print(f"{options.jobs} jobs, {options.rounds} rounds alternating {', '.join(modes)}; medians, jobs/s")
    print(f"{'backend':9} {'figure':8} " + " ".join(f"{mode:>9}" for mode in modes) +
          "  on/off" + ("  off/before" if options.before_src else ""))
    for backend in options.backend or ["sqlite", "postgres"]:
        results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for round_ in range(options.rounds):
            for mode in modes:
                results[mode].append(measure(mode, backend, options.jobs, options.before_src, round_))
        for figure in ("enqueue", "drain"):
            medians = {mode: sorted(r[figure] for r in results[mode])[len(results[mode]) // 2] for mode in modes}
            ratios = f"  {medians['on'] / medians['off']:6.2f}"
            if options.before_src:
                ratios += f"  {medians['off'] / medians['before']:10.2f}"
            print(f"{backend:9} {figure:8} " + " ".join(f"{medians[mode]:9.0f}" for mode in modes) + ratios)


if __name__ == "__main__":
    main()
