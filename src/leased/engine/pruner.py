"""The pruner: a worker's service that deletes finished jobs past their retention.

Small batches (BATCH_SIZE rows, one short transaction each, and a rest of REST_FACTOR times the
batch's own time between them), so claims interleave with a pass and SQLite's single writer is
never held for long.
Only finished rows are read or deleted, so it never takes a lock a claim could wait for. Each
worker runs a pass at most every PRUNE_INTERVAL (with jitter, so a fleet started at once does not
prune at once); on PostgreSQL an advisory lock lets one pruner of a schema run at a time and the
others skip their turn.

Per-task retention: a worker knows its own tasks' settings, so a pass runs one delete per group
of overridden tasks and one default delete for every other task. A task that only other workers
know follows the application's retention in this worker's passes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import defaultdict
from datetime import timedelta
from typing import Mapping

from leased.backends.ports import PruneRule, RuntimePort
from leased.engine.retrying import is_transient
from leased.jobs import JobStatus
from leased.retention import FINISHED, Retention

log = logging.getLogger("leased.worker")

BATCH_SIZE = 1_000
PRUNE_INTERVAL = 300.0  # seconds between a worker's passes, give or take JITTER
JITTER = 0.2
FIRST_PASS_WITHIN = 60.0  # a worker's first pass starts at a random moment within this
# Between batches, rest this many times as long as the batch took: a pass then holds SQLite's one
# writer (or PostgreSQL's disk) at most a tenth of the time. Measured (bench/prune_under_load.py):
# resting only as long as the batch took halved a SQLite worker's claims while a pass ran.
REST_FACTOR = 9
MIN_REST = 0.01  # between batches, at least
THROUGHPUT_RETENTION = timedelta(days=30)  # how long the per-minute counts keep their minutes
# After this, a minute's count rows of each worker are summed into one per queue and task: only
# the minutes workers may still be counting into keep a row per worker.
FOLD_COUNTS_AFTER = timedelta(minutes=10)


def prune_rules(retention: Retention, overrides: Mapping[str, Mapping[JobStatus, timedelta | None]]
                ) -> list[PruneRule]:
    """One rule per status and retention period: the tasks that override it, grouped by period,
    then the application's default for every other task. None (keep forever) makes no rule."""
    rules = []
    for status in FINISHED:
        default = retention.keep(status)
        by_period: dict[timedelta | None, list[str]] = defaultdict(list)
        for task_name, override in sorted(overrides.items()):
            if status in override and override[status] != default:
                by_period[override[status]].append(task_name)
        for keep, task_names in by_period.items():
            if keep is not None:
                rules.append(PruneRule(status, keep.total_seconds(), task_names=tuple(task_names)))
        if default is not None:
            excepted = tuple(name for names in by_period.values() for name in names)
            rules.append(PruneRule(status, default.total_seconds(), except_task_names=tuple(sorted(excepted))))
    return rules


def older_than_rules(older_than_seconds: float) -> list[PruneRule]:
    """`leased prune --older-than`: one cutoff for every finished status and every task."""
    return [PruneRule(status, older_than_seconds) for status in FINISHED]


def prune(backend: RuntimePort, rules: list[PruneRule], *, batch_size: int = BATCH_SIZE,
          stop: threading.Event | None = None) -> dict[str, int] | None:
    """One pass: jobs deleted per status, or None if another process was pruning (PostgreSQL)."""
    stop = stop or threading.Event()
    deleted = {status.value: 0 for status in FINISHED}
    with backend.pruning() as allowed:
        if not allowed:
            return None
        for rule in rules:
            while not stop.is_set():
                started = time.monotonic()
                count = backend.prune_batch(rule, batch_size)
                deleted[rule.status.value] += count
                if count < batch_size:
                    break
                stop.wait(max(MIN_REST, REST_FACTOR * (time.monotonic() - started)))
        if not stop.is_set():
            backend.prune_throughput(THROUGHPUT_RETENTION.total_seconds())
            backend.fold_throughput(FOLD_COUNTS_AFTER.total_seconds())
    return deleted


def count_prunable(backend: RuntimePort, rules: list[PruneRule]) -> dict[str, int]:
    """What a pass would delete now, per status (`leased prune --dry-run`)."""
    counts = {status.value: 0 for status in FINISHED}
    for rule in rules:
        counts[rule.status.value] += backend.count_prunable(rule)
    return counts


class Pruner:
    def __init__(self, backend: RuntimePort, rules: list[PruneRule], *, interval: float = PRUNE_INTERVAL,
                 batch_size: int = BATCH_SIZE):
        self.backend = backend
        self.rules = rules
        self.interval = interval
        self.batch_size = batch_size

    async def run(self, worker_id: str) -> None:
        """Prune now and then until cancelled; a database outage only costs a turn."""
        stop = threading.Event()
        try:
            await asyncio.sleep(random.uniform(0, min(FIRST_PASS_WITHIN, self.interval)))
            while True:
                try:
                    deleted = await asyncio.to_thread(prune, self.backend, self.rules, batch_size=self.batch_size,
                                                      stop=stop)
                except Exception as error:
                    if not is_transient(error):
                        raise
                    log.warning("worker %s: pruning skipped this turn: %s", worker_id, error)
                else:
                    if deleted and any(deleted.values()):
                        log.info("worker %s pruned finished jobs: %s", worker_id,
                                 ", ".join(f"{count} {status}" for status, count in deleted.items() if count))
                await asyncio.sleep(self.interval * random.uniform(1 - JITTER, 1 + JITTER))
        finally:
            stop.set()  # a batch in flight on its thread ends the pass when it returns
