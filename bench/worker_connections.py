"""How many PostgreSQL sessions a `leased worker` process holds, idle and under load, at
--concurrency 1, 10 and 100: the figures docs/reliability.md ("Many hosts") gives.

    sudo PYTHONPATH=src python bench/worker_connections.py [--rounds 8] [--jobs 2000]

Needs root and `ip`: each worker runs in a network namespace of its own (tests/hosts.py), reaching
the test PostgreSQL ($LEASED_TEST_POSTGRES_URL, default postgresql://postgres@127.0.0.1:5432/test)
through its host's relay, in a fresh schema. Each round enqueues --jobs short jobs, which the three
workers share; a sampler counts each worker's sessions in pg_stat_activity (by the application name
its URL gives) every 10 ms. Prints, after each round, the most sessions each worker has had so far,
and the relay's count of the connections open from each host, which agrees when nothing is hidden.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))

import hosts  # tests/hosts.py
import psycopg
from paths import PROGRAMS  # tests/paths.py: where hosts_app.py is

from leased import Leased
from leased.testing.plugin import postgres_schema

SERVER_URL = os.environ.get("LEASED_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
LEVELS = (1, 10, 100)


def sessions(connection: psycopg.Connection) -> dict[str, int]:
    return dict(connection.execute(
        "SELECT application_name, count(*) FROM pg_stat_activity WHERE application_name LIKE 'bench-host-%'"
        " GROUP BY 1").fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2000)
    arguments = parser.parse_args()
    problem = hosts.missing()
    if problem:
        sys.exit(problem)
    markers = Path(tempfile.mkdtemp(prefix="leased-connections-"))
    source = os.environ.get("PYTHONPATH") or str(HERE.parent / "src")
    with postgres_schema(SERVER_URL) as url, hosts.worker_hosts(len(LEVELS)) as (machines, relay):
        app = Leased(url)
        app.migrate()
        hold = app.task(name="hold", lease=2.0, takes_context=True, max_attempts=3)(lambda context, mode: None)
        workers = []
        try:
            for host, level in zip(machines, LEVELS, strict=True):
                env = {**os.environ, "LEASED_DATABASE_URL": f"{host.url(url)}&application_name=bench-host-{level}",
                       "HOSTS_HOST": host.name, "HOSTS_MARKERS": str(markers),
                       "PYTHONPATH": os.pathsep.join([str(PROGRAMS), str(TESTS), str(Path(source).resolve())])}
                workers.append(subprocess.Popen(
                    host.command(sys.executable, "-m", "leased.cli.main", "worker", "hosts_app:app",
                                 "--concurrency", str(level), "--poll-interval", "0.2s"),
                    cwd=PROGRAMS, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
            while len(app.workers()) < len(LEVELS):
                time.sleep(0.05)
            peaks: dict[str, int] = {}
            stopping = threading.Event()

            def sample() -> None:
                with psycopg.connect(url, autocommit=True) as connection:
                    while not stopping.wait(0.01):
                        for name, count in sessions(connection).items():
                            peaks[name] = max(count, peaks.get(name, 0))

            sampler = threading.Thread(target=sample)
            sampler.start()
            time.sleep(1)
            print(f"idle: {dict(sorted(peaks.items()))}", flush=True)
            for round_number in range(arguments.rounds):
                hold.enqueue_many([("quick",)] * arguments.jobs)
                while app.counts()["default"]["done"] < arguments.jobs * (round_number + 1):
                    time.sleep(0.05)
                print(f"after round {round_number + 1}: most sessions {dict(sorted(peaks.items()))}; "
                      f"open through each host's link {[relay.open[host.gateway] for host in machines]}", flush=True)
            stopping.set()
            sampler.join()
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait(60)
            app.close()


if __name__ == "__main__":
    main()
