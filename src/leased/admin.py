"""Values for inspection: what the dashboard, the CLI and metrics show about queues and workers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from leased.limits import QueueLimit
from leased.worker_ids import supervisor_pid

WORKER_BEAT_SECONDS = 5.0
WORKER_SILENT_AFTER = 3 * WORKER_BEAT_SECONDS  # a worker not seen for this long is shown as gone
# A lease that expires while its worker has been silent this long counts as a crash (its process
# died): longer than the network cuts and database outages a live worker rides out, so that one
# cut off for a while (its lease reclaimed meanwhile) is not counted as a crash of its job.
WORKER_GONE_AFTER = 12 * WORKER_BEAT_SECONDS


@dataclass(frozen=True, slots=True)
class ChildrenSummary:
    """A worker's children for process-isolated handlers (engine/children.py), as its row says."""

    alive: int
    started: int  # ever, by this worker
    recycled: int  # retired after max_tasks_per_child or max_memory_per_child
    crashes: dict[str, int]  # children that died mid-job, by how: a signal's name ("SIGSEGV") or "exit 3"
    rss_bytes: int  # the alive children's resident memory, as each last said

    def to_json(self) -> str:
        return json.dumps({"alive": self.alive, "started": self.started, "recycled": self.recycled,
                           "crashes": self.crashes, "rss_bytes": self.rss_bytes})

    @classmethod
    def from_json(cls, text: str | None) -> ChildrenSummary | None:
        if not text:
            return None
        data = json.loads(text)
        return cls(int(data.get("alive", 0)), int(data.get("started", 0)), int(data.get("recycled", 0)),
                   {str(how): int(count) for how, count in (data.get("crashes") or {}).items()},
                   int(data.get("rss_bytes", 0)))


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: str
    host: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    concurrency: int
    queues: list[str] | None  # None: every queue
    tasks: list[str]
    running: int
    alive: bool
    stuck_handlers: int = 0  # handler threads still running past their job's time limit, each holding a slot
    children: ChildrenSummary | None = None  # None: it has started no child (no process-isolated job yet)
    # Each task's signature as this worker registered it (leased.task_signatures); empty from older code.
    task_signatures: dict[str, str] = field(default_factory=dict)

    @property
    def supervisor_pid(self) -> int | None:
        """The `leased worker --processes N` supervisor (on the same host) it runs under, read from its id."""
        return supervisor_pid(self.id)


@dataclass(frozen=True, slots=True)
class QueueSummary:
    queue_name: str
    counts: dict[str, int]  # every status, zero when none; Overview.estimated names the estimated ones
    oldest_due_seconds: float | None  # how long the oldest due pending job has waited; None: nothing due
    done_recently: int = 0
    failed_recently: int = 0
    limit: QueueLimit | None = None  # its concurrency and rate limits, across all workers
    paused_seconds: float | None = None  # how long the queue has been paused; None: it runs

    @property
    def paused(self) -> bool:
        return self.paused_seconds is not None


@dataclass(frozen=True, slots=True)
class Overview:
    queues: list[QueueSummary]
    workers: list[WorkerInfo]
    window_seconds: float
    totals: dict[str, int] = field(default_factory=dict)
    estimated: frozenset[str] = frozenset()  # statuses whose counts are estimates (leased.counts)
    old_transactions: tuple[OldTransaction, ...] = ()  # sessions holding back vacuum (leased.horizon)


@dataclass(frozen=True, slots=True)
class OldTransaction:
    """A session of the same database whose transaction has been open longer than the app's
    old_transaction_after: while it is open, vacuum may remove no row version that died after it
    began (PostgreSQL's pg_stat_activity; its backend_xid or backend_xmin holds the horizon back)."""

    pid: int
    user: str | None  # None where the role may not see other roles' sessions (no pg_read_all_stats)
    application_name: str
    client_addr: str | None  # None: a Unix socket, or not visible
    state: str | None  # "idle in transaction", "active", ...
    open_seconds: float  # how long its transaction has been open
    query: str  # its current or last statement, on one line, cut short
