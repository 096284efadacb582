"""The write verbs a dialect may do its own way: `Writes` is what such a part answers, and
`SharedSequence` is the shared parts' way, each verb the named statements of one transaction
(leases.py, admin.py, retention.py). PostgreSQL composes its fused verbs (postgres/fused.py: each
verb one statement) or, built with fused=False, this sequence; the conformance suite runs both, so
the two cannot drift. SQLite and MariaDB compose the shared parts' verbs directly."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from leased.backends.ports import AttemptEnd, PruneRule
from leased.backends.sql.admin import Admin
from leased.backends.sql.leases import Leases
from leased.backends.sql.retention import Retention
from leased.jobs import Job, Lease, Outcome


class Writes(Protocol):
    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]: ...

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]: ...

    def finish_on(self, connection: Any, ends: Sequence[AttemptEnd], *, held: Mapping[Lease, Any] | None = None,
                  counted_as: str | None = None) -> tuple[list[bool], set[str]]:
        """finish() in a transactional handler's transaction (fenced.py), its lease read already."""
        ...

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False
                ) -> None: ...

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int: ...

    def bury_workers(self, id_prefix: str, how: str) -> int: ...

    def retry(self, job_id: int) -> Job: ...

    def cancel(self, job_id: int) -> Job: ...

    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int: ...

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int: ...

    def pause_queue(self, queue_name: str) -> bool: ...

    def resume_queue(self, queue_name: str) -> bool: ...

    def prune_batch(self, rule: PruneRule, limit: int) -> int: ...

    def fold_throughput(self, older_than_seconds: float) -> int: ...


class SharedSequence:
    """The shared parts' write verbs, as one Writes."""

    def __init__(self, leases: Leases, admin: Admin, retention: Retention):
        self.renew = leases.renew
        self.finish = leases.finish
        self.finish_on = leases.finish_on
        self.release = leases.release
        self.reclaim_expired = leases.reclaim_expired
        self.bury_workers = leases.bury_workers
        self.retry = admin.retry
        self.cancel = admin.cancel
        self.retry_failed = admin.retry_failed
        self.cancel_pending = admin.cancel_pending
        self.pause_queue = admin.pause_queue
        self.resume_queue = admin.resume_queue
        self.prune_batch = retention.prune_batch
        self.fold_throughput = retention.fold_throughput
