"""Writes fenced in a transaction that is not ours, one part over a database (database.py): a
transactional handler's end (leased.engine.transactional), written in the transaction its writes
are in, so that they commit together or not at all; and durable steps (TaskContext.step), each
recorded once. Each reads the job's row locked, and writes only while the lease still holds it
unexpired by the database's clock now. The end's statements are the write verbs' `finish_on`
(leases.py, or PostgreSQL's fused one), given to the constructor.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Protocol, Sequence

from leased.backends.ports import AttemptEnd
from leased.backends.sql.database import Database
from leased.jobs import Lease


class FinishOn(Protocol):
    def __call__(self, connection: Any, ends: Sequence[AttemptEnd], *, held: Mapping[Lease, Any] | None = None,
                 counted_as: str | None = None) -> tuple[list[bool], set[str]]:
        """finish()'s statements in the transaction open on `connection`: whether each end was
        written, and the queues of the steps their ends made due (to wake after the commit)."""
        ...


class FencedEnds:
    def __init__(self, database: Database, finish_on: FinishOn):
        self._database = database
        self._finish_on = finish_on

    def finish_in(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        """Write `end` in the transaction open on `connection` (one of attempt_transaction(), or a
        framework's on our database), fenced on its lease and on the lease's expiry by the
        database's clock now; never committed here. Whether it was written (False: the lease is
        gone, so roll back), and the queues of the steps it made due, to wake after the commit."""
        return self._database.in_callers(connection, lambda connection: self.finish_fenced(connection, end))

    def finish_fenced(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        lease = end.lease
        fence = self.fence(connection, lease)
        if fence is None:
            return False, set()
        # Counted in a row of the handler thread's own: concurrent handlers of one worker would
        # otherwise queue on their worker's row of the minute, each until its transaction commits.
        kept, released = self._finish_on(connection, [end], held={lease: fence},
                                          counted_as=f"{lease.worker_id}/{threading.get_native_id()}")
        return kept[0], released

    def fence(self, connection: Any, lease: Lease) -> Any:
        """The job's row, locked in the transaction on `connection`, if `lease` still holds it
        unexpired by the database's clock now; else None."""
        return self._database.execute(connection, "lease_fence", job_id=lease.job_id, attempt=lease.attempt,
                                      worker_id=lease.worker_id).fetchone()

    def record_step(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                    connection: Any = None) -> bool:
        """Record step `name` of the job `lease` holds, which ran `seconds` and returned
        `result_json`: in a transaction of its own, or in the one open on `connection` (a
        transactional handler's, or step's). False, and nothing written: the lease is gone."""
        def work(connection: Any) -> bool:
            if self.fence(connection, lease) is None:
                return False
            self._database.execute(connection, "record_durable_step", job_id=lease.job_id, name=name,
                                   attempt=lease.attempt, result=result_json, seconds=seconds)
            return True

        return self._database.in_callers(connection, work) if connection is not None else self._database.transact(work)
