"""Enqueue-to-start latency in two parts: the enqueue call itself, and from its return to the handler's start.

    python bench/latency_parts.py                                   # a temporary SQLite file
    python bench/latency_parts.py --database postgresql://postgres@127.0.0.1:5432/scratch
    PYTHONPATH=../other-checkout/src python bench/latency_parts.py  # another version of leased, same machine

One `leased worker` process (concurrency 10) waits idle; this process enqueues a probe job, waits
for the handler to report its start (a datagram with its monotonic time), then sleeps `--gap`, as
workload 3 of bench/run.py does. What it reports: p50 and p99 of the enqueue call, of the wake-up
(enqueue returned to handler started) and of the sum. The worker imports leased as this process
does, so PYTHONPATH measures another checkout: the way to tell a change in the code from a change
of machine. A PostgreSQL database should be a scratch one: its jobs are deleted first.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from leased import Leased

app = Leased(os.environ.get("LATENCY_PARTS_URL", "sqlite:///unused.db"))
_reporter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


@app.task(name="bench.latency_probe")
def probe(n: int) -> None:
    _reporter.sendto(f"{n} {time.monotonic()}".encode(), ("127.0.0.1", int(os.environ["LATENCY_PARTS_PORT"])))


def percentile(values: list[float], share: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * share))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", help="default: a temporary SQLite file")
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between a probe's start and the next enqueue")
    options = parser.parse_args()
    url = options.database or f"sqlite:///{Path(tempfile.mkdtemp()) / 'latency.db'}"
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(30)
    os.environ.update(LATENCY_PARTS_URL=url, LATENCY_PARTS_PORT=str(receiver.getsockname()[1]))
    producer = Leased(url)
    task = producer.task(name="bench.latency_probe")(probe.func)
    if url.startswith("postgres"):
        with producer.backend.connection() as connection:
            connection.execute("DELETE FROM leased_jobs")
    worker = subprocess.Popen([sys.executable, "-m", "leased.cli.main", "worker", "latency_parts:app",
                               "--concurrency", "10", "--log-level", "warning"], cwd=Path(__file__).parent)
    try:
        task.enqueue(-1)  # the worker is up and has claimed once
        receiver.recvfrom(100)
        time.sleep(1.0)  # idle, as workload 3
        calls, wakes = [], []
        for n in range(options.probes):
            before = time.monotonic()
            task.enqueue(n)
            returned = time.monotonic()
            started = float(receiver.recvfrom(100)[0].split()[1])
            calls.append((returned - before) * 1000)
            wakes.append((started - returned) * 1000)
            time.sleep(options.gap)
    finally:
        worker.terminate()
        worker.wait(30)
        producer.close()
    totals = [call + wake for call, wake in zip(calls, wakes, strict=True)]
    for label, values in (("enqueue call", calls), ("wake-up", wakes), ("enqueue to start", totals)):
        print(f"{label:17} p50 {percentile(values, 0.5):6.2f} ms   p99 {percentile(values, 0.99):6.2f} ms")


if __name__ == "__main__":
    main()
