"""PostgreSQL's claim: FOR UPDATE SKIP LOCKED over the due set (migrations 0018, 0021), so workers
never wait on each other's rows; one statement on a connection set up for claims, with the reclaim
of expired leases and the lock that serializes claims of limited jobs in its round trip when asked.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import psycopg

from leased.admin import WORKER_GONE_AFTER
from leased.backends.ports import ClaimRequest
from leased.backends.postgres.connections import DictConnection, DictCursor, PostgresConnections, one
from leased.backends.postgres.outages import described
from leased.backends.postgres.queries import QUERIES
from leased.jobs import ClaimedJob

LOOK_FOR_LIMITS_SECONDS = 1.0
log = logging.getLogger("leased.postgres")


def reclaim_params(*, steps: bool, spacing: float | None = None, buried: tuple[str, str] | None = None
                   ) -> dict[str, Any]:
    """reclaim_expired's: `buried` is (worker id prefix, how they died) of workers a supervisor saw die."""
    return {"steps": steps, "spacing": spacing, "silent_after": WORKER_GONE_AFTER,
            "buried_prefix": buried and buried[0], "buried_how": buried and buried[1]}


def rotate_due(connection: DictConnection) -> None:
    """The due set's oldest generation truncated, if it may be (migration 0018), after each
    reclaim (once a second per worker, its turn or not), once the reclaim has committed: a
    rotation that fails costs its turn, never the jobs just reclaimed or claimed."""
    try:
        connection.execute(QUERIES["rotate_due"])
    except psycopg.Error as error:
        log.warning("the due set's rotation failed, to be tried again in a second: %s", described(error))


def _reclaim_first(connection: DictConnection) -> DictCursor:
    """A claim's reclaim, at the start of its transaction: asked for by its caller, so it takes no turn."""
    return connection.execute(QUERIES["fused_reclaim_expired"], reclaim_params(steps=False))


def _split_stale(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """A claim's rows, and its count of due rows that did not hold (a row of its own, id NULL,
    when it claimed nothing): see claim in queries.sql."""
    return [row for row in rows if row["id"] is not None], rows[0]["stale_due_rows"] if rows else 0


class PostgresClaims:
    """`claim` of the runtime port. `claimed` turns rows into jobs (the database's, sql/database.py); `reclaim_steps`
    fails the workflow steps a claim's reclaim left, and settles their children (see reclaim_expired
    in queries.sql); `wake_sleepers` is the WaitPort's, which a claim that reclaims runs first."""

    def __init__(self, connections: PostgresConnections, claimed: Callable[[list[Any]], list[ClaimedJob]],
                 reclaim_steps: Callable[[], int], wake_sleepers: Callable[[], int]):
        self._connections = connections
        self._claimed = claimed
        self._reclaim_steps = reclaim_steps
        self._wake_sleepers = wake_sleepers
        # Whether limited jobs may wait, as last seen: while they do, every claim takes the lock that
        # serializes claims of limited jobs. The plain claim is safe whatever this says: it takes no
        # limited job. A short plain claim looks again, and a full one once a second.
        self.limits_in_use = False
        self._look_for_limits_at = 0.0  # monotonic: when a full plain claim looks next
        self.due_set_mended = False  # whether this backend's first claim has mended the due set

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        params = {"worker_id": request.worker_id, "task_names": list(request.task_names),
                  "queue_names": None if request.queue_names is None else list(request.queue_names),
                  "limit": request.limit}
        if not self.due_set_mended:
            self._mend_due_set()
        if request.reclaim_expired:  # as reclaim_expired does: sleepers whose wait has ended, claimable now
            self._wake_sleepers()
        with self._connections.connection(for_claims=True) as connection:
            # The lease runs from the claim statement, not from the call: the wait for a connection
            # (through a failover, seconds) must not eat into it (see ClaimedJob.lease_from).
            lease_from = time.monotonic()
            rows, stale = self._claim_pass(connection, params, request.reclaim_expired, lease_from)
            # A claim that met due rows that do not hold deleted them (migration 0021): claim again at
            # once, rather than take a short claim for an empty queue and nap beside pending jobs.
            dropped = stale
            while stale and len(rows) < request.limit:
                more, stale = self._claim_pass(connection, {**params, "limit": request.limit - len(rows)}, False,
                                               lease_from)
                rows += more
                dropped += stale
            if request.reclaim_expired:  # a caller's claim that reclaims (the worker reclaims beside its claims)
                rotate_due(connection)
        if dropped:
            log.warning("dropped %d due rows whose jobs were gone or had moved (written by a TRUNCATE, an older "
                        "release of leased or writes with triggers off); claimed again at once", dropped)
        jobs = self._claimed(rows)
        for job in jobs:
            job.lease_from = lease_from
        return jobs

    def _claim_pass(self, connection: DictConnection, params: dict[str, Any], reclaim: bool, lease_from: float
                    ) -> tuple[list[dict[str, Any]], int]:
        """One claim: the plain one, and the limited one while limited jobs wait. Returns the rows
        claimed and how many due rows that did not hold it deleted (see claim in queries.sql)."""
        if self.limits_in_use:
            return _split_stale(self._claim_limited(connection, params, reclaim))
        # Whether limited jobs wait: asked by a claim with slots to spare, and once a second by a
        # full one, which would otherwise never look.
        look = reclaim or lease_from >= self._look_for_limits_at
        plain, in_use = self._claim_plain(connection, params, reclaim, look)
        rows, stale = _split_stale(plain)
        if look:
            self._look_for_limits_at = lease_from + LOOK_FOR_LIMITS_SECONDS
        if len(rows) < params["limit"] and in_use is None:  # slots to spare: look for limited jobs
            in_use = one(connection.execute(QUERIES["limits_in_use"]))["in_use"]
        if in_use:
            self.limits_in_use = True
            if len(rows) < params["limit"]:
                limited, more_stale = _split_stale(
                    self._claim_limited(connection, {**params, "limit": params["limit"] - len(rows)}, False))
                rows += limited
                stale += more_stale
        return rows, stale

    def _mend_due_set(self) -> None:
        """The due set made exact again at this process's first claim (migration 0021): rows that do
        not hold dropped, and rows added for pending jobs written with triggers off, which no claim
        could otherwise find. It reads the whole jobs table, so once per backend, and on a connection
        for calls: the claims' settings rule out the sequential scan it wants."""
        mended = self._connections.one("mend_due")
        self.due_set_mended = True
        if mended["dropped"] or mended["added"]:
            log.warning("the due set was out of step with the jobs (a TRUNCATE, an older release of leased, or writes "
                        "with triggers off): dropped %d rows, added %d for pending jobs that had none",
                        mended["dropped"], mended["added"])

    @contextmanager
    def _claim_transaction(self, connection: DictConnection) -> Iterator[None]:
        """A claim's statements as one transaction and one round trip. Behind a pooler the claim
        settings come first, scoped to the transaction: the session they would be set on is not ours."""
        with connection.pipeline(), connection.transaction():
            if self._connections.pools.behind_pooler:
                connection.execute(QUERIES["claim_settings"], {"for_transaction": True})
            yield

    def _claim_plain(self, connection: DictConnection, params: dict[str, Any], reclaim: bool,
                     look_for_limits: bool) -> tuple[list[dict[str, Any]], bool | None]:
        """The claim of jobs no limit holds, after a reclaim if asked; and whether limited jobs wait,
        if asked (None when not)."""
        if not (reclaim or look_for_limits or self._connections.pools.behind_pooler):
            return connection.execute(QUERIES["claim"], params).fetchall(), None
        with self._claim_transaction(connection):
            reclaimed = _reclaim_first(connection) if reclaim else None
            claimed = connection.execute(QUERIES["claim"], params)
            in_use = connection.execute(QUERIES["limits_in_use"]) if look_for_limits else None
        self._steps_to_reclaim(reclaimed)
        return claimed.fetchall(), None if in_use is None else one(in_use)["in_use"]

    def _steps_to_reclaim(self, reclaimed: DictCursor | None) -> None:
        """After a claim's reclaim: fail the steps it left (see fused_reclaim_expired in queries.sql)."""
        if reclaimed is not None and one(reclaimed)["steps_left"]:
            self._reclaim_steps()

    def _claim_limited(self, connection: DictConnection, params: dict[str, Any], reclaim: bool
                       ) -> list[dict[str, Any]]:
        """Claim limited and plain jobs alike, in claim order, under the lock that serializes
        claims of limited jobs (see queries.sql); one round trip."""
        with self._claim_transaction(connection):
            reclaimed = _reclaim_first(connection) if reclaim else None
            connection.execute(QUERIES["limited_claim_lock"])
            claimed = connection.execute(QUERIES["claim_limited"], params)
            in_use = connection.execute(QUERIES["limits_in_use"])
        self._steps_to_reclaim(reclaimed)
        self.limits_in_use = one(in_use)["in_use"]
        return claimed.fetchall()
