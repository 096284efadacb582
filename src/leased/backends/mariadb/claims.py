"""MariaDB's claim: due jobs locked with FOR UPDATE SKIP LOCKED, so workers never wait on each
other's rows, then leased by id and read back (no UPDATE ... RETURNING here), in one transaction
that reclaims expired leases first when asked. Claims of limited jobs take turns under a named
lock, so that no two count the same free room (limited.py chooses what they take)."""

from __future__ import annotations

import json
from typing import Any

from leased.backends.mariadb.connections import MariaDBConnections
from leased.backends.mariadb.limited import pick_limited
from leased.backends.ports import ClaimRequest
from leased.backends.sql.database import Database
from leased.backends.sql.leases import Leases
from leased.errors import DatabaseConflict
from leased.jobs import ClaimedJob


class MariaDBClaims:
    def __init__(self, connections: MariaDBConnections, database: Database, leases: Leases):
        self._connections = connections
        self._database = database
        self._leases = leases

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        params = {"worker_id": request.worker_id, "task_names": json.dumps(list(request.task_names)),
                  "queue_names": None if request.queue_names is None else json.dumps(list(request.queue_names)),
                  "limit": request.limit}
        database = self._database

        def claim_plain(connection: Any) -> list[dict[str, Any]]:
            if request.reclaim_expired:  # in the claim's transaction, as the port promises: one, not two
                self._leases.reclaim(connection)
            return self.lease(connection, database.all(connection, "claim_ids", **params), request.worker_id)

        rows = database.transact(claim_plain)
        if len(rows) < request.limit and database.rows("limits_in_use")[0]["in_use"]:
            rows += self._claim_limited({**params, "limit": request.limit - len(rows)})
        return database.claimed(rows)

    def lease(self, connection: Any, picked: list[dict[str, Any]], worker_id: str,
              limited: bool = False) -> list[dict[str, Any]]:
        """Lease the rows `picked` (locked already) to `worker_id`; the jobs as they are now."""
        if not picked:
            return []
        execute = self._database.execute
        ids = {"job_ids": self._database.ids(picked), "worker_id": worker_id}
        execute(connection, "take_leases", **ids)
        execute(connection, "refuse_rows", job_ids=ids["job_ids"])
        if limited:
            execute(connection, "record_starts", job_ids=ids["job_ids"])
            execute(connection, "forget_old_starts")
        return self._database.all(connection, "leased_jobs", **ids)

    def _claim_limited(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Claims of limited jobs take turns under a named lock: no two count the same free room."""
        connection = self._connections.connection()
        execute = self._database.execute
        with self._connections.translated():
            if not execute(connection, "limited_claim_lock").fetchone()["locked"]:
                raise DatabaseConflict(f"{self._database.where}: another claim held the limited-claim lock too long")
        try:
            return self._database.transact(
                lambda own: self.lease(own, self.pick_limited(own, params), params["worker_id"], limited=True))
        finally:
            with self._connections.translated():
                execute(connection, "limited_claim_unlock")

    def pick_limited(self, connection: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The limited claim's choice on `connection`, in its transaction (see limited.py)."""
        return pick_limited(lambda name, **query_params: self._database.all(connection, name, **query_params), params)
