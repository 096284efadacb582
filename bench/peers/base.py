"""The adapter interface: every library is driven through these few methods.

Jobs come in three kinds, each taking a number n: "noop" (does nothing), "probe" (reports its start
time, for latency) and "nap" (sleeps `seconds`). Worker processes are started from the command line
the library documents, with settings passed in the environment.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from common import WORK, Workers, spawn

BULK_CHUNK = 1_000  # a bulk enqueue is one call per 1,000 jobs


class Unsupported(Exception):
    """The library has no such feature (e.g. no bulk enqueue API); reported as n/a with the reason."""


class Peer:
    name = "?"          # short id, used in --only and file names
    label = "?"         # as shown in the report
    store = "?"         # PostgreSQL, SQLite or Redis
    package = "?"       # distribution name, for the version
    handler = "sync"    # how its no-op handler is written: sync (threads) or async
    one_job_per_process = False  # RQ: a worker process runs one job at a time
    recovery = "?"      # what brings a crashed worker's jobs back, for the report

    def version(self) -> str:
        return metadata.version(self.package)

    def settings(self) -> str:
        """The settings that matter for throughput, for the report."""
        return ""

    # Lifecycle: a fresh store before each measurement, removed afterwards.
    def setup(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        raise NotImplementedError

    # Producing.
    def enqueue_one(self, kind: str, numbers: list[int], seconds: float = 0.0) -> None:
        """One library call per job, in a loop."""
        raise NotImplementedError

    def enqueue_bulk(self, kind: str, numbers: list[int], seconds: float = 0.0) -> None:
        """The library's bulk API, BULK_CHUNK jobs per call; Unsupported if it has none."""
        raise Unsupported("no bulk enqueue API")

    # Consuming.
    def worker_argv(self, concurrency: int, index: int) -> list[str]:
        raise NotImplementedError

    def worker_env(self) -> dict[str, str]:
        return {}

    def start_workers(self, processes: int, concurrency: int, env: dict[str, str] | None = None,
                      tag: str = "") -> Workers:
        workers = Workers()
        for index in range(processes):
            log = WORK / "logs" / f"{self.name}-{tag}-{index}.log"
            workers.processes.append(spawn(self.worker_argv(concurrency, index),
                                           {**self.worker_env(), **(env or {})}, log))
            workers.logs.append(log)
        return workers

    def count_done(self) -> int:
        """Jobs the store records as finished successfully: counted, never taken from the library."""
        raise NotImplementedError

    def crash_settings(self) -> dict[str, str]:
        """Extra worker environment for the crash-recovery workload (e.g. a short lease)."""
        return {}


def chunks(numbers: list[int], size: int = BULK_CHUNK):
    for start in range(0, len(numbers), size):
        yield numbers[start:start + size]


def scratch(name: str) -> Path:
    path = WORK / name
    path.mkdir(parents=True, exist_ok=True)
    return path
