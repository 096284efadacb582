"""Inspection reads shared by the backends: each runs the same-named query from its own SQL file,
and these turn the rows into values. A backend provides `_rows(name, **params)`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Sequence

from leased.backends.base import PruneRule, Throughput
from leased.jobs import JobStatus


class InspectionReads:
    def _rows(self, name: str, **params: Any) -> Sequence[Any]:
        raise NotImplementedError

    def counts(self) -> dict[tuple[str, JobStatus], int]:
        return {(row["queue_name"], JobStatus(row["status"])): row["n"] for row in self._rows("counts")}

    def oldest_due(self) -> dict[str, float]:
        return {row["queue_name"]: row["seconds"] for row in self._rows("oldest_due")}

    def finished_since(self, window_seconds: float) -> dict[tuple[str, JobStatus], int]:
        rows = self._rows("finished_since", window_seconds=window_seconds)
        return {(row["queue_name"], JobStatus(row["status"])): row["n"] for row in rows}

    def task_names(self) -> list[str]:
        return [row["name"] for row in self._rows("task_names")]

    def queue_names(self) -> list[str]:
        return [row["name"] for row in self._rows("queue_names")]

    # Pausing and pruning (migration 0003).
    def paused_queues(self) -> dict[str, float]:
        return {row["queue_name"]: row["seconds"] for row in self._rows("paused_queues")}

    def throughput(self, window_seconds: float) -> list[Throughput]:
        return [Throughput(datetime.fromtimestamp(row["minute"], UTC), row["queue_name"], row["task_name"],
                           int(row["done"]), int(row["failed"]))
                for row in self._rows("throughput", window_seconds=window_seconds)]

    def count_prunable(self, rule: PruneRule) -> int:
        return self._rows("count_prunable", **self._rule_params(rule))[0]["n"]

    def _rule_params(self, rule: PruneRule) -> dict[str, Any]:
        raise NotImplementedError
