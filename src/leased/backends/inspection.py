"""Inspection reads shared by the backends: each runs the same-named query from its own SQL file,
and these turn the rows into values. A backend provides `_rows(name, **params)`."""

from __future__ import annotations

from typing import Any, Sequence

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

    def count_jobs(self, status: JobStatus | None, task_name: str | None, queue_name: str | None) -> int:
        return self._rows("count_jobs", status=status and status.value, task_name=task_name,
                          queue_name=queue_name)[0]["n"]
