"""Workflow chaos soak: tests/system/test_workflow_chaos.py, bigger and again and again. Worker processes
are SIGKILLed at random while they drain a workflow of N parallel steps and one fan-in step; then
the test's checks: the fan-in ran to completion exactly once, after the last parent ended, seeing
every result; no step lost, stuck or run again but by a killed worker's attempt.

    python bench/workflow_chaos.py                                  # every backend, 3 rounds of 10,000 steps
    python bench/workflow_chaos.py --backend mariadb --rounds 10    # one backend, ten seeds
    python bench/workflow_chaos.py --steps 20000 --seconds 600      # kill until the last parent ends

Each round is one pytest run of the test (a fresh database, its own seed) with WF_CHAOS_* set;
prints its summary lines and a Markdown table, and exits 1 if any round failed. Run from the
repository root with the suite's databases reachable (tests/conftest.py).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/system/test_workflow_chaos.py"
BACKENDS = ["sqlite", "postgres", "mariadb"]
SUMMARY = re.compile(r"^(sqlite|postgres|mariadb): .*?(\d+) kills in ([\d.]+) s of chaos.*?all done after ([\d.]+) s; "
                     r"'could not renew' logged (\d+) times")
DETAIL = re.compile(r"^  fan-in attempts (.*?), (\d+) expired attempts in all, (\d+) steps ran twice")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=BACKENDS, action="append", help="default: all three")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--step-millis", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=600.0, help="the chaos's time bound (default: until the "
                                                                      "last parent ends)")
    parser.add_argument("--seed", type=int, default=1, help="round n runs with seed + n")
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--keep", type=Path, help="keep each round's markers and worker logs in KEEP/<backend>-<seed>")
    options = parser.parse_args()

    if options.keep:
        options.keep.mkdir(parents=True, exist_ok=True)
    rows, failures = [], 0
    for backend in options.backend or BACKENDS:
        for round_number in range(options.rounds):
            seed = options.seed + round_number
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "WF_CHAOS_STEPS": str(options.steps),
                   "WF_CHAOS_WORKERS": str(options.workers), "WF_CHAOS_CONCURRENCY": str(options.concurrency),
                   "WF_CHAOS_STEP_MILLIS": str(options.step_millis), "WF_CHAOS_SECONDS": str(options.seconds),
                   "WF_CHAOS_SEED": str(seed), "WF_CHAOS_DRAIN_TIMEOUT": str(options.drain_timeout)}
            began = time.monotonic()
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", TEST, "-k", backend,
                 "-o", f"timeout={int(options.drain_timeout * 2 + 120)}", "--durations=0",
                 *([f"--basetemp={options.keep.resolve() / f'{backend}-{seed}'}"] if options.keep else [])],
                cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.monotonic() - began
            output = run.stdout + run.stderr
            summary = next((m for line in output.splitlines() if (m := SUMMARY.match(line))), None)
            detail = next((m for line in output.splitlines() if (m := DETAIL.match(line))), None)
            tally = re.search(r"(\d+) passed", output)
            status = ("passed" if tally else "skipped") if run.returncode == 0 else "FAILED"
            failures += status == "FAILED"
            print(f"{backend} round {round_number + 1} (seed {seed}): {status} in {wall:.1f} s", flush=True)
            for line in output.splitlines():
                if SUMMARY.match(line) or DETAIL.match(line):
                    print(f"  {line.strip()}", flush=True)
            if status == "FAILED":
                print("\n".join(f"    {line}" for line in output.splitlines()[-60:]), flush=True)
            rows.append((backend, seed, status, summary, detail, wall))

    print("\n| backend | seed | steps | workers × concurrency | kills | chaos | all done | expired attempts "
          "| steps run twice | fan-in attempts | 'could not renew' | result |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for backend, seed, status, summary, detail, wall in rows:
        kills, chaos, done, renew = (summary[2], f"{summary[3]} s", f"{summary[4]} s", summary[5]) if summary \
            else ("?", "?", f"({wall:.0f} s wall)", "?")
        expired, twice, attempts = (detail[2], detail[3], detail[1]) if detail else ("?", "?", "?")
        print(f"| {backend} | {seed} | {options.steps:,} | {options.workers} × {options.concurrency} | {kills} "
              f"| {chaos} | {done} | {expired} | {twice} | {attempts} | {renew} | {status} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
