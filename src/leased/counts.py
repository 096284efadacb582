"""How many jobs there are, cheaply: exact where an index keeps the set small, estimated where not.

Counting a million finished rows costs a read of every one of them, on every dashboard refresh and
every scrape. So the dashboard, /metrics and `leased stats` read `JobCounts`:

- pending, running and waiting: always exact, through the partial indexes the claim, the lease
  reclaim and the waiting steps use (those sets stay small however much history the table keeps);
- failed and cancelled: exact while the status has at most `EXACT_UP_TO` jobs, counted through an
  index with a LIMIT, so at most that many rows are read; above it, estimated as done is;
- done: estimated from a sample of job ids (below), unless the table is small enough that the
  sample is every id, and then exact like the rest.

The estimate probes `SAMPLE_SIZE` ids spread over the table's id range (one at random within each
equal slice, from a fixed seed: the same table gives the same figures) by primary key, and scales
each (queue, status) hit count by the range over the probes: each job had the same chance of
being probed, so the estimate is unbiased, and holes left by pruning count as misses. Its error is
about the square root of the hits: ±2% for a status that holds most of the table, more for a
small queue's share. `Leased.counts()` still counts every row exactly, for scripts and tests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from leased.jobs import JobStatus

EXACT_UP_TO = 10_000  # failed and cancelled jobs counted exactly, per status, before estimating
SAMPLE_SIZE = 2_000  # job ids probed to estimate; a table whose ids span no more is counted exactly
ACTIVE = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING, JobStatus.SLEEPING)
CAPPED = (JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class JobCounts:
    """Jobs per queue and status; `estimated` names the statuses whose figures are estimates."""

    by_queue: dict[str, dict[str, int]]  # every status, zero when none
    estimated: frozenset[str] = field(default_factory=frozenset)

    @property
    def totals(self) -> dict[str, int]:
        totals = dict.fromkeys((status.value for status in JobStatus), 0)
        for by_status in self.by_queue.values():
            for status, count in by_status.items():
                totals[status] += count
        return totals


def sample_ids(low: int, high: int, size: int = SAMPLE_SIZE) -> list[int]:
    """`size` ids from [low, high], one at random in each equal slice of it; every id when the range
    holds no more than `size`, so a small table's "estimate" is a count."""
    span = high - low + 1
    if span <= size:
        return list(range(low, high + 1))
    chance = random.Random(0)  # fixed: the same table gives the same figures on every refresh
    return [low + (span * i + int(chance.random() * span)) // size for i in range(size)]


def tally(*, active: Iterable[Mapping[str, Any]], capped: Mapping[str, int], split: Iterable[Mapping[str, Any]],
          sampled: Iterable[Mapping[str, Any]], low: int, high: int, probes: int,
          exact_up_to: int = EXACT_UP_TO) -> JobCounts:
    """Merge the reads (rows of queue_name, status, n): exact active counts; each CAPPED status
    counted up to exact_up_to + 1, and split by queue if under; the hits of `probes` ids in [low, high]."""
    span = high - low + 1
    exhaustive = probes >= span
    exact = {status.value for status in ACTIVE} | {status for status, n in capped.items() if n <= exact_up_to}
    table: dict[tuple[str, str], int] = {}
    for row in [*active, *split]:
        table[row["queue_name"], row["status"]] = row["n"]
    for row in sampled:
        if row["status"] not in exact:
            table[row["queue_name"], row["status"]] = row["n"] if exhaustive else round(row["n"] * span / probes)
    by_queue: dict[str, dict[str, int]] = {}
    for (queue, status), count in sorted(table.items()):
        by_queue.setdefault(queue, dict.fromkeys((s.value for s in JobStatus), 0))[status] = count
    estimated = frozenset() if exhaustive else frozenset(s.value for s in JobStatus) - exact
    return JobCounts(by_queue, estimated)


def format_count(count: int, estimated: bool) -> str:
    """1,234 when exact; ≈ 1.2K, ≈ 52K, ≈ 1.0M when estimated: two significant figures, no more
    than the estimate holds."""
    if not estimated:
        return f"{count:,}"
    rounded = round(count, 2 - len(str(abs(count)))) if count >= 100 else count
    for unit, size in (("M", 1_000_000), ("K", 1_000)):
        if rounded >= size:
            return f"≈ {rounded / size:.1f}{unit}" if rounded < 10 * size else f"≈ {rounded // size:,}{unit}"
    return f"≈ {rounded:,}"
