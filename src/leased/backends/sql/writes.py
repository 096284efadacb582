"""The write verbs a dialect may do its own way, as one part: `Writes` is what such a part answers,
and `SharedSequence` is the shared body's way, each verb the named statements of one transaction
(store.py). PostgreSQL composes its fused verbs (postgres/fused.py: each verb one statement) or,
built with fused=False, this sequence; the conformance suite runs both, so the two cannot drift."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from leased.backends.ports import AttemptEnd, PruneRule
from leased.backends.sql.store import SQLStore
from leased.jobs import Job, Lease, Outcome


class Writes(Protocol):
    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]: ...

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]: ...

    def finish_on(self, connection: Any, ends: Sequence[AttemptEnd], counted_as: str | None = None
                  ) -> tuple[list[bool], set[str]]:
        """finish() in a transactional handler's transaction (SQLStore.finish_in), its lease read already."""
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
    """The shared body's write verbs on `store`, whatever its class does instead."""

    def __init__(self, store: SQLStore):
        self._store = store

    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]:
        return SQLStore.renew(self._store, leases, wait_seconds, progress)

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        return SQLStore.finish(self._store, ends)

    def finish_on(self, connection: Any, ends: Sequence[AttemptEnd], counted_as: str | None = None
                  ) -> tuple[list[bool], set[str]]:
        return SQLStore._finish_on(self._store, connection, ends, counted_as=counted_as)

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False
                ) -> None:
        SQLStore.release(self._store, leases, outcome, message, explains_expiry)

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        return SQLStore.reclaim_expired(self._store, skip_if_done_within)

    def bury_workers(self, id_prefix: str, how: str) -> int:
        return SQLStore.bury_workers(self._store, id_prefix, how)

    def retry(self, job_id: int) -> Job:
        return SQLStore.retry(self._store, job_id)

    def cancel(self, job_id: int) -> Job:
        return SQLStore.cancel(self._store, job_id)

    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int:
        return SQLStore.retry_failed(self._store, task_name, queue_name)

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int:
        return SQLStore.cancel_pending(self._store, task_name, queue_name)

    def pause_queue(self, queue_name: str) -> bool:
        return SQLStore.pause_queue(self._store, queue_name)

    def resume_queue(self, queue_name: str) -> bool:
        return SQLStore.resume_queue(self._store, queue_name)

    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        return SQLStore.prune_batch(self._store, rule, limit)

    def fold_throughput(self, older_than_seconds: float) -> int:
        return SQLStore.fold_throughput(self._store, older_than_seconds)
