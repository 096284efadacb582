"""MariaDB (10.6+): many workers on many hosts, through the driver driver.py names (PyMySQL or mysqlclient).

Every transaction runs in READ COMMITTED: REPEATABLE READ's gap locks make concurrent claims
deadlock on the due index. Claims lock their rows with FOR UPDATE SKIP LOCKED, so workers never
wait on each other's rows (claims.py). UPDATE has no RETURNING here, so a write that must know
what it changed locks those rows first, changes them by id and reads them back, in one
transaction. A deadlock or a lock wait timeout rolls the transaction back as DatabaseConflict, and
the shared parts run it again (sql/database.py, CONFLICT_RETRIES). Times come from the server's
clock with microseconds.

The backend is the shared parts (backends/sql/store.py) over MariaDB's dialect (dialect.py), with
its claim (claims.py) and its pruners' named lock.
"""

from __future__ import annotations

import socket
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Iterator

from leased.admin import WORKER_SILENT_AFTER, OldTransaction
from leased.backends import capabilities
from leased.backends.mariadb.claims import MariaDBClaims
from leased.backends.mariadb.connections import MariaDBConnections
from leased.backends.mariadb.dialect import MariaDBDialect
from leased.backends.mariadb.server import MIGRATOR, QUERIES, connect_arguments
from leased.backends.ports import AttemptEnd
from leased.backends.sql.database import Database
from leased.backends.sql.fenced import FencedEnds
from leased.backends.sql.store import SQLParts
from leased.backends.sql.wakeups import DatagramListener, Waker
from leased.clock import Clock
from leased.errors import ASYNC_TRANSACTIONS_NOT_ON_MARIADB, ConfigurationError
from leased.jobs import Lease

# What tests, the pytest plugin and backends/__init__.py import from here.
__all__ = ["MIGRATOR", "QUERIES", "MariaDBBackend", "connect_arguments"]


class MariaDBBackend:
    capabilities = capabilities.MARIADB
    reclaims_beside_claims = False  # in a claim's transaction once a second (see WorkerPort)
    polling_reason = None  # a datagram's listener is always there (for workers on the producer's host)

    def __init__(self, url: str):
        self.connections = MariaDBConnections(url)
        self.where = self.connections.where
        self._host = socket.gethostname()
        self.dialect = MariaDBDialect(self.connections)
        database = self.database = Database(self.dialect, Waker(self._wake_ports))
        parts = self.parts = SQLParts(database)
        # The shared verbs, each a part's own (backends/sql/store.py).
        self.enqueue, self.wake, self.nudge = parts.producer.enqueue, database.wake, database.wake
        writes = parts.shared_writes
        self.renew, self.finish, self.release = writes.renew, writes.finish, writes.release
        self.reclaim_expired, self.bury_workers = writes.reclaim_expired, writes.bury_workers
        self.retry, self.cancel, self.retry_failed = writes.retry, writes.cancel, writes.retry_failed
        self.cancel_pending, self.pause_queue, self.resume_queue = (
            writes.cancel_pending, writes.pause_queue, writes.resume_queue)
        self.prune_batch, self.fold_throughput = writes.prune_batch, writes.fold_throughput
        self.fenced = FencedEnds(database, writes.finish_on)
        self.finish_in, self.record_step = self.fenced.finish_in, self.fenced.record_step
        leases, admin, retention = parts.leases, parts.admin, parts.retention
        self.register_worker, self.unregister_worker = leases.register_worker, leases.unregister_worker
        self.set_queue_limit, self.prune_throughput = admin.set_queue_limit, retention.prune_throughput
        read = parts.inspection
        self.get_job, self.list_jobs, self.list_workers = read.get_job, read.list_jobs, read.list_workers
        self.counts, self.job_counts, self.oldest_due = read.counts, read.job_counts, read.oldest_due
        self.finished_since, self.task_names, self.queue_names = read.finished_since, read.task_names, read.queue_names
        self.count_jobs, self.recent_quarantined = read.count_jobs, read.recent_quarantined
        self.paused_queues, self.queue_limits, self.throughput = read.paused_queues, read.queue_limits, read.throughput
        self.why_facts, self.count_prunable = read.why_facts, read.count_prunable
        self.durable_steps = read.durable_steps
        self.schedule_states, self.run_schedules = parts.schedules.schedule_states, parts.schedules.run_schedules
        flows = parts.workflows
        self.enqueue_workflow, self.add_steps = flows.enqueue_workflow, flows.add_steps
        self.parents_of, self.step_names = flows.parents_of, flows.step_names
        self.get_workflow, self.list_workflows = flows.get_workflow, flows.list_workflows
        self.cancel_workflow, self.retry_workflow = flows.cancel_workflow, flows.retry_workflow
        self.migration_sql = parts.schema.migration_sql
        self.enqueue_async = parts.producer.enqueue_async
        self.claims = MariaDBClaims(self.connections, database, parts.leases)
        self.claim = self.claims.claim
        self.migrate, self.check_schema = parts.schema.migrate, parts.schema.check_schema
        waits = parts.waits
        self.begin_wait, self.send_signal, self.wake_sleepers = waits.begin_wait, waits.send_signal, waits.wake_sleepers
        self.job_wait, self.signals = waits.job_wait, waits.signals

    def __repr__(self) -> str:
        return f"MariaDBBackend({self.where})"

    @property
    def clock(self) -> Clock:
        """What leased_now() adds to the server's clock, on our sessions and callers' (see leased.clock)."""
        return self.connections.clock

    def connection(self) -> Any:
        """This thread's connection of ours (for tests and benchmarks that read the database directly)."""
        return self.connections.connection()

    def attempt_transaction(self) -> AbstractContextManager[Any]:
        return self.connections.attempt_transaction()

    def serving_worker(self) -> AbstractContextManager[None]:
        return nullcontext()  # one set of connections serves every caller

    def close(self) -> None:
        self.connections.close()

    # Async transactional handlers need an async driver, which MariaDB's backend does not use.
    def attempt_transaction_async(self) -> Any:
        raise ConfigurationError(ASYNC_TRANSACTIONS_NOT_ON_MARIADB)

    async def finish_in_async(self, connection: Any, end: AttemptEnd) -> tuple[bool, set[str]]:
        raise ConfigurationError(ASYNC_TRANSACTIONS_NOT_ON_MARIADB)

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: Any) -> bool:
        raise ConfigurationError(ASYNC_TRANSACTIONS_NOT_ON_MARIADB)

    async def close_async(self) -> None:
        return None

    def _wake_ports(self) -> list[int]:
        rows = self.dialect.rows("wake_ports", host=self._host, silent_after=WORKER_SILENT_AFTER)
        return [row["wake_port"] for row in rows]

    def listener(self) -> DatagramListener:
        """No LISTEN in MariaDB: workers on the producer's host hear a datagram (as on SQLite);
        workers elsewhere poll."""
        return DatagramListener()

    def old_transactions(self, older_than_seconds: float) -> tuple[OldTransaction, ...]:
        return ()  # not read on MariaDB: `why` names none

    @contextmanager
    def pruning(self) -> Iterator[bool]:
        """Holds the pruners' named lock on this thread's connection while the pass runs."""
        connection = self.connections.connection()
        with self.connections.translated():
            locked = bool(self.dialect.execute(connection, "try_prune_lock").fetchone()["locked"])
        try:
            yield locked
        finally:
            if locked:
                with self.connections.translated():
                    self.dialect.execute(connection, "prune_unlock")
