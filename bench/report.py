"""Turn results.json into docs/benchmarks.md (tables with medians, ranges and ratios) and a chart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from common import ROOT, median_range

DOC = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "benchmarks.png"
FINDINGS = ROOT / "bench" / "findings.md"  # hand-written: what a profile of the slow spots showed
DJANGO = ROOT / "bench" / "django_backends.md"  # written by bench/django_backends.py (its own venv)


def _values(runs: list[dict], key: str = "rate") -> list[float]:
    return [run[key] for run in runs if isinstance(run, dict) and key in run]


def _why_not(runs: list[dict]) -> str | None:
    for run in runs:
        if "unsupported" in run:
            return "n/a: " + run["unsupported"]
    for run in runs:
        if "error" in run:
            return "failed: " + run["error"]
    return None


def stat(results: dict, peer: str, metric: str, key: str = "rate") -> dict | None:
    return median_range(_values(results["runs"].get(peer, {}).get(metric, []), key))


def cell(results: dict, peer: str, metric: str, key: str = "rate", digits: int = 0, unit: str = "") -> str:
    runs = results["runs"].get(peer, {}).get(metric, [])
    summary = median_range(_values(runs, key))
    if summary is None:
        reason = _why_not(runs)
        return (reason[:90] + "…" if reason and len(reason) > 90 else reason) or "–"
    partial = any(run.get("partial") for run in runs if isinstance(run, dict))
    text = f"{summary['median']:,.{digits}f}{unit}"
    if summary["n"] > 1:
        text += f" ({summary['min']:,.{digits}f}–{summary['max']:,.{digits}f})"
    if partial:
        text += " †"
    return text


def _ratio(a: dict | None, b: dict | None) -> str:
    if not a or not b or not b["median"]:
        return "–"
    value = a["median"] / b["median"]
    return f"{value:.2f}×" if value >= 0.1 else f"{value:.3f}×"


STORE_KEYS = {"PostgreSQL": "postgres", "SQLite": "sqlite", "MariaDB": "mariadb"}
CEILINGS = [(f"ceiling_{key}_{schema}_b{batch}",
             f"ceiling: {store}, {'leased' if schema == 'leased' else 'a minimal (id, status)'} table, "
             f"{'leased' if schema == 'leased' else 'SKIP LOCKED'} claim + finish of {batch} (jobs/s)")
            for store, key in STORE_KEYS.items() for schema in ("leased", "minimal") for batch in (10, 50)]


def ceiling(results: dict, store: str, schema: str, batch: int = 10) -> dict | None:
    return median_range(results["baselines"].get(f"ceiling_{STORE_KEYS.get(store, '?')}_{schema}_b{batch}", []))


def render(results: dict) -> str:
    env = results["environment"]
    peers = results["peers"]
    runs = results["runs"]
    lines = ["# Benchmarks: leased and its peers", ""]
    lines += [
        f"Measured by `python3.12 bench/run.py` on {env['date']} ({env['machine']}). Every figure is the median of "
        f"{env['repeats']} runs with the range (min–max) in brackets; other work was running on the machine, "
        "so read the ranges. Completions are counted in each library's store (a SQL count, a Redis registry or "
        "key count), never taken from the library. † marks a run cut short by its time limit: the rate is "
        "over what it did finish.",
        "",
        "![Throughput and latency, leased and its peers](benchmarks.png)",
        "",
        "## Versions and settings",
        "",
        f"Python {env['python']}, PostgreSQL {env['postgresql']}, SQLite {env['sqlite']}, Redis {env['redis']}; "
        f"{env['cores']} cores. PostgreSQL: {env['pg_settings']}. leased at commit "
        f"`{env.get('leased_commit', 'unknown')}`.",
        "",
        "| library | version | store | handlers | settings |",
        "|---|---|---|---|---|",
    ]
    for peer in peers:
        lines.append(f"| {peer['label']} | {peer['version']} | {peer['store']} | {peer['handler']} "
                     f"| {peer['settings']} |")
    limits = env["limits"]
    lines += [
        "",
        f"Workloads: {limits['jobs']:,} no-op jobs enqueued one call at a time, then drained by one worker "
        f"process (concurrency {limits['concurrency']}); {limits['jobs']:,} enqueued with the bulk API "
        "(one call per 1,000 jobs), then drained by two worker processes (one per core). Drain rates run "
        "from the first completion seen in the store to the last (polled every 0.1 s), so worker start-up "
        f"is left out. Time limits: {limits['enqueue_seconds']:.0f} s per enqueue loop, "
        f"{limits['drain_seconds']:.0f} s per drain.",
        "",
        "## Baselines: what the databases do here",
        "",
        "| baseline | per second |",
        "|---|---|",
    ]
    for key, label in [("pgbench_c1", "pgbench -N, 1 client (TPS)"), ("pgbench_c4", "pgbench -N, 4 clients (TPS)"),
                       ("psycopg_insert", "psycopg INSERT + commit, 1 connection (rows/s)"),
                       ("sqlite_normal", "SQLite WAL, synchronous=NORMAL, INSERT + commit (rows/s)"),
                       ("sqlite_full", "SQLite WAL, synchronous=FULL, INSERT + commit (rows/s)"),
                       ("mariadb_insert", "MariaDB INSERT + commit, 1 connection (commits/s)"),
                       *CEILINGS]:
        summary = median_range(results["baselines"].get(key, []))
        if summary is None and key.startswith("ceiling_"):
            continue  # that store was not measured in this run
        if summary:
            lines.append(f"| {label} | {summary['median']:,.0f} ({summary['min']:,.0f}–{summary['max']:,.0f}) |")
        else:
            lines.append(f"| {label} | – |")

    pgbench = median_range(results["baselines"].get("pgbench_c1", []))
    sqlite_normal = median_range(results["baselines"].get("sqlite_normal", []))
    mariadb = median_range(results["baselines"].get("mariadb_insert", []))
    lines += [
        "",
        "## Throughput (jobs/s)",
        "",
        "| library | enqueue, one call per job | enqueue, bulk API | drain, 1 process | drain, 2 processes "
        "| drain 1p ÷ store baseline¹ | drain 1p ÷ ceiling² |",
        "|---|---|---|---|---|---|---|",
    ]
    for peer in peers:
        name = peer["name"]
        base = {"PostgreSQL": pgbench, "SQLite": sqlite_normal, "MariaDB": mariadb}.get(peer["store"])
        lines.append(f"| {peer['label']} | {cell(results, name, 'enqueue_one')} "
                     f"| {cell(results, name, 'enqueue_bulk')} "
                     f"| {cell(results, name, 'drain_1p')} | {cell(results, name, 'drain_2p')} "
                     f"| {_ratio(stat(results, name, 'drain_1p'), base) if base else '–'} "
                     f"| {_ratio(stat(results, name, 'drain_1p'), ceiling(results, peer['store'], 'minimal'))} |")
    lines += ["", "¹ PostgreSQL libraries against pgbench -N TPS with 1 client; SQLite ones against SQLite's "
              "WAL + synchronous=NORMAL commit rate; MariaDB ones against one connection's INSERT + commit rate; "
              "Redis ones have no baseline here.",
              "² Against the store's ceiling: one connection claiming 10 jobs of a minimal (id, status) table with "
              "SKIP LOCKED and finishing them, in a loop (see the baselines).", ""]

    lines += ["## Enqueue-to-start latency at low load (ms)", "",
              f"{limits['latency_jobs']} jobs, {limits['latency_gap'] * 1000:.0f} ms apart, into an idle worker in "
              "another process; from just before the enqueue call to the first line of the handler (the job "
              "reports it on a loopback datagram, one clock).", "",
              "| library | p50 | p95 | p99 | max |", "|---|---|---|---|---|"]
    for peer in peers:
        name = peer["name"]
        lines.append(f"| {peer['label']} | {cell(results, name, 'latency', 'p50', 1)} | "
                     f"{cell(results, name, 'latency', 'p95', 1)} | {cell(results, name, 'latency', 'p99', 1)} | "
                     f"{cell(results, name, 'latency', 'max', 1)} |")

    if any("slots50" in r or "slots500" in r for r in runs.values()):
        lines += ["", "## Slot utilisation: jobs that wait", "",
                  f"{limits['sleep_jobs']:,} jobs that each sleep {limits['sleep_seconds'] * 1000:.0f} ms, one worker "
                  "process with 50 or 500 slots, and two processes (one per core) with 250 slots each; then "
                  f"{limits.get('steady_sleep_jobs', 20_000):,} such jobs with 500 slots, to see the rate kept up once "
                  "started. Utilisation = ideal time (jobs × sleep ÷ slots) ÷ actual time (first start to last end, "
                  "reported by the jobs). 1.0 is perfect.", "",
                  "| library | 50 slots | 500 slots | 500 slots, 2 processes | 500 slots, "
                  f"{limits.get('steady_sleep_jobs', 20_000):,} jobs | the same, 2 processes |",
                  "|---|---|---|---|---|---|"]
        for peer in peers:
            name = peer["name"]
            lines.append(f"| {peer['label']} | {cell(results, name, 'slots50', 'utilisation', 2)} | "
                         f"{cell(results, name, 'slots500', 'utilisation', 2)} | "
                         f"{cell(results, name, 'slots500_2p', 'utilisation', 2)} | "
                         f"{cell(results, name, 'slots500_1p_steady', 'utilisation', 2)} | "
                         f"{cell(results, name, 'slots500_2p_steady', 'utilisation', 2)} |")

    if any("crash" in r for r in runs.values()):
        lines += ["", "## Crash recovery", "",
                  f"A worker holding {limits['crash_jobs']} running jobs (each sleeps {limits['crash_nap']:.0f} s) is "
                  "SIGKILLed and a second worker started at once: seconds from the kill until the store counts "
                  f"all of them done (the re-run's {limits['crash_nap']:.0f} s included), waiting at most "
                  f"{limits['crash_wait']:.0f} s.", "",
                  "| library | recovery mechanism | seconds to all done |", "|---|---|---|"]
        for peer in peers:
            name = peer["name"]
            crash_runs = runs.get(name, {}).get("crash", [])
            recovered = [run for run in crash_runs if run.get("recovered")]
            if recovered:
                text = cell(results, name, "crash", "seconds", 1)
            elif crash_runs and any("recovered" in run for run in crash_runs):
                last = next(run for run in crash_runs if "recovered" in run)
                text = f"not recovered within {last['waited']:.0f} s ({last['done']} of {limits['crash_jobs']} done)"
            else:
                text = _why_not(crash_runs) or "–"
            lines.append(f"| {peer['label']} | {peer['recovery']} | {text} |")

    lines += ["", "## The ratios that matter", ""] + [f"- {line}" for line in key_ratios(results)]
    lines += ["", "## Reading these numbers", "", *results.get("notes", []), ""]
    if FINDINGS.exists():
        lines += [FINDINGS.read_text().strip(), ""]
    if DJANGO.exists():
        lines += [DJANGO.read_text().strip(), ""]
    return "\n".join(lines)


def key_ratios(results: dict) -> list[str]:
    out = []
    s = lambda peer, metric, key="rate": stat(results, peer, metric, key)
    base = lambda key: median_range(results["baselines"].get(key, []))

    def best(names: list[str], metric: str) -> tuple[str | None, dict | None]:
        found = [(name, s(name, metric)) for name in names if s(name, metric)]
        return max(found, key=lambda item: item[1]["median"]) if found else (None, None)

    label = {peer["name"]: peer["label"] for peer in results["peers"]}
    pg_peers = ["procrastinate", "pgqueuer", "oban-py", "django-ox-pg"]
    all_peers = [peer["name"] for peer in results["peers"] if not peer["name"].startswith("leased")]
    for metric, what in [("drain_1p", "drain, 1 process"), ("drain_2p", "drain, 2 processes")]:
        name, other = best(pg_peers, metric)
        mine = s("leased-pg", metric)
        if mine and other:
            out.append(f"leased (PostgreSQL) {what}: {mine['median']:,.0f} jobs/s = {_ratio(mine, other)} "
                       f"{label[name]} ({other['median']:,.0f}), the faster PostgreSQL peer; "
                       f"{_ratio(mine, base('pgbench_c1'))} pgbench -N TPS with 1 client, "
                       f"{_ratio(mine, base('pgbench_c4'))} with 4.")
    for metric, what in [("enqueue_bulk", "bulk enqueue"), ("enqueue_one", "enqueue one call per job")]:
        shown = set()
        for store_peers, store in [(pg_peers, "PostgreSQL"), (all_peers, "any store")]:
            name, other = best(store_peers, metric)
            mine = s("leased-pg", metric)
            if mine and other and name not in shown:
                shown.add(name)
                out.append(f"leased (PostgreSQL) {what}: {mine['median']:,.0f} jobs/s = {_ratio(mine, other)} the "
                           f"fastest peer on {store}, {label[name]} ({other['median']:,.0f}).")
    for peer, store in (("leased-pg", "PostgreSQL"), ("leased-sqlite", "SQLite"), ("leased-mariadb", "MariaDB")):
        mine, own, minimal = s(peer, "drain_1p"), ceiling(results, store, "leased"), ceiling(results, store, "minimal")
        if mine and own and minimal:
            out.append(f"{label.get(peer, peer)} drain, 1 process: {mine['median']:,.0f} jobs/s = {_ratio(mine, own)} "
                       f"of the ceiling with its own SQL ({own['median']:,.0f}: claim and finish 10 at a time, "
                       f"nothing else), {_ratio(mine, minimal)} of a minimal (id, status) table's "
                       f"({minimal['median']:,.0f}); leased's own SQL reaches {_ratio(own, minimal)} "
                       "of the minimal table's.")
    mine = s("leased-pg", "enqueue_one")
    if mine and base("psycopg_insert"):
        out.append(f"leased (PostgreSQL) enqueue one call per job = {_ratio(mine, base('psycopg_insert'))} a bare "
                   "psycopg INSERT + commit loop.")
    for peer in ("leased-pg", "leased-sqlite"):
        p50, p99 = s(peer, "latency", "p50"), s(peer, "latency", "p99")
        if p50 and p99:
            out.append(f"{label[peer]} latency: p50 {p50['median']:.1f} ms, p99 {p99['median']:.1f} ms.")
    for metric, what in [("drain_1p", "drain, 1 process"), ("drain_2p", "drain, 2 processes"),
                         ("enqueue_one", "enqueue one call per job")]:
        mine, huey = s("leased-sqlite", metric), s("huey", metric)
        if mine and huey:
            out.append(f"leased (SQLite) {what}: {mine['median']:,.0f} jobs/s = {_ratio(mine, huey)} huey "
                       f"({huey['median']:,.0f}); {_ratio(mine, base('sqlite_normal'))} SQLite's NORMAL commit rate.")
    return out


def chart(results: dict, path: Path = CHART) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peers = results["peers"]
    labels = [peer["label"].replace(" (", "\n(") for peer in peers]
    colours = ["#1f6feb" if peer["name"].startswith("leased") else "#8b949e" for peer in peers]
    panels = [("enqueue_one", "rate", "enqueue, one call per job (jobs/s)"),
              ("enqueue_bulk", "rate", "enqueue, bulk API (jobs/s)"),
              ("drain_1p", "rate", "drain, 1 worker process (jobs/s)"),
              ("drain_2p", "rate", "drain, 2 worker processes (jobs/s)"),
              ("latency", "p50", "latency p50 (ms, lower is better)"),
              ("latency", "p99", "latency p99 (ms, lower is better)")]
    figure, axes = plt.subplots(3, 2, figsize=(13, 12))
    for axis, (metric, key, title) in zip(axes.flat, panels, strict=True):
        medians, lows, highs = [], [], []
        for peer in peers:
            summary = stat(results, peer["name"], metric, key)
            if summary:
                medians.append(summary["median"])
                lows.append(summary["median"] - summary["min"])
                highs.append(summary["max"] - summary["median"])
            else:
                medians.append(0)
                lows.append(0)
                highs.append(0)
        positions = range(len(peers))
        axis.barh(positions, medians, xerr=[lows, highs], color=colours, capsize=3)
        axis.set_yticks(list(positions), labels, fontsize=8)
        axis.invert_yaxis()
        axis.set_title(title, fontsize=10)
        if metric == "latency":
            axis.set_xscale("log")
        for position, value, high in zip(positions, medians, highs, strict=True):
            shown = f" {value:,.0f}" if value >= 10 else (f" {value:.1f}" if value else " n/a")
            axis.text(value + high, position, shown, va="center", fontsize=7)
    baseline = median_range(results["baselines"].get("pgbench_c1", []))
    if baseline:
        for axis in (axes[1][0], axes[1][1]):
            axis.axvline(baseline["median"], color="#d29922", linestyle="--", linewidth=1)
            axis.text(baseline["median"], -0.6, " pgbench -N c1", color="#d29922", fontsize=7)
    figure.suptitle(f"leased and its peers, median of {results['environment']['repeats']} (bars: range); "
                    f"{results['environment']['cores']} cores", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# docs/benchmarks.md holds bench/run.py's tables above this line and, below it, the sections that
# are written by hand or by other benchmarks (splice()); a new run replaces only what is above.
KEPT_BELOW = ("<!-- Written by bench/run.py down to here. Below: sections written by hand or by other "
              "benchmarks (bench/scale.py, bench/django_backends.py); bench/run.py keeps them. -->")


def write(results: dict) -> str:
    text = render(results)
    kept = ""
    if DOC.exists() and KEPT_BELOW in DOC.read_text():
        kept = DOC.read_text().split(KEPT_BELOW, 1)[1]
    DOC.write_text(text.rstrip() + "\n\n" + KEPT_BELOW + (kept if kept.strip() else "\n"))
    chart(results)
    return text


def publish(title: str, section_file, text: str) -> None:
    """A bench's section, written to its own file and spliced into docs/benchmarks.md."""
    section_file.write_text(text)
    splice(title, text)


def splice(title: str, text: str) -> None:
    """Put a section ("## title" and what follows, up to the next "## ") into docs/benchmarks.md,
    replacing the one there, or else at the end, among the sections that bench/run.py keeps."""
    doc = DOC.read_text() if DOC.exists() else KEPT_BELOW + "\n"
    start = doc.find(f"\n## {title}\n")
    if start < 0:
        doc = doc.rstrip() + "\n\n" + text.rstrip() + "\n"
    else:
        end = doc.find("\n## ", start + 1)
        doc = doc[:start + 1] + text.rstrip() + "\n" + (doc[end:] if end >= 0 else "")
    DOC.write_text(doc)


if __name__ == "__main__":  # re-render from a saved results file
    print(write(json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "bench" / "results.json").read_text())))
