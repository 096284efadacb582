"""MariaDB's connections: one per thread (a driver's connection must not be used by two threads at
once), set up for leased (READ COMMITTED, a bounded lock wait, UTC, the clock seam), and the
driver's errors stopped here as leased's."""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Any, Iterator

from leased.backends.mariadb import driver
from leased.backends.mariadb.server import (CONNECTION_LOST, ER_ACCESS_DENIED, ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT,
                                            ER_LOST_DURING_QUERY, ER_NO_SUCH_TABLE, ER_PACKET_TOO_LARGE,
                                            ER_STATEMENT_TIMEOUT, LOCK_WAIT_SECONDS, MIGRATIONS, NO_ROW_WHEN_TAKEN,
                                            NO_ROWS, QUERIES, RUNNING_GRANTS, connect_arguments, errno,
                                            packet_problem, refused_by, server_problem)
from leased.backends.sql.callers import not_ours
from leased.backends.sql.scripts import schema_problem
from leased.clock import Clock
from leased.errors import (ConfigurationError, DatabaseConflict, DatabaseUnavailable, OutcomeUnknown, PayloadError,
                           SchemaNotReady)


def is_missing_table(error: BaseException) -> bool:
    return (isinstance(error, driver.ProgrammingError) and errno(error) == ER_NO_SUCH_TABLE
            and ".leased_" in str(error))  # "Table 'test.leased_jobs' doesn't exist"


class MariaDBConnections:
    def __init__(self, url: str):
        self.arguments, self.where = connect_arguments(url)
        self._local = threading.local()
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self.server_checked = False  # by the first connection, ours or a caller's
        self.max_packet: int | None = None  # the server's max_allowed_packet, read with its version
        self.clock = Clock()  # what leased_now() adds to the server's clock, on our sessions and callers'
        # The offset each session was given (ours and callers'): sessions start without one.
        self._clock_set: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        # Which server and database each caller's connection reaches, and ours (see check_reach).
        self._reached: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()
        self._identity: tuple | None = None

    def connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self.open()
        self.set_clock(connection)
        return connection

    def open(self) -> Any:
        try:
            connection = driver.DRIVER.connect(**self.arguments)
            with connection.cursor() as cursor:
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS}")
                cursor.execute("SET SESSION time_zone = '+00:00'")
        except driver.OperationalError as error:
            raise DatabaseUnavailable(f"cannot connect to {self.where}: {error.args[-1]}") from None
        try:
            self.check_server(connection)
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
            with self.translated():
                connection = self._local.handler_connection = self.open()
        try:
            with self.translated():
                self.set_clock(connection)
                connection.begin()
            yield connection
            with self.translated():
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

    def check_server(self, connection: Any) -> None:
        """Refuses a server that is not MariaDB 10.6+ in one clear error (once per backend)."""
        if self.server_checked:
            return
        with self.translated(), connection.cursor() as cursor:
            cursor.execute(QUERIES["server_version"])
            version, self.max_packet = cursor.fetchone()
        problem = server_problem(version)
        if problem:
            raise ConfigurationError(f"{self.where}: {problem}")
        self.server_checked = True

    def check_reach(self, connection: Any) -> None:
        """A caller's connection must reach our server and database: read once per connection
        (a USE afterwards is not seen), and ours read again before blaming theirs."""
        theirs = self._reached.get(connection)
        if theirs is None:
            with self.translated(), connection.cursor() as cursor:
                cursor.execute(QUERIES["connection_identity"])
                theirs = self._reached[connection] = tuple(cursor.fetchone())
        ours = self._identity
        for fresh in (False, True):
            if fresh or ours is None:
                ours = self._identity = tuple(self.rows("connection_identity")[0].values())
            if theirs == ours:
                return
        host, port, _, database = theirs
        if ours is None or theirs[:3] != ours[:3]:
            reach = f"another MariaDB server ({host}, port {port})"
        else:
            reach = "no database (none selected)" if database is None else f"database {database!r}"
        raise ConfigurationError(not_ours(reach, self.where))

    def set_clock(self, connection: Any) -> None:
        """The clock seam: a session whose offset is not the backend's gets it (once per change)."""
        if self._clock_set.get(connection) != self.clock.offset:
            with self.translated(), connection.cursor() as cursor:
                cursor.execute(QUERIES["set_clock_offset"], {"offset": self.clock.offset})
            self._clock_set[connection] = self.clock.offset

    def forget_connection(self) -> None:
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
    def translated(self) -> Iterator[None]:
        """The driver's errors stop here, as leased errors."""
        try:
            yield
        except driver.InterfaceError as error:  # PyMySQL, on a connection it closed when the server went
            self.forget_connection()
            raise DatabaseUnavailable(f"lost the connection to {self.where} (the driver closed it)") from error
        except driver.OperationalError + driver.ProgrammingError as error:
            number = errno(error)
            if number in ER_ACCESS_DENIED:  # no retry mends it: the user lacks a grant
                raise ConfigurationError(f"{self.where}: {error.args[-1]}: the user needs {RUNNING_GRANTS} "
                                         "(docs/reliability.md, Least privilege)") from error
            if isinstance(error, driver.ProgrammingError):
                if is_missing_table(error):  # dropped, or never made (migrate=False): no retry mends it
                    raise SchemaNotReady(schema_problem(set(), MIGRATIONS, self.where)) from error
                raise
            if number == ER_PACKET_TOO_LARGE:  # refused unread, and the server drops the connection
                self.forget_connection()
                raise PayloadError(f"{self.where}: {packet_problem(None, self.max_packet)}; nothing was "
                                   "written") from error
            if number in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_STATEMENT_TIMEOUT):
                raise DatabaseConflict(f"{self.where}: {error.args[-1]}; nothing was written") from error
            if number in CONNECTION_LOST or number is None or number >= 2000:
                self.forget_connection()  # the next call connects again
                raise DatabaseUnavailable(f"lost the connection to {self.where}: {error.args[-1]}") from error
            raise

    def rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        with self.translated(), driver.dict_cursor(self.connection()) as cursor:
            cursor.execute(QUERIES[name], params)
            return list(cursor.fetchall())

    @contextmanager
    def transaction(self, wait_seconds: float | None = None, one_statement: bool = False) -> Iterator[Any]:
        """A connection in a READ COMMITTED transaction, committed at the end (`wait_seconds` is
        SQLite's: a row lock here waits innodb_lock_wait_timeout at most); with `one_statement`,
        the connection as it is, in autocommit."""
        with self.translated():
            connection = self.connection()
            if one_statement:  # a write that commits itself: lost while it ran, its outcome is unknown
                with self.outcome_unknown_if_lost():
                    yield connection
                return
            connection.begin()
            try:
                yield connection
                with self.outcome_unknown_if_lost():
                    connection.commit()
            except BaseException:
                try:
                    connection.rollback()
                except driver.Error:
                    pass
                raise

    @contextmanager
    def outcome_unknown_if_lost(self) -> Iterator[None]:
        """A COMMIT, or a write in autocommit, whose connection was lost after the server had it
        ("Lost connection ... during query"): the server may have committed it. Said apart from
        "not written" (5 of 63 such enqueues had been kept), so that a producer knows to retry with
        an idempotency key; the engine retries it as any outage, its writes being fenced."""
        try:
            yield
        except driver.OperationalError as error:
            if errno(error) != ER_LOST_DURING_QUERY:
                raise
            self.forget_connection()
            raise OutcomeUnknown(f"lost the connection to {self.where} while it committed a write, which it may or "
                                 "may not have kept: retry with an idempotency key (task.using(idempotency_key=...)) "
                                 "to make a second try safe") from error

    def execute(self, connection: Any, name: str, /, **params: Any) -> Any:
        cursor = driver.dict_cursor(connection)
        try:
            cursor.execute(QUERIES[name], params)
        except driver.IntegrityError as error:
            if not refused_by(error, NO_ROW_WHEN_TAKEN.get(name, "")):
                raise
            cursor.close()
            return NO_ROWS
        return cursor


    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                try:
                    connection.close()
                except driver.Error:
                    pass
            self._connections.clear()
        self._local = threading.local()

