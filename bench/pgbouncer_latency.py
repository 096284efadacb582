"""Enqueue-to-start latency through PgBouncer beside a direct connection, on this machine.

    PYTHONPATH=src python bench/pgbouncer_latency.py [--probes 200] [--rounds 2] [--ways direct,transaction]

Starts Debian's pgbouncer (tests/pgbouncer.py: a role and schema of its own, a temporary directory)
in front of the test PostgreSQL ($LEASED_TEST_POSTGRES_URL, default postgresql://postgres@127.0.0.1:5432/test)
and runs bench/latency_parts.py, one idle `leased worker` and a producer, on each way of reaching it:
- direct: both straight to PostgreSQL;
- transaction, listen_url: both through PgBouncer in transaction mode, the worker's LISTEN on a
  direct listen_url;
- session, listen_url itself: PgBouncer in session mode, where LISTEN works through it;
- transaction, polling: no listen_url, so the worker polls (every second, the default); a fifth
  of the probes, since each waits half a poll on average.
Rounds alternate the ways, so that a change of machine load shows as spread, not as a difference.
Prints a Markdown table of p50 and p99 (ms) of the enqueue call, the wake-up and their sum.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import pgbouncer  # tests/pgbouncer.py

SERVER_URL = os.environ.get("LEASED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
LINE = re.compile(r"^(enqueue call|wake-up|enqueue to start)\s+p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms$", re.M)


def run_latency_parts(url: str, probes: int) -> dict[str, tuple[float, float]]:
    # As latency_parts.py: PYTHONPATH measures another checkout; without it, this one. Made absolute,
    # since latency_parts.py starts its worker in bench/.
    path = os.environ.get("PYTHONPATH") or str(HERE.parent / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(Path(entry).resolve()) for entry in path.split(os.pathsep))}
    run = subprocess.run([sys.executable, str(HERE / "latency_parts.py"), "--database", url, "--probes", str(probes)],
                         env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"latency_parts.py failed on {url}:\n{run.stderr}")
    output = run.stdout
    return {label: (float(p50), float(p99)) for label, p50, p99 in LINE.findall(output)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ways", default="direct,transaction,session,polling", help="which of them, comma-separated")
    options = parser.parse_args()
    problem = pgbouncer.missing()
    if problem:
        sys.exit(problem)
    with ExitStack() as stack:
        transaction = stack.enter_context(pgbouncer.running(SERVER_URL, "transaction"))
        session = stack.enter_context(pgbouncer.running(SERVER_URL, "session"))
        direct = transaction.direct_url
        every_way = {"direct": ("direct", direct, options.probes),
                     "transaction": ("PgBouncer transaction, listen_url direct",
                                     f"{transaction.url}?listen_url={direct}", options.probes),
                     "session": ("PgBouncer session, listen_url itself", f"{session.url}?listen_url={session.url}",
                                 options.probes),
                     "polling": ("PgBouncer transaction, polling (1 s)", transaction.url, max(10, options.probes // 5))}
        ways = [every_way[key] for key in options.ways.split(",")]
        results: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name, _, _ in ways}
        for round_number in range(options.rounds):
            for name, url, probes in ways if round_number % 2 == 0 else reversed(ways):
                results[name].append(run_latency_parts(url, probes))
                print(f"round {round_number + 1}: {name} done", file=sys.stderr)
    print("| way | enqueue call p50 / p99 | wake-up p50 / p99 | enqueue to start p50 / p99 |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        cells = [", ".join(f"{run[label][0]:.2f} / {run[label][1]:.2f}" for run in runs)
                 for label in ("enqueue call", "wake-up", "enqueue to start")]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
