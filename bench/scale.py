#!/usr/bin/env python3
"""Flat as the table grows? leased with 10^3 to 10^7 finished jobs in its table, a figure per decade.

    python3.12 bench/scale.py                              # PostgreSQL and SQLite; empty, 10^3 .. 10^6
    python3.12 bench/scale.py --backends sqlite --decades 3,4 --repeats 1
    python3.12 bench/scale.py --decades 7                  # ten million rows (see the timing below)

For each backend and each size N (0, the empty table, then 10^d for each decade), on a fresh
database: N done jobs with one attempt each, finished a day ago, written in bulk by SQL
(generate_series on PostgreSQL, a recursive CTE on SQLite: prune_under_load.add_history), then
VACUUM ANALYZE (PostgreSQL) or ANALYZE (SQLite). The rows are within the default retention (done
jobs are kept 7 days), so the pruner that every `leased worker` runs by default finds nothing to
delete and they stay. Then, on that table, in this order:

- start latency: 200 probes 20 ms apart into an idle `leased worker` process (workloads.latency_on,
  the side-by-side suite's workload 3), p50 and p99;
- enqueue cost: 2,000 jobs, one `Task.enqueue` call each, jobs/s;
- drain: those and 18,000 more queued in bulk (20,000) by one `leased worker` process with
  concurrency 10 (workloads.drain, the suite's workload 1), from the first completion to the last;
- the dashboard: the overview page and /metrics through the ASGI app (Starlette's TestClient),
  median of 5 renders after one to warm up.

PostgreSQL's autovacuum is on for the run (common.autovacuum_on, put back after): the test
machine's server has it off (conf.d/90-ci.conf), no production server does; --autovacuum-off
leaves it as the server has it, as every figure before 2026-12-02 was taken. Ratios are to the empty
table. The issue's bar: the drain at 10^6 and 10^7 at least 0.8x the
empty table's. Writes bench/scale_results.json and the section "Scale: drain with history" in
docs/benchmarks.md (bench/scale.md too). Timing on this 2-core machine: a repeat of empty to 10^6
takes about 2.5 min on PostgreSQL and 2 min on SQLite (the fill of 10^6 takes 15-35 s and 12 s of
that); 10^7 is behind --decades 7 (with --merge to add it to a saved table): 5.5 min for both
backends, of which the fill takes 2.5 min on PostgreSQL (a 2.4 GB database) and 1.3 min on SQLite.
"""

from __future__ import annotations

import sys
from pathlib import Path

import bench_venv

if not bench_venv.inside(bench_venv.VENV) and __name__ == "__main__":
    bench_venv.bootstrap_bench(Path(__file__).resolve())

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from datetime import UTC, datetime

import report
from common import BENCH, autovacuum_on, leased_commit, median_range
from dashboard_million import page_times
from peers.leased import LeasedPostgres, LeasedSQLite
from prune_under_load import add_history
from workloads import Limits, drain, latency_on

RESULTS = BENCH / "scale_results.json"
SECTION = BENCH / "scale.md"
NOTES = BENCH / "scale_notes.md"  # hand-written: what the figures show, appended to the section
TITLE = "Scale: drain with history"
ENQUEUED_ONE_BY_ONE = 2_000
PAGES = {"overview": "/", "metrics": "/metrics"}
PAGE_RENDERS = 5


class _WithHistory:
    """A leased peer whose store, once set up as the peer sets it up, holds `history` finished jobs.
    Its count of done jobs leaves out those there at the last rebase(), so that the workloads count
    only their own; it reads only the jobs above the history's ids, so that the workloads' polling
    (ten counts a second) does not itself grow with the history."""

    history = 0
    fill_seconds = 0.0

    def setup(self) -> None:
        super().setup()
        started = time.perf_counter()
        if self.history:
            add_history(self.producer, self.history, days_old=1)
        self.fill_seconds = time.perf_counter() - started
        self.after_id = self.history  # add_history's ids are 1..N in a fresh table
        self.rebase()

    def rebase(self) -> None:
        self.baseline = 0
        self.baseline = self.count_done()

    def count_done(self) -> int:
        return super().count_done() - self.baseline


class PostgresWithHistory(_WithHistory, LeasedPostgres):
    database = "bench_leased_scale"


class SQLiteWithHistory(_WithHistory, LeasedSQLite):
    pass


PEERS = {"postgres": PostgresWithHistory, "sqlite": SQLiteWithHistory}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def measure(backend: str, history: int, limits: Limits) -> dict:
    peer = PEERS[backend]()
    peer.history = history
    peer.setup()
    try:
        out: dict = {"fill_seconds": peer.fill_seconds, "latency": latency_on(peer, limits)}
        peer.rebase()
        numbers = list(range(limits.jobs))
        started = time.perf_counter()
        peer.enqueue_one("noop", numbers[:ENQUEUED_ONE_BY_ONE])
        out["enqueue_one"] = {"rate": ENQUEUED_ONE_BY_ONE / (time.perf_counter() - started)}
        peer.enqueue_bulk("noop", numbers[ENQUEUED_ONE_BY_ONE:])
        out["drain_1p"] = drain(peer, 1, limits.jobs, limits, f"scale-{history}")
        out["pages"] = {name: statistics.median(times)
                        for name, (times, _) in page_times(peer.producer, PAGES, PAGE_RENDERS).items()}
        return out
    finally:
        peer.teardown()


def measure_or_error(backend: str, history: int, limits: Limits, tries: int = 2) -> dict:
    """measure(), tried again once after a failure (the servers here are shared: another user's
    restart or a full connection table fails one run); the last error if every try failed."""
    for attempt in range(tries):
        try:
            return measure(backend, history, limits)
        except Exception as error:  # reported in the table; the other sizes still run
            found = {"error": f"{type(error).__name__}: {error}"[:200]}
            log(f"  failed ({found['error']}){', trying again' if attempt < tries - 1 else ''}")
    return found


def _summary(runs: list[dict], *path: str) -> dict | None:
    values = []
    for run in runs:
        value = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values.append(value)
    return median_range(values)


def _figure(summary: dict | None, digits: int = 0) -> str:
    if summary is None:
        return "–"
    text = f"{summary['median']:,.{digits}f}"
    if summary["n"] > 1:
        text += f" ({summary['min']:,.{digits}f}–{summary['max']:,.{digits}f})"
    return text


def _times(summary: dict | None, empty: dict | None) -> str:
    if not summary or not empty or not empty["median"]:
        return "–"
    return f"{summary['median'] / empty['median']:.2f}×"


COLUMNS = [  # (label, path in a run, digits, shown with its ratio to the empty table)
    ("drain, 1 process (jobs/s)", ("drain_1p", "rate"), 0, True),
    ("enqueue, one call per job (jobs/s)", ("enqueue_one", "rate"), 0, True),
    ("start latency p50 (ms)", ("latency", "p50"), 1, False),
    ("start latency p99 (ms)", ("latency", "p99"), 1, True),
    ("overview page (ms)", ("pages", "overview"), 1, True),
    ("/metrics (ms)", ("pages", "metrics"), 1, True),
]


def render(results: dict) -> str:
    env = results["environment"]
    lines = [f"## {TITLE}", "",
             f"leased with N finished jobs already in its table (done a day ago, one attempt row each, written "
             f"in bulk by SQL, then VACUUM ANALYZE or ANALYZE; within the default 7-day retention, so the "
             f"worker's pruner keeps them). On that table: {env['latency_jobs']} start-latency probes "
             f"{env['latency_gap_ms']:.0f} ms apart into an idle `leased worker`; {ENQUEUED_ONE_BY_ONE:,} jobs "
             f"enqueued one call each; those and {env['jobs'] - ENQUEUED_ONE_BY_ONE:,} more (queued in bulk) "
             f"drained by one `leased worker` process with concurrency {env['concurrency']}; the dashboard's "
             f"overview and /metrics, median of {PAGE_RENDERS} renders. Each figure is the median of the "
             f"runs counted in the row (range in brackets), {env['date']}, {env['machine']}, Python {env['python']}, "
             f"PostgreSQL's autovacuum {env.get('autovacuum', 'off (conf.d/90-ci.conf)')}, leased at "
             f"`{env['leased_commit']}`. **The machine was shared** with other work while this ran: read "
             "ratios within about ±0.2 of 1 as flat. × is the ratio to the empty table (for latency and "
             "page times, above 1 is slower).", "",
             "```sh", results["command"], "```", ""]
    failures = []
    for backend, runs in results["runs"].items():
        lines += [f"### {'PostgreSQL' if backend == 'postgres' else 'SQLite'}", "",
                  "| finished jobs in the table | runs | fill (s) | "
                  + " | ".join(label + (" | ×" if ratio else "") for label, _, _, ratio in COLUMNS) + " |",
                  "|---" * (3 + len(COLUMNS) + sum(ratio for *_, ratio in COLUMNS)) + "|"]
        empty = runs.get("0", [])
        for size, size_runs in runs.items():
            cells = [f"{int(size):,}", str(sum("error" not in run for run in size_runs)),
                     _figure(_summary(size_runs, "fill_seconds"), 1)]
            for _, path, digits, ratio in COLUMNS:
                found = _summary(size_runs, *path)
                cells.append(_figure(found, digits))
                if ratio:
                    cells.append(_times(found, _summary(empty, *path)))
            lines.append("| " + " | ".join(cells) + " |")
            failed = [run["error"] for run in size_runs if "error" in run]
            if failed:
                failures.append(f"- {'PostgreSQL' if backend == 'postgres' else 'SQLite'}, {int(size):,}: "
                                f"{len(failed)} of {len(size_runs)} runs failed ({failed[-1]}).")
        lines.append("")
    if failures:
        lines += ["Runs that failed (the servers are shared: another user's restart of PostgreSQL or its full "
                  "connection table) are left out of the medians:", "", *failures, ""]
    if NOTES.exists():
        lines += [NOTES.read_text().strip(), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="postgres,sqlite", help="comma-separated: postgres, sqlite")
    parser.add_argument("--decades", default="3,4,5,6", help="comma-separated exponents: 3 is 1,000 finished "
                        "jobs, 7 ten million (default 3,4,5,6); the empty table is always measured")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs drained per measurement")
    parser.add_argument("--autovacuum-off", action="store_true", help="leave PostgreSQL's autovacuum as the server "
                        "has it (off on the test machine, conf.d/90-ci.conf); by default it is turned on for the "
                        "run, as every production server runs, and put back after (common.autovacuum_on)")
    parser.add_argument("--render", action="store_true", help="only re-write the report from the saved results")
    parser.add_argument("--merge", action="store_true", help="keep the saved results of the backends and sizes "
                        "not measured now (e.g. add --decades 7 to a table of 3-6)")
    options = parser.parse_args()
    if options.render:
        results = json.loads(RESULTS.read_text())
    else:
        backends = options.backends.split(",")
        unknown = sorted(set(backends) - set(PEERS))
        if unknown:
            parser.error(f"unknown backend {unknown[0]!r}: choose from {', '.join(PEERS)}")
        sizes = [0] + [10 ** int(decade) for decade in options.decades.split(",")]
        saved = json.loads(RESULTS.read_text()) if options.merge and RESULTS.exists() else None
        if saved and all(saved["runs"].get(backend, {}).get("0") for backend in backends):
            sizes.remove(0)  # the saved empty table stays the reference
        limits = Limits(jobs=options.jobs)
        if limits.jobs <= ENQUEUED_ONE_BY_ONE:
            parser.error(f"--jobs must be above {ENQUEUED_ONE_BY_ONE:,} (those are enqueued one call each)")
        results = {
            "command": ("python3.12 bench/scale.py " + " ".join(sys.argv[1:])).strip(),
            "environment": {
                "date": datetime.now(UTC).strftime("%Y-%m-%d"), "jobs": limits.jobs,
                "concurrency": limits.concurrency, "latency_jobs": limits.latency_jobs,
                "latency_gap_ms": limits.latency_gap * 1000, "repeats": options.repeats,
                "python": platform.python_version(),
                "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
                "leased_commit": leased_commit(),
                "autovacuum": "as the server has it" if options.autovacuum_off else "on for the run",
            },
            "runs": {backend: {str(size): [] for size in sizes} for backend in backends},
        }
        if saved:
            for backend, runs in results["runs"].items():  # the sizes measured now replace the saved ones
                saved["runs"][backend] = {**saved["runs"].get(backend, {}), **runs}
            results["runs"] = {backend: dict(sorted(runs.items(), key=lambda item: int(item[0])))
                               for backend, runs in saved["runs"].items()}
            results["command"] = f"{saved['command']}\n{results['command']}"
            results["environment"] = saved["environment"]  # that of the first run; each row counts its runs
        on = "postgres" in backends and not options.autovacuum_off
        with autovacuum_on(log) if on else contextlib.nullcontext():
            for repeat in range(options.repeats):  # the outer loop, so that the machine's noise spreads over all
                for backend in backends:
                    for size in sizes:
                        log(f"repeat {repeat + 1}/{options.repeats}: {backend}, {size:,} finished jobs")
                        found = measure_or_error(backend, size, limits)
                        log(f"  {json.dumps(found)}")
                        results["runs"][backend][str(size)].append(found)
                        RESULTS.write_text(json.dumps(results, indent=1))
    text = render(results)
    report.publish(TITLE, SECTION, text)
    print(text)


if __name__ == "__main__":
    main()
