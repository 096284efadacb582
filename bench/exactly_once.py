"""The exactly-once chaos soak, bigger than the suite's, on every database, transactional and plain.

    python bench/exactly_once.py                          # 5,000 jobs, 15 s of faults, SQLite, PostgreSQL, MariaDB
    python bench/exactly_once.py --jobs 20000 --chaos-seconds 60 --backend postgres

Runs tests/system/test_exactly_once_chaos.py's soak (three worker processes, each with 4 slots, draining
jobs whose handler adds 1 to a counter row and inserts an effect row, while the chaos loop
SIGKILLs them, SIGSTOPs them past their 1.5 s lease and, on PostgreSQL and MariaDB, ends their
database sessions) with its sizes raised through EO_CHAOS_*, twice per database: with
`transactional=True`, where the test asserts one effect per job and the counter equal to the jobs,
and with `transactional=False` beside it, whose duplicates it counts and prints. PostgreSQL runs with
autovacuum on for the soak (bench/common.py), as production servers do; the test machine's is off.
A table of what each run printed comes last. A measurement and a proof: a red run is a bug.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from common import autovacuum_on

SUMMARY = re.compile(r"^(sqlite|postgres|mariadb): (transactional|plain), .*$", re.MULTILINE)


def soak(backend: str, transactional: bool, jobs: int, chaos_seconds: float, seed: int) -> tuple[int, str]:
    """(pytest's exit code, the soak's summary line) of one run."""
    env = {**os.environ, "EO_CHAOS_JOBS": str(jobs), "EO_CHAOS_SECONDS": str(chaos_seconds),
           "EO_CHAOS_SEED": str(seed), "EO_TRANSACTIONAL": "1" if transactional else "0",
           "EO_CHAOS_DRAIN_TIMEOUT": str(max(120, jobs / 10)),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.setdefault("LEASED_MARIADB_DRIVER", "pymysql")
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
               "tests/system/test_exactly_once_chaos.py", "-k", f"every_job_has_exactly_one_effect and {backend}"]
    began = time.monotonic()
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    found = SUMMARY.search(run.stdout)
    line = found.group(0) if found else "no summary: " + (run.stdout + run.stderr).strip().splitlines()[-1]
    print(f"{line}  [pytest exit {run.returncode}, {time.monotonic() - began:.0f} s]", flush=True)
    if run.returncode != 0:
        print(run.stdout[-4000:], run.stderr[-2000:], sep="\n", file=sys.stderr)
    return run.returncode, line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--chaos-seconds", type=float, default=15.0, help="faults for this long, or until done")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backend", choices=["all", "sqlite", "postgres", "mariadb"], default="all")
    options = parser.parse_args()
    backends = ["sqlite", "postgres", "mariadb"] if options.backend == "all" else [options.backend]
    results = []
    with autovacuum_on() if "postgres" in backends else contextlib.nullcontext():
        for backend in backends:
            for transactional in (True, False):
                results.append(soak(backend, transactional, options.jobs, options.chaos_seconds, options.seed))
    print("\n" + "\n".join(line for _, line in results))
    return max(code for code, _ in results)


if __name__ == "__main__":
    sys.exit(main())
