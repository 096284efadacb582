"""PostgreSQL's connections, as the parts of its backend share them: a connection for one call,
the clock seam on it, and what a driver's error means, as leased's.

Connections come from pools (pools.py: calls, the workers' own calls, claims, transactional
handlers); a call gets one that its server has not closed, and through an outage a direct one
(checkout.py), so that a promoted standby is reached as soon as it answers. What counts as an
outage, and its one-line reason, is outages.py's.

Behind a pooler (PgBouncer), found by the first connection (pools.reaches_pooler), nothing may
outlive a transaction: no prepared statements, no session settings, no session-level advisory
lock, no LISTEN except on the direct `listen_url` the URL may name.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import psycopg
from psycopg import errors

from leased.backends.postgres import callers
from leased.backends.postgres.checkout import Checkout
from leased.backends.postgres.outages import described, first_line, is_connection_failure, is_outage, reason
from leased.backends.postgres.pools import PostgresPools
from leased.backends.postgres.queries import MIGRATIONS, QUERIES
from leased.backends.sql.scripts import schema_problem
from leased.clock import Clock
from leased.errors import ConfigurationError, DatabaseConflict, DatabaseUnavailable, SchemaNotReady

# The clock offset each session has, ours and callers' (the clock seam); absent: none.
CLOCK_SET: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
# A connection per try, at most: the pool's connections each may hold the stale statement once.
STALE_PLAN_TRIES = 12
# What PostgreSQL says when a prepared statement's result would change shape (a column added to a
# table it reads whole): psycopg prepares a statement run five times, so a worker holds such plans.
_STALE_PLAN = "cached plan must not change result type"
# What a role that runs leased needs, by what a refusal names (docs/reliability.md, Least privilege).
_GRANTS = {"sequence": "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA <leased's schema> TO <role>",
           "schema": "GRANT USAGE ON SCHEMA <leased's schema> TO <role>",
           "table": "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE "
                    "ON ALL TABLES IN SCHEMA <leased's schema> TO <role>"}


# Our connections' rows are mappings (dict_row): the parts' statements read columns by name.
DictConnection = psycopg.Connection[dict[str, Any]]
DictCursor = psycopg.Cursor[dict[str, Any]]


def one(cursor: DictCursor) -> dict[str, Any]:
    """The one row of a statement that always returns one (an aggregate, a CTE's summary)."""
    row = cursor.fetchone()
    if row is None:
        raise AssertionError("a statement that returns one row returned none")
    return row


def is_missing_table(error: BaseException) -> bool:
    return isinstance(error, errors.UndefinedTable) and '"leased_' in str(error)


class PostgresConnections:
    """Every connection a PostgreSQL backend uses, and the errors of each translated to leased's."""

    def __init__(self, url: str, connect_kwargs: dict[str, Any], where: str, min_connections: int,
                 max_connections: int):
        self.url, self.connect_kwargs, self.where = url, connect_kwargs, where
        self.pools = PostgresPools(url, connect_kwargs, where, min_connections, max_connections)
        self._checkout = Checkout(url, connect_kwargs, where)  # pooled, or direct through an outage
        self._identity: callers.Identity | None = None  # what connection_identity reads on ours
        self.clock = Clock()  # leased_now()'s offset for this backend's sessions (see leased.clock)
        # The connection holding the pruners' session lock, for the rest of its pass on that thread.
        self.prune_pass = threading.local()

    # A connection for one call, its errors as leased's.
    @contextmanager
    def connection(self, for_claims: bool = False, for_handlers: bool = False
                   ) -> Iterator[DictConnection]:
        try:
            with self._checked_out(for_claims, for_handlers) as connection:
                self.set_clock(connection)
                try:
                    yield connection
                except errors.FeatureNotSupported as error:
                    if _STALE_PLAN in str(error):
                        _forget_prepared_statements(connection)
                    raise
        except errors.FeatureNotSupported as error:
            if _STALE_PLAN not in str(error):
                raise
            # A migration added a column to a table a statement this connection prepared returns
            # whole (job.*): the server refuses the old plan. The statements are forgotten on this
            # connection, and the next try prepares them anew; until then, nothing was written.
            raise StalePlan(f"{self.where}: {first_line(error)} (a migration changed a table's "
                            "columns); nothing was written") from error
        except (errors.DeadlockDetected, errors.SerializationFailure) as error:
            raise DatabaseConflict(f"{self.where}: {first_line(error)}; nothing was written") from error
        except (errors.LockNotAvailable, errors.QueryCanceled) as error:
            # A DBA's lock_timeout or statement_timeout (on a role, a database), or a cancel: the
            # server rolled the statement's transaction back. Another try is the cure, as for a
            # deadlock; a worker rides it out as an outage rather than dying of it.
            raise DatabaseConflict(f"{self.where}: {first_line(error)} (the server's lock_timeout or "
                                   "statement_timeout, or a cancel); nothing was written") from error
        except errors.InsufficientPrivilege as error:
            raise ConfigurationError(f"{self.where}: {first_line(error)}: {_missing_grant(error)} "
                                     "(docs/reliability.md, Least privilege)") from error
        except errors.UndefinedTable as error:
            if is_missing_table(error):  # dropped, or never made (migrate=False): no retry mends it
                raise SchemaNotReady(schema_problem(set(), MIGRATIONS, self.where)) from error
            raise
        except psycopg.Error as error:
            if not is_outage(error):
                raise
            if is_connection_failure(error):
                raise DatabaseUnavailable(f"lost the connection to {self.where}: {reason(error)}") from error
            raise DatabaseUnavailable(f"{self.where} refused a write: {described(error)}") from error

    @contextmanager
    def _checked_out(self, for_claims: bool, for_handlers: bool) -> Iterator[DictConnection]:
        pinned = None if for_claims or for_handlers else getattr(self.prune_pass, "connection", None)
        if pinned is not None:  # a pruning pass's own statements, on the connection that holds its lock
            yield pinned
            return
        pool, configure = self.pools.for_call(for_claims, for_handlers)
        with self._checkout.connection(pool, None if self.pools.behind_pooler else configure) as connection:
            yield connection

    @contextmanager
    def transaction(self, one_statement: bool = False) -> Iterator[DictConnection]:
        """A connection in a transaction; with `one_statement`, as it is (our connections
        autocommit: one statement is its own transaction)."""
        with self.connection() as connection:
            if one_statement:
                yield connection
            else:
                with connection.transaction():
                    yield connection

    def set_clock(self, connection: Any) -> None:
        """The clock seam: a session whose offset is not the backend's gets it (once per change)."""
        offset = self.clock.interval()
        if CLOCK_SET.get(connection, "") != offset:
            if self.pools.behind_pooler:
                raise self.clock_behind_pooler()
            connection.execute(QUERIES["set_clock_offset"], {"offset": offset})
            CLOCK_SET[connection] = offset

    def clock_behind_pooler(self) -> ConfigurationError:
        return ConfigurationError(
            f"the clock seam (leased.testing.advance) sets a session's clock, and {self.where} is reached "
            "through a pooler that shares sessions: move the clock on a direct connection's URL")

    # One named query, one statement, one transaction (the connections autocommit). A statement a
    # migration made stale on a pooled connection is run again: that connection has forgotten its
    # prepared statements, and another of the pool's may still hold them (one try per connection).
    def run(self, name: str, **params: Any) -> None:
        self.rows(name, returns_rows=False, **params)

    def rows(self, name: str, returns_rows: bool = True, **params: Any) -> list[dict[str, Any]]:
        for tries_left in reversed(range(STALE_PLAN_TRIES)):
            try:
                with self.connection() as connection:
                    cursor = connection.execute(QUERIES[name], params)
                    return cursor.fetchall() if returns_rows else []
            except StalePlan:
                if not tries_left:
                    raise
        raise AssertionError("unreachable: the last try raises")

    @contextmanager
    def snapshot(self) -> Iterator[Callable[..., list[dict[str, Any]]]]:
        """Reads of one snapshot, in which now() is one instant too (`leased why`)."""
        with self.connection() as connection, connection.transaction():
            connection.execute(QUERIES["why_snapshot"])
            yield lambda name, **params: connection.execute(QUERIES[name], params).fetchall()

    def fetch_one(self, name: str, **params: Any) -> dict[str, Any] | None:
        rows = self.rows(name, **params)
        return rows[0] if rows else None

    def one(self, name: str, **params: Any) -> dict[str, Any]:
        """The row of a named query that always returns one."""
        row = self.fetch_one(name, **params)
        if row is None:
            raise AssertionError(f"{name} returned no row")
        return row

    # What our connections reach: a caller's, or the listener's, must reach the same jobs table.
    def reached(self) -> callers.Identity:
        if self._identity is None:
            self._identity = tuple(self.one("connection_identity").values())
        return self._identity

    def reached_now(self) -> callers.Identity:
        """Read again: a failover or a restart changes the server's start time."""
        self._identity = None
        return self.reached()

    def check_reach(self, theirs: callers.Identity) -> None:
        """A caller's connection must reach our jobs table; ours is read again before blaming theirs
        (a server restart changes its start time)."""
        for fresh in (False, True):
            if fresh:
                self._identity = None
            problem = callers.mismatch(theirs, self.reached(), self.where)
            if problem is None:
                return
        raise ConfigurationError(problem)


class StalePlan(DatabaseConflict):
    """A statement this connection had prepared returns a table whole, and a migration changed the
    table's columns since: nothing was written, and the connection has forgotten its statements."""


def _missing_grant(error: psycopg.Error) -> str:
    """The grant a refusal ("permission denied for sequence ...") asks for, in one clause."""
    text = first_line(error)
    kind = next((kind for kind in _GRANTS if f"for {kind} " in text), None)
    return f"the role needs {_GRANTS[kind]}" if kind else "the role lacks one of the grants leased needs"


def _forget_prepared_statements(connection: psycopg.Connection[Any]) -> None:
    """Drop the session's prepared statements; psycopg, seeing DEALLOCATE ALL, forgets its own."""
    try:
        if connection.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            connection.rollback()
        connection.execute("DEALLOCATE ALL")
    except psycopg.Error:  # a connection that cannot say it is broken: the pool replaces it
        pass
