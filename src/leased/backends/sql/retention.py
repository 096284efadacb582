"""Pruning, one part over a database (database.py): finished jobs deleted in short transactions,
so that a claim waits for one batch, not the pass; and the per-minute throughput rows folded
into coarser ones, then pruned.
"""

from __future__ import annotations

from typing import Any

from leased.backends.ports import PruneRule
from leased.backends.sql.database import Database
from leased.backends.sql.params import rule_params


class Retention:
    def __init__(self, database: Database):
        self._database = database
        self._execute = database.execute
        self._all = database.all

    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        def work(connection: Any) -> int:
            ids = self._all(connection, "prunable_ids", **rule_params(rule, self._database.list_param), limit=limit)
            if not ids:
                return 0
            deleted = self._execute(connection, "delete_jobs", ids=self._database.ids(ids)).rowcount
            workflows = {row["workflow_id"] for row in ids if row["workflow_id"] is not None}
            if workflows:  # a run goes once the last of its steps has
                self._execute(connection, "delete_empty_workflows",
                              workflow_ids=self._database.list_param(sorted(workflows)))
            return deleted

        return self._database.transact(work)

    def prune_throughput(self, older_than_seconds: float) -> int:
        return self._database.transact(
            lambda connection: self._execute(connection, "prune_throughput", older_than=older_than_seconds).rowcount)

    def fold_throughput(self, older_than_seconds: float) -> int:
        def work(connection: Any) -> int:
            (cutoff,) = self._all(connection, "throughput_cutoff", older_than=older_than_seconds)
            self._execute(connection, "fold_throughput", cutoff=cutoff["cutoff"])
            return self._execute(connection, "delete_folded", cutoff=cutoff["cutoff"]).rowcount

        return self._database.transact(work)
