"""Chaos soak: drain N jobs with worker processes that are SIGKILLed (and, on PostgreSQL, cut off
from the database) at random, then check every job and every execution.

    python bench/chaos_soak.py                                   # every backend, 20,000 jobs each
    python bench/chaos_soak.py --backend mariadb --jobs 5000     # MariaDB, a fresh database per run
    python bench/chaos_soak.py --backend postgres --jobs 20000 --workers 4 --seconds 60

The handler records each execution in a table of its own; the checker then demands: every job done
(or failed by design), none lost, every done job's final attempt executed, and every job that ran
twice did so only because an attempt expired or lost its lease on a worker that was killed or cut
off. Prints a Markdown table; exits 1 if any invariant failed. The machinery is tests/chaos.py,
which tests/system/test_chaos.py runs briefly in the suite.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import chaos

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
MARIADB_URL = "mariadb://root@127.0.0.1:3306/mysql"  # any database: the soak makes its own
BACKENDS = ["sqlite", "postgres", "mariadb"]


def soak(backend: str, options: argparse.Namespace, folder: Path) -> chaos.Result:
    settings = {"jobs": options.jobs, "workers": options.workers, "concurrency": options.concurrency,
                "seconds": options.seconds, "max_kills": options.max_kills,
                "pace": (options.pace_min, options.pace_max),
                "lease": options.lease, "seed": options.seed, "drain_timeout": options.drain_timeout, "progress": True}
    log_dir = folder / f"logs-{backend}"
    if backend == "sqlite":
        return chaos.run(chaos.Settings("sqlite", f"sqlite:///{folder / 'chaos.db'}", log_dir, **settings))
    if backend == "mariadb":
        return soak_mariadb(options, log_dir, settings)
    import psycopg

    schema = f"leased_chaos_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(options.postgres_url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in options.postgres_url else "?"
    url = f"{options.postgres_url}{separator}options={quote(f'-csearch_path={schema}')}"
    try:
        return chaos.run(chaos.Settings("postgres", url, log_dir, **settings))
    finally:
        with psycopg.connect(options.postgres_url, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


def soak_mariadb(options: argparse.Namespace, log_dir: Path, settings: dict) -> chaos.Result:
    """The soak in a database of its own (MariaDB has no schemas inside a database), dropped afterwards."""
    from leased.backends.mariadb.backend import connect_arguments
    from leased.backends.mariadb.driver import DRIVER

    database = f"leased_chaos_{uuid.uuid4().hex[:8]}"
    server = DRIVER.connect(**connect_arguments(options.mariadb_url)[0])
    try:
        server.cursor().execute(f"CREATE DATABASE `{database}`")
        url = f"{options.mariadb_url.rsplit('/', 1)[0]}/{database}"
        return chaos.run(chaos.Settings("mariadb", url, log_dir, **settings))
    finally:
        server.cursor().execute(f"DROP DATABASE IF EXISTS `{database}`")
        server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8, help="handler slots per worker process")
    parser.add_argument("--seconds", type=float, default=60.0, help="time bound of the chaos loop")
    parser.add_argument("--max-kills", type=int, default=40, help="count bound of the chaos loop")
    parser.add_argument("--pace-min", type=float, default=0.5, help="least seconds between kills")
    parser.add_argument("--pace-max", type=float, default=2.5, help="most seconds between kills")
    parser.add_argument("--lease", type=float, default=1.5, help="lease in seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument("--mariadb-url", default=MARIADB_URL,
                        help="a URL on the server; the soak creates and drops a database of its own")
    parser.add_argument("--keep-logs", action="store_true", help="keep the worker logs even when all is well")
    options = parser.parse_args()

    results = []
    folder = Path(tempfile.mkdtemp(prefix="leased-chaos-"))
    for backend in (BACKENDS if options.backend == "all" else [options.backend]):
        print(f"{backend}: {options.jobs:,} jobs, {options.workers} workers × {options.concurrency}, "
              f"chaos for up to {options.seconds:g} s / {options.max_kills} kills", flush=True)
        results.append(soak(backend, options, folder))
    print()
    print(chaos.HEADER)
    print(chaos.RULE)
    for result in results:
        print(chaos.table_row(result))
    print()
    for result in results:
        print(chaos.details(result))
    ok = all(result.ok for result in results)
    if ok and not options.keep_logs:
        shutil.rmtree(folder, ignore_errors=True)
    kept = "" if ok and not options.keep_logs else f" (worker logs kept in {folder})"
    print(("\nall invariants hold" if ok else "\nINVARIANTS FAILED") + kept)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
