"""A fair claim's cost with one waiting key and with 10,000, on SQLite: claims of 10, timed in the process.

    PYTHONPATH=src python bench/fairness_keys.py [--jobs 50000] [--claims 500]

Each layout holds the same number of fair jobs in one queue: all under one key, or spread over
10,000 keys. It prints the median and p90 of one claim call (the claim and its pass update, in
their transaction) for each, and their ratio: stride scheduling reads at most `limit` keys and
`limit` jobs of each, so the number of keys waiting should not show (docs/howto/fairness.md).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from leased import Leased
from leased.backends.ports import ClaimRequest


def claim_times(folder: Path, keys: int, jobs: int, claims: int) -> list[float]:
    app = Leased(f"sqlite:///{folder / f'keys-{keys}.db'}")
    try:
        task = app.task(name="noop", fairness_key="{key}")(lambda key: None)
        calls = [(f"k{n % keys}",) for n in range(jobs)]
        for start in range(0, jobs, 5000):
            task.enqueue_many(calls[start:start + 5000])
        request = ClaimRequest("bench", ("noop",), None, 10)
        app.backend.claim(request)  # the connection and the statements' first preparation
        times = []
        for _ in range(claims):
            started = time.perf_counter()
            assert len(app.backend.claim(request)) == 10
            times.append(time.perf_counter() - started)
        return times
    finally:
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--claims", type=int, default=500)
    options = parser.parse_args()
    medians = {}
    with tempfile.TemporaryDirectory() as folder:
        for keys in (1, 100, 10_000):
            times = sorted(claim_times(Path(folder), keys, options.jobs, options.claims))
            medians[keys] = statistics.median(times)
            print(f"{keys:>6,} keys waiting: claim of 10 median {medians[keys] * 1000:.2f} ms, "
                  f"p90 {times[int(len(times) * 0.9)] * 1000:.2f} ms")
    print(f"10,000 keys / 1 key: {medians[10_000] / medians[1]:.2f}")


if __name__ == "__main__":
    main()
