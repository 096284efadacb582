"""What a SQL database answers for the shared parts (backends/sql/) to run on it: a `Dialect`.

Each database writes one class that has these members, in its own folder: sqlite/dialect.py,
postgres/dialect.py, mariadb/dialect.py. It answers them beside a queries.sql that names every
statement the parts run and a folder of numbered migrations; it is a member of nothing and
inherits nothing. What a database has or lacks (UPDATE ... RETURNING, NOTIFY, transactional DDL)
it declares in its `capabilities` (backends/capabilities.py); the parts read those, they do not
ask its name. database.py wraps a dialect into the one object every part is built from.

Driver exceptions stop at the dialect: what reaches the parts and the engine is a leased error
(DatabaseUnavailable, DatabaseConflict, DatabaseLocked, SchemaNotReady), never a driver's class.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, TypeVar

from leased.backends.capabilities import Capabilities
from leased.jobs import NewJob

if TYPE_CHECKING:
    from leased.backends.sql.migrate import Migrator

T = TypeVar("T")
ReadRows = Callable[..., Sequence[Any]]  # read_rows(name, **params), inside one snapshot


class Dialect(Protocol):
    where: str  # the database, named for messages (never with a password)
    capabilities: Capabilities
    migrator: Migrator  # its numbered migrations, and how the one runner (migrate.py) applies them

    # How the driver returns a time column (-> a UTC datetime) and a JSON column (-> its value).
    def to_time(self, value: Any) -> Any: ...

    def from_json(self, value: Any) -> Any: ...

    # Connections and transactions.
    def transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                    ) -> AbstractContextManager[Any]:
        """A connection of its own in a write transaction, committed at the end (SQLite waits at
        most `wait_seconds` for its write lock). With `one_statement`, in autocommit instead, for
        work whose one statement is its own transaction: no BEGIN or COMMIT to send."""
        ...

    def execute(self, connection: Any, name: str, /, **params: Any) -> Any:
        """One named query in that transaction; its cursor (rows as mappings, and rowcount)."""
        ...

    def rows(self, name: str, **params: Any) -> Sequence[Any]:
        """One named query on a connection of its own, outside any transaction; its rows as mappings."""
        ...

    def snapshot(self) -> AbstractContextManager[ReadRows]:
        """A read-only transaction that sees one state of the database; yields read_rows."""
        ...

    def migration_connection(self, outside_transaction: bool = False) -> AbstractContextManager[Any]:
        """A connection of its own to migrate on: in a write transaction, where DDL takes part in one;
        in none for a version that runs outside a transaction (scripts.OUTSIDE_A_TRANSACTION)."""
        ...

    # Enqueue's two steps (see enqueue.py), and the caller's transaction.
    def insert_rows(self, connection: Any, jobs: Sequence[NewJob]) -> Sequence[Sequence[Any]]:
        """insert_job or insert_jobs (enqueue.insert_statement) on `connection`; the rows it returns."""
        ...

    def pending_with_key(self, connection: Any, key: str) -> Mapping[str, Any] | None: ...

    def in_callers(self, connection: Any, work: Callable[[Any], T]) -> T:
        """work(connection) in the caller's open transaction, on their connection (checked to reach
        our database), leaving the commit to them: an enqueue, or a workflow's."""
        ...

    # Values in.
    def list_param(self, values: Sequence[Any]) -> Any:
        """A list as its queries take one (a JSON array, or an array)."""
        ...

    def time_in(self, value: datetime) -> Any:
        """A time as its queries take one."""
        ...

    # What a driver's error means.
    def is_duplicate_key(self, error: BaseException) -> bool:
        """A unique index refused a write."""
        ...

    def is_missing_table(self, error: BaseException) -> bool:
        """A query met no leased table (no schema yet, or dropped)."""
        ...

    def where_schema_is_missing(self) -> str:
        """The database named where no leased table is found: PostgreSQL adds its search path,
        often the cause (a URL's options pointing at a schema leased never migrated)."""
        ...
