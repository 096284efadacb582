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
import re
import socket
import threading
import weakref
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar
from urllib.parse import unquote, urlsplit

from leased.admin import WORKER_SILENT_AFTER
from leased.backends import capabilities
from leased.backends.ports import ClaimRequest
from leased.backends.sql.callers import not_ours, wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.backends.mariadb import driver
from leased.backends.mariadb.limited import pick_limited
from leased.backends.sql.migrate import Migrator
from leased.backends.sql.scripts import load_migrations, load_queries, schema_problem
from leased.backends.sql.store import SQLStore
from leased.backends.urls import redacted
from leased.backends.sql.wakeups import DatagramListener, Waker
from leased.clock import Clock
from leased.errors import (ConfigurationError, DatabaseConflict, DatabaseUnavailable, OutcomeUnknown, PayloadError,
                           SchemaNotReady)
from leased.jobs import ClaimedJob, Job, NewJob
from leased.payloads import decode

_HERE = Path(__file__).parent
# leased_now() in queries.sql: the server's clock plus this session's clock seam offset (leased.clock).
# Written out rather than a stored function: MariaDB inlines none, and a function call would be
# evaluated row by row and bound no index range. A session that never set the variable has no offset.
NOW_SQL = "(UNIX_TIMESTAMP(NOW(6)) + COALESCE(@leased_clock_offset, 0))"
QUERIES = {name: text.replace("leased_now()", NOW_SQL) for name, text in load_queries(_HERE / "queries.sql").items()}
MIGRATIONS = load_migrations(_HERE / "migrations")
CONNECT_TIMEOUT_SECONDS = 10
LOCK_WAIT_SECONDS = 30  # innodb_lock_wait_timeout for our sessions

# The oldest MariaDB with everything the queries use (JSON_TABLE, FOR UPDATE SKIP LOCKED).
OLDEST_MARIADB = (10, 6)

# Server error numbers: a transaction the server broke off (worth running again), a table that is
# not there, and a key already taken.
ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT = 1213, 1205
ER_LOST_DURING_QUERY = 2013  # CR_SERVER_LOST: the request was sent, its answer never came
ER_STATEMENT_TIMEOUT = 1969  # max_statement_time, which a DBA may set per user: another try is the cure
ER_NO_SUCH_TABLE, ER_DUP_ENTRY = 1146, 1062
ER_PACKET_TOO_LARGE = 1153  # a statement past the server's max_allowed_packet
# A grant missing: on the database, a table, a column (ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ...).
ER_ACCESS_DENIED = {1044, 1142, 1143}
# Inserts whose refusal by this unique index means "taken already: no row back" (a run's key, a
# schedule's tick). Caught by the index's name: INSERT IGNORE would turn strict-mode data errors
# into warnings too.
NO_ROW_WHEN_TAKEN = {"insert_workflow": "idempotency_key", "claim_tick": "PRIMARY"}
# What a user that runs leased needs (docs/reliability.md, Least privilege); migrating needs more.
RUNNING_GRANTS = "GRANT SELECT, INSERT, UPDATE, DELETE ON `<leased's database>`.* TO <user>"
# The unique index on a pending job's idempotency key (migration 0001): its refusal means "key held".
KEY_INDEX = "leased_jobs_idempotency_key"
# Client errors: the server is gone, or never answered.
CONNECTION_LOST = {2002, 2003, 2005, 2006, 2013, 2055, 1927, 4031}

T = TypeVar("T")


def _time(value: Any) -> Any:
    return None if value is None else datetime.fromtimestamp(float(value), UTC)


def _epoch(value: Any) -> float:
    return value.timestamp()


def _errno(error: BaseException) -> int | None:
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class _NoRows:
    """The cursor of an insert that a taken key refused: no row, none changed."""

    rowcount = 0

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []


_NO_ROWS = _NoRows()


def _refused_by(error: BaseException, index: str) -> bool:
    """Whether `error` is the duplicate-key error of this unique index ("... for key 'name'")."""
    return _errno(error) == ER_DUP_ENTRY and str(error.args[-1]).endswith(f"for key '{index}'")


def _run_statement(connection: Any, statement: str) -> list[tuple]:
    """One statement (the driver runs no more per call), its rows as tuples, on a connection of
    either driver: ours, or Django's."""
    with driver.tuple_cursor(connection) as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall()) if cursor.description else []


@contextmanager
def _migration_lock(connection: Any) -> Iterator[None]:
    """DDL commits on its own in MariaDB, so migrators take turns under a named lock rather than in
    one transaction (and each version is recorded once applied)."""
    ((locked,),) = _run_statement(connection, QUERIES["migration_lock"])
    if not locked:
        raise DatabaseConflict("another migrator held leased's migration lock for 60 s")
    try:
        yield
    finally:
        _run_statement(connection, QUERIES["migration_unlock"])


MIGRATOR = Migrator(MIGRATIONS, QUERIES["create_version_table"], QUERIES["applied_versions"],
                    now_sql="UNIX_TIMESTAMP(NOW(6))",  # the schema's own clock, not leased_now()'s seam
                    run=_run_statement, lock=_migration_lock)


def connect_arguments(url: str) -> tuple[dict[str, Any], str]:
    """driver.DRIVER.connect()'s arguments for a mariadb:// or mysql:// URL, and the database's name for messages."""
    parts = urlsplit(url)
    database = parts.path.lstrip("/")
    if not database:
        raise ConfigurationError(f"invalid MariaDB URL {redacted(url)!r}: name the database, e.g. mariadb://user@host/dbname")
    try:
        port = parts.port
    except ValueError as error:  # not a number, or past 65535: urlsplit reads the port only when asked
        raise ConfigurationError(f"invalid MariaDB URL {redacted(url)!r}: {error}; give the port as a number "
                                 "from 1 to 65535, e.g. mariadb://user@host:3306/dbname") from None
    arguments: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1", "port": port or 3306, "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""), "database": database, "charset": "utf8mb4",
        "connect_timeout": CONNECT_TIMEOUT_SECONDS, "autocommit": True,
    }
    return arguments, f"MariaDB database {database!r} on {arguments['host']}:{arguments['port']}"


def statement_bytes(statement: str, params: dict[str, Any]) -> int:
    """About how many bytes `statement` with `params` is on the wire, never fewer: each text as
    UTF-8, with a byte more for each character the driver escapes (quotes, backslashes, controls)."""
    size = len(statement.encode())
    for value in params.values():
        encoded = str(value).encode()
        size += len(encoded) + 2 + sum(encoded.count(character) for character in _ESCAPED)
    return size


_ESCAPED = (b"'", b'"', b"\\", b"\n", b"\r", b"\0", b"\x1a")


def packet_problem(size: int | None, limit: int | None) -> str:
    """Why the server refuses a statement this large: naming its size (where known), the setting, and the fixes."""
    what = "a statement was" if size is None else f"the statement is {size:,} bytes,"
    setting = "max_allowed_packet" if limit is None else f"max_allowed_packet ({limit:,} bytes)"
    return (f"{what} larger than the server's {setting}: enqueue fewer or smaller jobs per call, or have "
            "the DBA raise max_allowed_packet (SET GLOBAL max_allowed_packet = ..., and in the server's config)")


def server_problem(version: str) -> str | None:
    """Why the server whose SELECT VERSION() reads `version` cannot hold leased's jobs, or None.

    MySQL is refused by name rather than left to fail at its first enqueue: the queries use
    MariaDB's INSERT ... RETURNING (enqueue, schedule ticks) and VALUE() in ON DUPLICATE KEY UPDATE
    (worker registry, limits, pruning), which MySQL 8 has no form of."""
    if "mariadb" not in version.lower():
        return (f"the server is MySQL {version}, which leased does not support: its MariaDB backend needs "
                f"MariaDB {OLDEST_MARIADB[0]}.{OLDEST_MARIADB[1]} or newer (MySQL has no INSERT ... RETURNING "
                "and no VALUE() in ON DUPLICATE KEY UPDATE); use a MariaDB server, or PostgreSQL or SQLite")
    numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if numbers < OLDEST_MARIADB:
        return (f"the server is MariaDB {version}: leased needs MariaDB {OLDEST_MARIADB[0]}.{OLDEST_MARIADB[1]} "
                "or newer (JSON_TABLE, FOR UPDATE SKIP LOCKED)")
    return None


class MariaDBBackend(SQLStore):
    capabilities = capabilities.MARIADB

    def __init__(self, url: str):
        self._arguments, self._where = connect_arguments(url)
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._waker = Waker(self._wake_ports)
        self._host = socket.gethostname()
        self._server_checked = False  # by the first connection, ours or a caller's
        self._max_packet: int | None = None  # the server's max_allowed_packet, read with its version
        self.clock = Clock()  # what leased_now() adds to the server's clock, on our sessions and callers'
        # The offset each session was given (ours and callers'): sessions start without one.
        self._clock_set: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        # Which server and database each caller's connection reaches, and ours (see _check_reach).
        self._reached: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()
        self._identity: tuple | None = None

    def __repr__(self) -> str:
        return f"MariaDBBackend({self._where})"

    # Connections: one per thread (a driver's connection must not be used by two threads at once).
    def _connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._open()
        self._set_clock(connection)
        return connection

    def _open(self) -> Any:
        try:
            connection = driver.DRIVER.connect(**self._arguments)
            with connection.cursor() as cursor:
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS}")
                cursor.execute("SET SESSION time_zone = '+00:00'")
        except driver.OperationalError as error:
            raise DatabaseUnavailable(f"cannot connect to {self._where}: {error.args[-1]}") from None
        try:
            self._check_server(connection)
        except BaseException:
            connection.close()
            raise
        with self._lock:
            self._connections.append(connection)
        return connection

    @contextmanager
    def attempt_transaction(self) -> Iterator[Any]:
        """A transactional handler's connection (one per handler thread, the driver's own: PyMySQL
        or MySQLdb, set up as leased's), in a READ COMMITTED transaction committed when the block
        ends. One the server or the driver closed is dropped, and the next attempt connects anew."""
        connection = getattr(self._local, "handler_connection", None)
        if connection is None:
            with self._translated():
                connection = self._local.handler_connection = self._open()
        try:
            with self._translated():
                self._set_clock(connection)
                connection.begin()
            yield connection
            with self._translated():
                connection.commit()
        except BaseException:
            try:
                connection.rollback()
            except driver.Error:  # lost with the server: the next attempt connects anew
                self._local.handler_connection = None
                with self._lock:
                    if connection in self._connections:
                        self._connections.remove(connection)
            raise

    def _check_server(self, connection: Any) -> None:
        """Refuses a server that is not MariaDB 10.6+ in one clear error (once per backend)."""
        if self._server_checked:
            return
        with self._translated(), connection.cursor() as cursor:
            cursor.execute(QUERIES["server_version"])
            version, self._max_packet = cursor.fetchone()
        problem = server_problem(version)
        if problem:
            raise ConfigurationError(f"{self._where}: {problem}")
        self._server_checked = True

    def _check_reach(self, connection: Any) -> None:
        """A caller's connection must reach our server and database: read once per connection
        (a USE afterwards is not seen), and ours read again before blaming theirs."""
        theirs = self._reached.get(connection)
        if theirs is None:
            with self._translated(), connection.cursor() as cursor:
                cursor.execute(QUERIES["connection_identity"])
                theirs = self._reached[connection] = tuple(cursor.fetchone())
        for fresh in (False, True):
            if fresh or self._identity is None:
                self._identity = tuple(self._rows("connection_identity")[0].values())
            if theirs == self._identity:
                return
        host, port, _, database = theirs
        if theirs[:3] != self._identity[:3]:
            reach = f"another MariaDB server ({host}, port {port})"
        else:
            reach = "no database (none selected)" if database is None else f"database {database!r}"
        raise ConfigurationError(not_ours(reach, self._where))

    def _set_clock(self, connection: Any) -> None:
        """The clock seam: a session whose offset is not the backend's gets it (once per change)."""
        if self._clock_set.get(connection) != self.clock.offset:
            with self._translated(), connection.cursor() as cursor:
                cursor.execute(QUERIES["set_clock_offset"], {"offset": self.clock.offset})
            self._clock_set[connection] = self.clock.offset

    def _forget_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            with self._lock:
                if connection in self._connections:
                    self._connections.remove(connection)
            try:
                connection.close()
            except driver.Error:
                pass

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """The driver's errors stop here, as leased errors."""
        try:
            yield
        except driver.InterfaceError as error:  # PyMySQL, on a connection it closed when the server went
            self._forget_connection()
            raise DatabaseUnavailable(f"lost the connection to {self._where} (the driver closed it)") from error
        except driver.OperationalError + driver.ProgrammingError as error:
            number = _errno(error)
            if number in ER_ACCESS_DENIED:  # no retry mends it: the user lacks a grant
                raise ConfigurationError(f"{self._where}: {error.args[-1]}: the user needs {RUNNING_GRANTS} "
                                         "(docs/reliability.md, Least privilege)") from error
            if isinstance(error, driver.ProgrammingError):
                if self._is_missing_table(error):  # dropped, or never made (migrate=False): no retry mends it
                    raise SchemaNotReady(schema_problem(set(), MIGRATIONS, self._where)) from error
                raise
            if number == ER_PACKET_TOO_LARGE:  # refused unread, and the server drops the connection
                self._forget_connection()
                raise PayloadError(f"{self._where}: {packet_problem(None, self._max_packet)}; nothing was "
                                   "written") from error
            if number in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_STATEMENT_TIMEOUT):
                raise DatabaseConflict(f"{self._where}: {error.args[-1]}; nothing was written") from error
            if number in CONNECTION_LOST or number is None or number >= 2000:
                self._forget_connection()  # the next call connects again
                raise DatabaseUnavailable(f"lost the connection to {self._where}: {error.args[-1]}") from error
            raise

    def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        with self._translated(), driver.dict_cursor(self._connection()) as cursor:
            cursor.execute(QUERIES[name], params)
            return list(cursor.fetchall())

    @contextmanager
    def _transaction(self, wait_seconds: float | None = None, one_statement: bool = False) -> Iterator[Any]:
        """A connection in a READ COMMITTED transaction, committed at the end (`wait_seconds` is
        SQLite's: a row lock here waits innodb_lock_wait_timeout at most); with `one_statement`,
        the connection as it is, in autocommit."""
        with self._translated():
            connection = self._connection()
            if one_statement:  # a write that commits itself: lost while it ran, its outcome is unknown
                with self._outcome_unknown_if_lost():
                    yield connection
                return
            connection.begin()
            try:
                yield connection
                with self._outcome_unknown_if_lost():
                    connection.commit()
            except BaseException:
                try:
                    connection.rollback()
                except driver.Error:
                    pass
                raise

    @contextmanager
    def _outcome_unknown_if_lost(self) -> Iterator[None]:
        """A COMMIT, or a write in autocommit, whose connection was lost after the server had it
        ("Lost connection ... during query"): the server may have committed it. Said apart from
        "not written" (5 of 63 such enqueues had been kept), so that a producer knows to retry with
        an idempotency key; the engine retries it as any outage, its writes being fenced."""
        try:
            yield
        except driver.OperationalError as error:
            if _errno(error) != ER_LOST_DURING_QUERY:
                raise
            self._forget_connection()
            raise OutcomeUnknown(f"lost the connection to {self._where} while it committed a write, which it may or "
                                 "may not have kept: retry with an idempotency key (task.using(idempotency_key=...)) "
                                 "to make a second try safe") from error

    def _execute(self, connection: Any, name: str, /, **params: Any) -> Any:
        cursor = driver.dict_cursor(connection)
        try:
            cursor.execute(QUERIES[name], params)
        except driver.IntegrityError as error:
            if not _refused_by(error, NO_ROW_WHEN_TAKEN.get(name, "")):
                raise
            cursor.close()
            return _NO_ROWS
        return cursor

    def _wake_ports(self) -> list[int]:
        rows = self._rows("wake_ports", host=self._host, silent_after=WORKER_SILENT_AFTER)
        return [row["wake_port"] for row in rows]

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                try:
                    connection.close()
                except driver.Error:
                    pass
            self._connections.clear()
        self._local = threading.local()

    def listener(self) -> DatagramListener:
        """No LISTEN in MariaDB: workers on the producer's host hear a datagram (as on SQLite);
        workers elsewhere poll."""
        return DatagramListener()

    # How rows hold times and JSON (epoch seconds, JSON text), for the shared reads.
    _to_time = staticmethod(_time)
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
        self._check_server(connection)
        self._check_reach(connection)
        with self._translated():  # the caller's transaction: we never commit it
            self._set_clock(connection)
            return work(connection)

    def _insert_rows(self, connection: Any, jobs: Sequence[NewJob]) -> list[tuple[Any, ...]]:
        """The rows inserted; none for a job whose key a pending job holds. The duplicate-key error
        rolls back its statement only (InnoDB), so a batch that met one goes again job by job, in
        the transaction a batch with keys always has (needs_no_transaction)."""
        statement, params = insert_statement(QUERIES, jobs, _epoch)
        size = statement_bytes(statement, params)
        if self._max_packet is not None and size > self._max_packet:
            raise PayloadError(f"{self._where}: {packet_problem(size, self._max_packet)}; nothing was written")
        try:
            with driver.tuple_cursor(connection) as cursor:
                cursor.execute(statement, params)
                return list(cursor.fetchall())
        except driver.IntegrityError as error:
            if not _refused_by(error, KEY_INDEX):
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
        """Claims of limited jobs take turns under a named lock: no two count the same free room."""
        connection = self._connection()
        with self._translated():
            if not self._execute(connection, "limited_claim_lock").fetchone()["locked"]:
                raise DatabaseConflict(f"{self._where}: another claim held the limited-claim lock too long")
        try:
            return self._transact(lambda own: self._lease(own, self.pick_limited(own, params), params["worker_id"],
                                                          limited=True))
        finally:
            with self._translated():
                self._execute(connection, "limited_claim_unlock")

    def pick_limited(self, connection: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The limited claim's choice on `connection`, in its transaction (see limited.py)."""
        return pick_limited(lambda name, **query_params: self._all(connection, name, **query_params), params)

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[..., list[dict[str, Any]]]]:
        with self._translated():
            connection = self._connection()
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
        connection = self._connection()
        with self._translated():
            locked = bool(self._execute(connection, "try_prune_lock").fetchone()["locked"])
        try:
            yield locked
        finally:
            if locked:
                with self._translated():
                    self._execute(connection, "prune_unlock")

    # Schema: the shared runner (MIGRATOR), under its named lock, on a connection of ours that
    # autocommits: a transaction would not hold DDL.
    _migrator = MIGRATOR

    @contextmanager
    def _migration_connection(self) -> Iterator[Any]:
        with self._translated():
            yield self._connection()

    def _is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, driver.IntegrityError) and _errno(error) == ER_DUP_ENTRY

    def _is_missing_table(self, error: BaseException) -> bool:
        return (isinstance(error, driver.ProgrammingError) and _errno(error) == ER_NO_SUCH_TABLE
                and ".leased_" in str(error))  # "Table 'test.leased_jobs' doesn't exist"
