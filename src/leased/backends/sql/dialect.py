"""What a SQL database must answer for the store (store.py) to implement the ports on it.

A dialect is a subclass of the store that answers these hooks, beside a queries.sql that names
every statement the store runs and a folder of numbered migrations. Everything else (the write
verbs as named statements of one transaction, the enqueue algorithm, the reads, the schema's
checks) is the store's. leased's three dialects are backends/sqlite, backends/postgres and
backends/mariadb; `leased.testing.conformance` says when a new one is done.

The hooks are declared here once; the store and its parts (inspection.py, schedules.py) read them.
Driver exceptions stop at the dialect: what reaches the store and the engine is a leased error
(DatabaseUnavailable, DatabaseConflict, DatabaseLocked, SchemaNotReady), never a driver's class.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar

from leased.backends.ports import ClaimRequest
from leased.jobs import ClaimedJob, Job, NewJob

if TYPE_CHECKING:
    from leased.backends.sql.migrate import Migrator
    from leased.backends.sql.wakeups import Waker

T = TypeVar("T")
ReadRows = Callable[..., Sequence[Any]]  # read_rows(name, **params), inside one snapshot


class Dialect:
    _where: str  # the database, named for messages (never with a password)
    _migrator: Migrator  # its numbered migrations, and how the one runner (migrate.py) applies them
    # Datagrams to the live workers on this host, where the database has no NOTIFY (SQLite, MariaDB).
    _waker: Waker | None = None
    # How the driver returns a time column (-> a UTC datetime) and a JSON column (-> its value).
    _to_time: Callable[[Any], Any]
    _from_json: Callable[[Any], Any]

    # Connections and transactions.
    def _transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                     ) -> AbstractContextManager[Any]:
        """A connection of its own in a write transaction, committed at the end (SQLite waits at
        most `wait_seconds` for its write lock). With `one_statement`, in autocommit instead, for
        work whose one statement is its own transaction: no BEGIN or COMMIT to send."""
        raise NotImplementedError

    def _execute(self, connection: Any, name: str, /, **params: Any) -> Any:
        """One named query in that transaction; its cursor (rows as mappings, and rowcount)."""
        raise NotImplementedError

    def _rows(self, name: str, **params: Any) -> Sequence[Any]:
        """One named query on a connection of its own, outside any transaction; its rows as mappings."""
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[ReadRows]:
        """A read-only transaction that sees one state of the database; yields read_rows."""
        raise NotImplementedError

    def _migration_connection(self, outside_transaction: bool = False) -> AbstractContextManager[Any]:
        """A connection of its own to migrate on: in a write transaction, where DDL takes part in one;
        in none for a version that runs outside a transaction (scripts.OUTSIDE_A_TRANSACTION)."""
        return self._transaction(one_statement=outside_transaction)

    # Enqueue's two steps (see enqueue.py), and the caller's transaction.
    def _insert_rows(self, connection: Any, jobs: Sequence[NewJob]) -> Sequence[Sequence[Any]]:
        """insert_job or insert_jobs (enqueue.insert_statement) on `connection`; the rows it returns."""
        raise NotImplementedError

    def _pending_with_key(self, connection: Any, key: str) -> Mapping[str, Any] | None:
        raise NotImplementedError

    def _in_callers(self, connection: Any, work: Callable[[Any], T]) -> T:
        """work(connection) in the caller's open transaction, on their connection (checked to reach
        our database), leaving the commit to them: an enqueue, or a workflow's."""
        raise NotImplementedError

    def _ticks_enqueued(self, jobs: Sequence[Job]) -> None:
        """After a schedule's transaction wrote `jobs`: wake who should hear of them."""

    # Values in and out.
    def _list_param(self, values: Sequence[Any]) -> Any:
        """A list as its queries take one (a JSON array, or an array)."""
        raise NotImplementedError

    def _time_in(self, value: datetime) -> Any:
        """A time as its queries take one."""
        raise NotImplementedError

    def _time_out(self, value: Any) -> datetime | None:
        return self._to_time(value)

    # What a driver's error means.
    def _is_duplicate_key(self, error: BaseException) -> bool:
        """A unique index refused a write."""
        raise NotImplementedError

    def _is_missing_table(self, error: BaseException) -> bool:
        """A query met no leased table (no schema yet, or dropped)."""
        raise NotImplementedError

    # SQLite and MariaDB reclaim in a claim's transaction once a second (see WorkerPort).
    reclaims_beside_claims = False

    @property
    def polling_reason(self) -> str | None:
        return None  # a listener is always there (a datagram's, or a database's own)

    @property
    def where(self) -> str:
        return self._where

    # The one verb each dialect writes itself: how two claims are kept from counting the same free
    # room under a limit is the database's write-lock semantics (SQLite's one writer, MariaDB's
    # named lock, PostgreSQL's advisory lock), and the claim is where the shape of the SQL is the speed.
    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        raise NotImplementedError
