"""MariaDB (10.6+): many workers on many hosts, through the driver driver.py names (PyMySQL or mysqlclient).

Every transaction runs in READ COMMITTED: REPEATABLE READ's gap locks make concurrent claims
deadlock on the due index. Claims lock their rows with FOR UPDATE SKIP LOCKED, so workers never
wait on each other's rows. UPDATE has no RETURNING here, so a write that must know what it changed
locks those rows first, changes them by id and reads them back, in one transaction. A deadlock or
a lock wait timeout rolls the transaction back as DatabaseConflict, and the shared body runs it
again (sql/store.py, CONFLICT_RETRIES). Times come from the server's clock with microseconds.
"""

from __future__ import annotations

import json
import socket
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Callable, Iterator, Sequence, TypeVar

from leased.admin import WORKER_SILENT_AFTER
from leased.backends import capabilities
from leased.backends.mariadb import driver
from leased.backends.mariadb.connections import MariaDBConnections, is_missing_table
from leased.backends.mariadb.fair import pick_fair
from leased.backends.mariadb.limited import pick_limited
from leased.backends.mariadb.server import (ER_DUP_ENTRY, KEY_INDEX, MIGRATOR, QUERIES, connect_arguments,
                                            epoch, errno, packet_problem, refused_by, statement_bytes, time_value)
from leased.backends.ports import ClaimRequest
from leased.backends.sql.callers import wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.backends.sql.store import SQLStore
from leased.backends.sql.wakeups import DatagramListener, Waker
from leased.clock import Clock
from leased.errors import ConfigurationError, DatabaseConflict, PayloadError
from leased.jobs import ClaimedJob, Job, NewJob
from leased.payloads import decode

# What tests, the pytest plugin and backends/__init__.py import from here.
__all__ = ["MIGRATOR", "QUERIES", "MariaDBBackend", "connect_arguments"]

T = TypeVar("T")


class MariaDBBackend(SQLStore):
    capabilities = capabilities.MARIADB

    def __init__(self, url: str):
        self.connections = MariaDBConnections(url)
        self._where = self.connections.where
        self._waker = Waker(self._wake_ports)
        self._host = socket.gethostname()

    def __repr__(self) -> str:
        return f"MariaDBBackend({self._where})"

    # The dialect's connections (connections.py).
    def _connection(self) -> Any:
        return self.connections.connection()

    def _transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                     ) -> AbstractContextManager[Any]:
        return self.connections.transaction(wait_seconds, one_statement)

    def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return self.connections.rows(name, **params)

    def _execute(self, connection: Any, name: str, /, **params: Any) -> Any:
        return self.connections.execute(connection, name, **params)

    def attempt_transaction(self) -> AbstractContextManager[Any]:
        return self.connections.attempt_transaction()

    def close(self) -> None:
        self.connections.close()

    @property
    def clock(self) -> Clock:
        """What leased_now() adds to the server's clock, on our sessions and callers' (see leased.clock)."""
        return self.connections.clock

    def _wake_ports(self) -> list[int]:
        rows = self._rows("wake_ports", host=self._host, silent_after=WORKER_SILENT_AFTER)
        return [row["wake_port"] for row in rows]

    def listener(self) -> DatagramListener:
        """No LISTEN in MariaDB: workers on the producer's host hear a datagram (as on SQLite);
        workers elsewhere poll."""
        return DatagramListener()

    # How rows hold times and JSON (epoch seconds, JSON text), for the shared reads.
    _to_time = staticmethod(time_value)
    _from_json = staticmethod(decode)

    def _time_in(self, value: Any) -> float:
        return value.timestamp()

    def _list_param(self, values: Sequence[Any]) -> str:
        return json.dumps(list(values))

    # Runtime.
    def _in_callers(self, connection: Any, work: Callable[[Any], T]) -> T:
        if driver.connection_driver(connection) is None:
            raise ConfigurationError(
                wrong_connection(connection, "pymysql.Connection or MySQLdb.Connection", "MariaDB"))
        self.connections.check_server(connection)
        self.connections.check_reach(connection)
        with self.connections.translated():  # the caller's transaction: we never commit it
            self.connections.set_clock(connection)
            return work(connection)

    def _insert_rows(self, connection: Any, jobs: Sequence[NewJob]) -> list[tuple[Any, ...]]:
        """The rows inserted; none for a job whose key a pending job holds. The duplicate-key error
        rolls back its statement only (InnoDB), so a batch that met one goes again job by job, in
        the transaction a batch with keys always has (needs_no_transaction)."""
        statement, params = insert_statement(QUERIES, jobs, epoch)
        size = statement_bytes(statement, params)
        if self.connections.max_packet is not None and size > self.connections.max_packet:
            raise PayloadError(f"{self._where}: {packet_problem(size, self.connections.max_packet)}; nothing was written")
        try:
            with driver.tuple_cursor(connection) as cursor:
                cursor.execute(statement, params)
                return list(cursor.fetchall())
        except driver.IntegrityError as error:
            if not refused_by(error, KEY_INDEX):
                raise
        if len(jobs) == 1:
            return []
        return [row for job in jobs for row in self._insert_rows(connection, [job])]

    def _pending_with_key(self, connection: Any, key: str) -> dict[str, Any] | None:
        with driver.dict_cursor(connection) as cursor:
            cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key})
            return cursor.fetchone()

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        params = {"worker_id": request.worker_id, "task_names": json.dumps(list(request.task_names)),
                  "queue_names": None if request.queue_names is None else json.dumps(list(request.queue_names)),
                  "limit": request.limit}

        def claim_plain(connection: Any) -> list[dict[str, Any]]:
            if request.reclaim_expired:  # in the claim's transaction, as the port promises: one, not two
                self._reclaim(connection)
            return self._lease(connection, self._all(connection, "claim_ids", **params), request.worker_id)

        rows = self._transact(claim_plain)
        if len(rows) < request.limit and self._rows("limits_in_use")[0]["in_use"]:
            rows += self._claim_limited({**params, "limit": request.limit - len(rows)})
        if len(rows) < request.limit and self._rows("fairness_in_use")[0]["in_use"]:
            fair = {**params, "limit": request.limit - len(rows)}
            rows += self._claim_under_lock(lambda connection: self._lease_fair(connection, fair))
        return self._claimed(rows)

    def _lease(self, connection: Any, picked: list[dict[str, Any]], worker_id: str,
               limited: bool = False) -> list[dict[str, Any]]:
        if not picked:
            return []
        ids = {"job_ids": self._ids(picked), "worker_id": worker_id}
        self._execute(connection, "take_leases", **ids)
        self._execute(connection, "refuse_rows", job_ids=ids["job_ids"])
        if limited:
            self._execute(connection, "record_starts", job_ids=ids["job_ids"])
            self._execute(connection, "forget_old_starts")
        return self._all(connection, "leased_jobs", **ids)

    def _release(self, connection: Any, job_ids: str) -> set[str]:
        self._execute(connection, "release_steps", job_ids=job_ids)  # no UPDATE ... RETURNING here
        return {row["queue_name"] for row in self._all(connection, "released_queues", job_ids=job_ids)}

    def _claim_limited(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self._claim_under_lock(
            lambda own: self._lease(own, self.pick_limited(own, params), params["worker_id"], limited=True))

    def _lease_fair(self, connection: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Fair jobs (fair.py), leased, and their keys' passes moved on, in one transaction."""
        picked = pick_fair(lambda name, **query_params: self._all(connection, name, **query_params), params)
        rows = self._lease(connection, picked, params["worker_id"], limited=True)
        if rows:
            self._execute(connection, "advance_fair_keys", job_ids=self._ids(rows))
        return rows

    def _claim_under_lock(self, claim: Callable[[Any], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Claims of limited or fair jobs take turns under a named lock: no two count the same free
        room, nor read the same passes."""
        connection = self.connections.connection()
        with self.connections.translated():
            if not self._execute(connection, "limited_claim_lock").fetchone()["locked"]:
                raise DatabaseConflict(f"{self._where}: another claim held the limited-claim lock too long")
        try:
            return self._transact(claim)
        finally:
            with self.connections.translated():
                self._execute(connection, "limited_claim_unlock")

    def pick_limited(self, connection: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The limited claim's choice on `connection`, in its transaction (see limited.py)."""
        return pick_limited(lambda name, **query_params: self._all(connection, name, **query_params), params)

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[..., list[dict[str, Any]]]]:
        with self.connections.translated():
            connection = self.connections.connection()
            self._execute(connection, "why_snapshot")  # one consistent read, until the commit
            try:
                yield lambda name, **params: self._all(connection, name, **params)
            finally:
                connection.commit()

    # Periodic jobs: the shared ScheduleStore, on a transaction of ours.
    def _ticks_enqueued(self, jobs: Sequence[Job]) -> None:
        self.wake({job.queue_name for job in jobs})

    # Limits per queue.
    # Pausing queues, and pruning finished jobs.
    @contextmanager
    def pruning(self) -> Iterator[bool]:
        """Holds the pruners' named lock on this thread's connection while the pass runs."""
        connection = self.connections.connection()
        with self.connections.translated():
            locked = bool(self._execute(connection, "try_prune_lock").fetchone()["locked"])
        try:
            yield locked
        finally:
            if locked:
                with self.connections.translated():
                    self._execute(connection, "prune_unlock")

    # Schema: the shared runner (MIGRATOR), under its named lock, on a connection of ours that
    # autocommits: a transaction would not hold DDL.
    _migrator = MIGRATOR

    @contextmanager
    def _migration_connection(self) -> Iterator[Any]:
        with self.connections.translated():
            yield self.connections.connection()

    def _is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, driver.IntegrityError) and errno(error) == ER_DUP_ENTRY

    def _is_missing_table(self, error: BaseException) -> bool:
        return is_missing_table(error)
