"""PostgreSQL: many workers on many hosts, one pool of connections per process.

Claims use FOR UPDATE SKIP LOCKED, so workers never wait on each other's rows. Every write is one
statement on an autocommit connection: a job and its attempt record change together through
data-modifying CTEs, which keeps each round trip a transaction of its own. Times come from now()
on the server, so the clocks of worker hosts never decide a lease.

Connections come from two pools (calls, claims); a call gets one that its server has not closed,
and through an outage a direct one (checkout.py), so that a promoted standby is reached as soon as
it answers. What counts as an outage, and its one-line reason, is outages.py's.

Behind a pooler (PgBouncer), found by the first connection (see `_reaches_pooler`), nothing may
outlive a transaction: no prepared statements, no session settings, no session-level advisory
lock, no LISTEN except on the direct `listen_url` the URL may name.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Sequence, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row, tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from leased.admin import WORKER_GONE_AFTER, OldTransaction
from leased.backends import capabilities
from leased.backends.ports import AttemptEnd, ClaimRequest, PruneRule
from leased.backends.sql.async_drivers import asyncpg_identity, enqueue_asyncpg
from leased.backends.sql.callers import type_name, wrong_connection
from leased.backends.sql.enqueue import insert_statement
from leased.backends.postgres import callers
from leased.backends.sql.migrate import Migrator
from leased.backends.postgres.listener import Listener
from leased.backends.postgres.blocking import BlockingConnection
from leased.backends.postgres.checkout import POOL_TIMEOUT_SECONDS, Checkout
from leased.backends.postgres.horizon import old_transactions
from leased.backends.postgres.outages import OwnPoolWarnings, described, first_line, is_connection_failure, is_outage, \
    reason
from leased.backends.sql.scripts import load_migrations, load_queries, schema_problem
from leased.backends.sql.store import SQLStore
from leased.backends.urls import redacted, scrubbed
from leased.backends.worker_calls import are_worker_calls
from leased.clock import Clock
from leased.errors import ConfigurationError, DatabaseConflict, DatabaseUnavailable, InvalidTransition, SchemaNotReady
from leased.jobs import ClaimedJob, Job, Lease, NewJob, Outcome
from leased.limits import QueueLimit

T = TypeVar("T")
_HERE = Path(__file__).parent
QUERIES = load_queries(_HERE / "queries.sql")
MIGRATIONS = load_migrations(_HERE / "migrations")
CONNECT_TIMEOUT_SECONDS = 10
LOOK_FOR_LIMITS_SECONDS = 1.0
# The finish in a transactional handler's own transaction, where now() is when the handler began.
FINISH_AT_STATEMENT_TIME = QUERIES["finish"].replace("leased_now()", "(leased_now() + (statement_timestamp() - now()))")
# Transactional handlers' connections (a pool of their own, so that they never take the ones the
# lease keeper renews on): one per handler running at once, closed when idle.
HANDLER_CONNECTIONS = 100
# How long the pool keeps retrying to replace a lost connection (psycopg_pool backs off 1, 2, 4, 8 s
# for up to 5 minutes): after a second it gives up, and the next call that waits asks again at once.
RECONNECT_SECONDS = 1.0
OWN_POOLS = OwnPoolWarnings(("leased", "leased-worker", "leased-claims", "leased-handlers", "leased-async-handlers"))
logging.getLogger("psycopg.pool").addFilter(OWN_POOLS)
log = logging.getLogger("leased.postgres")
# The clock offset each session has, ours and callers' (the clock seam); absent: none.
_CLOCK_SET: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _utc(value: datetime | None) -> datetime | None:
    # The session's TimeZone decides the offset psycopg returns; give the same UTC values as SQLite.
    # A naive time is one that the insert queries return as UTC (see insert_jobs).
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _reclaim_first(connection: psycopg.Connection) -> psycopg.Cursor:
    """A claim's reclaim, at the start of its transaction: asked for by its caller, so it takes no turn."""
    return connection.execute(QUERIES["reclaim_expired"], _reclaim_params(steps=False))


def _reclaim_params(*, steps: bool, spacing: float | None = None, buried: tuple[str, str] | None = None
                    ) -> dict[str, Any]:
    """reclaim_expired's: `buried` is (worker id prefix, how they died) of workers a supervisor saw die."""
    return {"steps": steps, "spacing": spacing, "silent_after": WORKER_GONE_AFTER,
            "buried_prefix": buried and buried[0], "buried_how": buried and buried[1]}


# What a role that runs leased needs, by what a refusal names (docs/reliability.md, Least privilege).
_GRANTS = {"sequence": "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA <leased's schema> TO <role>",
           "schema": "GRANT USAGE ON SCHEMA <leased's schema> TO <role>",
           "table": "GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA <leased's schema> TO <role>"}


def _missing_grant(error: psycopg.Error) -> str:
    """The grant a refusal ("permission denied for sequence ...") asks for, in one clause."""
    text = first_line(error)
    kind = next((kind for kind in _GRANTS if f"for {kind} " in text), None)
    return f"the role needs {_GRANTS[kind]}" if kind else "the role lacks one of the grants leased needs"


def _split_stale(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """A claim's rows, and its count of due rows that did not hold (a row of its own, id NULL,
    when it claimed nothing): see claim in queries.sql."""
    return [row for row in rows if row["id"] is not None], rows[0]["stale_due_rows"] if rows else 0


def _lease_arrays(leases: Sequence[Lease]) -> dict[str, Any]:
    return {"worker_id": leases[0].worker_id, "job_ids": [lease.job_id for lease in leases],
            "attempts": [lease.attempt for lease in leases]}


def _finish_params(ends: Sequence[AttemptEnd], counted_as: str | None = None) -> dict[str, Any]:
    return dict(
        counted_as=counted_as,
        job_ids=[end.lease.job_id for end in ends], attempts=[end.lease.attempt for end in ends],
        worker_ids=[end.lease.worker_id for end in ends], statuses=[end.job_status.value for end in ends],
        results=[end.result_json for end in ends], last_errors=[end.last_error for end in ends],
        retry_in_seconds=[end.retry_in_seconds or 0.0 for end in ends],
        outcomes=[end.outcome.value for end in ends], error_types=[end.error_type for end in ends],
        error_messages=[end.error_message for end in ends], tracebacks=[end.traceback for end in ends],
        progress=[end.progress_json for end in ends],
        handler_outlived_limits=[end.handler_outlived_limit for end in ends])


def _decoded(value: Any) -> Any:
    return value  # psycopg has decoded json columns already


def _run_at(value: datetime) -> str:
    # astimezone(): a naive time means local time, as datetime.timestamp() reads it for SQLite.
    return value.astimezone(UTC).isoformat()


def _run_statement(connection: psycopg.Connection, statement: str) -> list[tuple]:
    """A statement, or a script (no parameters: sent as one multi-statement query), its rows as
    tuples on any connection (ours return dicts, Django's tuples)."""
    with connection.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(statement)
        return cursor.fetchall() if cursor.description else []


@contextmanager
def _migration_lock(connection: psycopg.Connection) -> Iterator[None]:
    """A transaction-scoped advisory lock: held until the connection's transaction (ours, or
    Django's migration's) ends. It comes before CREATE TABLE IF NOT EXISTS, which is not safe
    against a concurrent twin; the second migrator then reads the versions the first committed."""
    _run_statement(connection, QUERIES["migration_lock"])
    yield


MIGRATOR = Migrator(MIGRATIONS, QUERIES["create_version_table"], QUERIES["applied_versions"], now_sql="now()",
                    run=_run_statement, lock=_migration_lock, whole_scripts=True)


def _set_up(connection: psycopg.Connection) -> None:
    connection.execute(QUERIES["session_settings"])


def _set_up_for_claims(connection: psycopg.Connection) -> None:
    connection.execute(QUERIES["claim_settings"], {"for_transaction": False})


# Options of leased's own in a postgresql:// URL's query, taken out before libpq reads it (libpq
# refuses parameters it does not know).
OWN_URL_PARAMETERS = ("listen_url",)


def _own_parameters(url: str) -> tuple[str, dict[str, str]]:
    """The URL without leased's parameters, and those parameters. The rest of the query is passed
    on byte for byte: decoding and encoding it again could change what libpq reads."""
    parts = urlsplit(url)
    kept, ours = [], {}
    for piece in parts.query.split("&") if parts.query else ():
        key, _, value = piece.partition("=")
        if unquote(key) in OWN_URL_PARAMETERS:
            ours[unquote(key)] = unquote(value)
        else:
            kept.append(piece)
    return (urlunsplit(parts._replace(query="&".join(kept))) if ours else url), ours


def _reaches_pooler(connection: psycopg.Connection) -> bool:
    """Whether the connection goes through a pooler such as PgBouncer. A pooler hands its clients
    a cancel key of its own (it must route their cancel requests), so the process id the client was
    told differs from the server process that runs its statements; a direct connection, or a TCP
    proxy that forwards bytes, is told the real one. Asking costs one round trip per backend."""
    with connection.cursor(row_factory=tuple_row) as cursor:
        server_pid = cursor.execute("SELECT pg_backend_pid()").fetchone()[0]
    return connection.info.backend_pid != server_pid


def _parsed(url: str, what: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        # libpq's message may quote the URL, or the piece of it that it could not read: the password.
        raise ConfigurationError(f"invalid {what} {redacted(url)!r}: {scrubbed(first_line(error), url)}") from None


def _described(params: dict[str, Any]) -> str:
    """A database named without the password, for messages and repr; a multi-host URL's hosts each
    with its port (a single port serves them all)."""
    hosts = (params.get("host") or "the default host").split(",")
    ports = str(params.get("port") or "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    where = ", ".join(f"{host}:{port}" if port else host for host, port in zip(hosts, ports))
    return f"PostgreSQL database {params.get('dbname') or '(default)'!r} on {where}"


def _connect_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    return kwargs


class PostgresBackend(SQLStore):
    capabilities = capabilities.POSTGRES
    # The reclaim reads every job claimed since the oldest open transaction began, and a claim that
    # waited for it kept every job enqueued meanwhile waiting (bench/long_transaction_notes.md); the
    # workers take turns at it (migration 0020, bench/fleet_reclaims.py).
    reclaims_beside_claims = True

    def __init__(self, url: str, *, min_connections: int = 1, max_connections: int = 10):
        if not 0 <= min_connections <= max_connections or max_connections < 1:
            raise ConfigurationError(
                f"need 0 <= min_connections <= max_connections and max_connections >= 1, "
                f"got {min_connections} and {max_connections}")
        url, own = _own_parameters(url)
        params = _parsed(url, "PostgreSQL URL")
        self._where = _described(params)
        # A direct connection for LISTEN, when the URL goes through a pooler.
        self._listen_url = own.get("listen_url")
        if self._listen_url is not None:
            listen_params = _parsed(self._listen_url, "listen_url in the PostgreSQL URL")
            self._listen_where = f"{_described(listen_params)} (listen_url)"
            self._listen_kwargs = _connect_kwargs(listen_params)
        self._url, self._connect_kwargs = url, _connect_kwargs(params)
        self._sizes = (min_connections, max_connections)
        self._pool: ConnectionPool | None = None
        # The workers' own calls (leased.backends.worker_calls) share one connection per worker
        # running in this process, apart from the main pool, which producers and handlers use: so
        # a worker process holds this one, a claims connection and the listener, at any
        # concurrency, and a handler's enqueue can neither grow them nor wait behind a renewal.
        # Its writers are short statements that take turns (an end batch, a renewal, a beat).
        self._worker_pool: ConnectionPool | None = None
        self._workers = 0  # serving_worker() blocks open: the worker pool's size, at least 1
        # Claims get connections of their own, set up once for them (see claim_settings in
        # queries.sql): the claim is then one statement, where sending the settings with every
        # claim cost a transaction block and more time than the claim itself.
        self._claims_pool: ConnectionPool | None = None
        self._handlers_pool: ConnectionPool | None = None
        # Async transactional handlers' connections, a pool per event loop (a worker's): psycopg's
        # async pool belongs to the loop that opened it.
        self._async_handler_pools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool] = {}
        self._pool_lock = threading.Lock()
        self._checkout = Checkout(url, self._connect_kwargs, self._where)  # pooled, or direct through an outage
        self._identity: callers.Identity | None = None  # what connection_identity reads on ours
        # Whether limited jobs may wait, as last seen: while they do, every claim takes the lock that
        # serializes claims of limited jobs. The plain claim is safe whatever this says: it takes no
        # limited job. A short plain claim looks again, and a full one once a second.
        self._limits_in_use = False
        self._look_for_limits_at = 0.0  # monotonic: when a full plain claim looks next
        self._due_set_mended = False  # whether this backend's first claim has mended the due set
        # Whether the URL reaches the server through a pooler: None until the first connection tells.
        self.behind_pooler: bool | None = None
        self.clock = Clock()  # leased_now()'s offset for this backend's sessions (see leased.clock)
        # The connection holding the pruners' session lock, for the rest of its pass on that thread.
        self._prune_pass = threading.local()

    def _open_pool(self) -> ConnectionPool:
        """Connect on first use, so that e.g. printing the migration SQL needs no server."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = self._new_pool("leased", *self._sizes, _set_up)
            return self._pool

    def _open_worker_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._worker_pool is None:
                size = max(1, self._workers)
                self._worker_pool = self._new_pool("leased-worker", size, size, _set_up)
            return self._worker_pool

    @contextmanager
    def serving_worker(self) -> Iterator[None]:
        """While a worker runs in this process: one more connection for the workers' own calls."""
        self._resize_worker_pool(+1)
        try:
            yield
        finally:
            self._resize_worker_pool(-1)

    def _resize_worker_pool(self, change: int) -> None:
        with self._pool_lock:
            self._workers += change
            if self._worker_pool is not None:
                size = max(1, self._workers)
                self._worker_pool.resize(size, size)

    def _open_claims_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._claims_pool is None:
                self._claims_pool = self._new_pool("leased-claims", 1, 2, _set_up_for_claims)
            return self._claims_pool

    def _open_handlers_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._handlers_pool is None:
                self._handlers_pool = self._new_pool("leased-handlers", 0, HANDLER_CONNECTIONS, _set_up)
            return self._handlers_pool

    def _pooled(self) -> bool:
        """Whether the URL goes through a pooler; the first call connects to find out, opening the
        pool the caller's calls use (a worker's finds it out on the worker pool, say)."""
        if self.behind_pooler is None:
            self._pool_for_caller()
        return bool(self.behind_pooler)

    def _pool_for_caller(self) -> ConnectionPool:
        if are_worker_calls():
            return self._worker_pool or self._open_worker_pool()
        return self._pool or self._open_pool()

    def _new_pool(self, name: str, min_connections: int, max_connections: int,
                  configure: Callable[[psycopg.Connection], None] | None = None) -> ConnectionPool:
        url, connect_kwargs = self._url, self._connect_kwargs
        # One plain connection first: it fails at once with libpq's reason (refused, bad password,
        # no such database), where the pool would retry quietly until its wait timed out.
        try:
            with psycopg.connect(url, **connect_kwargs) as connection:
                if self.behind_pooler is None:
                    self._found_pooler(_reaches_pooler(connection))
        except psycopg.OperationalError as error:
            raise DatabaseUnavailable(f"cannot connect to {self._where}: {described(error)}") from None

        def set_up(connection: psycopg.Connection) -> None:
            OWN_POOLS.adopt(connection)
            # Behind a pooler a session setting would stay with whichever server connection ran it,
            # the next client's.
            if configure is not None and not self.behind_pooler:
                configure(connection)

        pool = ConnectionPool(url, min_size=min_connections, max_size=max_connections, kwargs=connect_kwargs,
                              configure=set_up, timeout=POOL_TIMEOUT_SECONDS, name=name,
                              reconnect_timeout=RECONNECT_SECONDS, open=True)
        try:
            pool.wait(timeout=CONNECT_TIMEOUT_SECONDS)
        except PoolTimeout:
            pool.close()
            raise DatabaseUnavailable(
                f"cannot connect to {self._where}: no connection within {CONNECT_TIMEOUT_SECONDS} s") from None
        return pool

    def _found_pooler(self, pooled: bool) -> None:
        self.behind_pooler = pooled
        if pooled:
            # psycopg prepares a statement it ran 5 times, on the server connection it then had:
            # through a transaction pooler the next run meets another ("does not exist"), or a
            # prepared one by that name ("already exists"). PgBouncer 1.18 cannot track them.
            self._connect_kwargs["prepare_threshold"] = None

    def __repr__(self) -> str:
        return f"PostgresBackend({self._where})"

    @contextmanager
    def _connection(self, for_claims: bool = False, for_handlers: bool = False
                    ) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        try:
            with self._checked_out(for_claims, for_handlers) as connection:
                self._set_clock(connection)
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
            raise _StalePlan(f"{self._where}: {first_line(error)} (a migration changed a table's "
                             "columns); nothing was written") from error
        except (errors.DeadlockDetected, errors.SerializationFailure) as error:
            raise DatabaseConflict(f"{self._where}: {first_line(error)}; nothing was written") from error
        except (errors.LockNotAvailable, errors.QueryCanceled) as error:
            # A DBA's lock_timeout or statement_timeout (on a role, a database), or a cancel: the
            # server rolled the statement's transaction back. Another try is the cure, as for a
            # deadlock; a worker rides it out as an outage rather than dying of it.
            raise DatabaseConflict(f"{self._where}: {first_line(error)} (the server's lock_timeout or "
                                   "statement_timeout, or a cancel); nothing was written") from error
        except errors.InsufficientPrivilege as error:
            raise ConfigurationError(f"{self._where}: {first_line(error)}: {_missing_grant(error)} "
                                     "(docs/reliability.md, Least privilege)") from error
        except errors.UndefinedTable as error:
            if self._is_missing_table(error):  # dropped, or never made (migrate=False): no retry mends it
                raise SchemaNotReady(schema_problem(set(), MIGRATIONS, self._where)) from error
            raise
        except psycopg.Error as error:
            if not is_outage(error):
                raise
            if is_connection_failure(error):
                raise DatabaseUnavailable(f"lost the connection to {self._where}: {reason(error)}") from error
            raise DatabaseUnavailable(f"{self._where} refused a write: {described(error)}") from error

    @contextmanager
    def _checked_out(self, for_claims: bool, for_handlers: bool) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        pinned = None if for_claims or for_handlers else getattr(self._prune_pass, "connection", None)
        if pinned is not None:  # a pruning pass's own statements, on the connection that holds its lock
            yield pinned
            return
        if for_claims:
            pool, configure = self._claims_pool or self._open_claims_pool(), _set_up_for_claims
        elif for_handlers:
            pool, configure = self._handlers_pool or self._open_handlers_pool(), _set_up
        else:
            pool, configure = self._pool_for_caller(), _set_up
        with self._checkout.connection(pool, None if self.behind_pooler else configure) as connection:
            yield connection

    def _set_clock(self, connection: Any) -> None:
        """The clock seam: a session whose offset is not the backend's gets it (once per change)."""
        offset = self.clock.interval()
        if _CLOCK_SET.get(connection, "") != offset:
            if self.behind_pooler:
                raise self._clock_behind_pooler()
            connection.execute(QUERIES["set_clock_offset"], {"offset": offset})
            _CLOCK_SET[connection] = offset

    def _clock_behind_pooler(self) -> ConfigurationError:
        return ConfigurationError(
            f"the clock seam (leased.testing.advance) sets a session's clock, and {self._where} is reached "
            "through a pooler that shares sessions: move the clock on a direct connection's URL")

    # One named query, one statement, one transaction (the connections autocommit). A statement a
    # migration made stale on a pooled connection is run again: that connection has forgotten its
    # prepared statements, and another of the pool's may still hold them (one try per connection).
    def _run(self, name: str, **params: Any) -> None:
        self._rows(name, returns_rows=False, **params)

    def _rows(self, name: str, returns_rows: bool = True, **params: Any) -> list[dict[str, Any]]:
        for tries_left in reversed(range(STALE_PLAN_TRIES)):
            try:
                with self._connection() as connection:
                    cursor = connection.execute(QUERIES[name], params)
                    return cursor.fetchall() if returns_rows else []
            except _StalePlan:
                if not tries_left:
                    raise
        raise AssertionError("unreachable: the last try raises")

    def old_transactions(self, older_than_seconds: float) -> tuple[OldTransaction, ...]:
        return old_transactions(self._rows, older_than_seconds)

    def _schema_problem(self, applied: set[int]) -> str | None:
        if applied:
            return super()._schema_problem(applied)
        # No version table where the search path looks: name the search path, for it is often the
        # cause (a URL's options, or a role's setting, pointing at a schema leased never migrated).
        searched = self._fetch_one("search_path")
        where = f"{self._where} with search_path {searched['search_path'] if searched else '?'!r}"
        return schema_problem(applied, MIGRATIONS, where)

    def _fetch_one(self, name: str, **params: Any) -> dict[str, Any] | None:
        rows = self._rows(name, **params)
        return rows[0] if rows else None

    def close(self) -> None:
        with self._pool_lock:
            for pool in (self._pool, self._worker_pool, self._claims_pool, self._handlers_pool):
                if pool is not None:
                    pool.close()
            self._pool = self._worker_pool = self._claims_pool = self._handlers_pool = None

    def listener(self) -> Listener | None:
        if not self._pooled():
            return Listener(self._url, self._connect_kwargs, QUERIES["wake_channel"], self._where)
        if self._listen_url is None:
            return None  # see polling_reason
        return Listener(self._listen_url, self._listen_kwargs, QUERIES["wake_channel"], self._listen_where,
                        expected=self._reached_now, identity_query=QUERIES["connection_identity"])

    @property
    def polling_reason(self) -> str | None:
        """Why this backend gives no wake-ups (listener() is None), in a line; None when it does."""
        if self._pooled() and self._listen_url is None:
            return (f"{self._where} is reached through a pooler (PgBouncer?), where LISTEN cannot work; "
                    "add listen_url=<a direct URL> to the database URL for push wake-ups")
        return None

    def _reached(self) -> callers.Identity:
        """What our own connections reach (the listener's must reach the same jobs table)."""
        if self._identity is None:
            self._identity = tuple(self._fetch_one("connection_identity").values())
        return self._identity

    def _reached_now(self) -> callers.Identity:
        """Read again: a failover or a restart changes the server's start time."""
        self._identity = None
        return self._reached()

    # Runtime.
    @contextmanager
    def attempt_transaction(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A transactional handler's connection, from a pool of their own, in a transaction that
        commits when the block ends (psycopg refuses a commit() of the handler's inside it)."""
        with self._connection(for_handlers=True) as connection, connection.transaction():
            connection.row_factory = tuple_row  # psycopg's default, for the handler's own statements
            yield connection

    # An async transactional handler's transaction, on the worker's loop: its end and its steps are
    # written by the same fenced code as a sync handler's, on a thread, over the async connection
    # (blocking.py), once the handler has returned or while it awaits the step.
    @asynccontextmanager
    async def attempt_transaction_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        pool = await self._async_handlers_pool()
        async with pool.connection() as connection:
            await self._set_clock_async(connection)
            async with connection.transaction():
                yield connection

    async def finish_in_async(self, connection: psycopg.AsyncConnection, end: AttemptEnd) -> tuple[bool, set[str]]:
        await self._set_clock_async(connection)  # the fence reads the clock as it is now
        blocking = BlockingConnection(connection, asyncio.get_running_loop())
        return await asyncio.to_thread(self._finish_fenced, blocking, end)

    async def record_step_async(self, lease: Lease, name: str, result_json: str | None, seconds: float,
                                connection: psycopg.AsyncConnection) -> bool:
        await self._set_clock_async(connection)
        blocking = BlockingConnection(connection, asyncio.get_running_loop())
        return await asyncio.to_thread(self.record_step, lease, name, result_json, seconds, blocking)

    async def _set_clock_async(self, connection: psycopg.AsyncConnection) -> None:
        """_set_clock() on an async connection."""
        offset = self.clock.interval()
        if _CLOCK_SET.get(connection, "") != offset:
            if self.behind_pooler:
                raise self._clock_behind_pooler()
            await connection.execute(QUERIES["set_clock_offset"], {"offset": offset})
            _CLOCK_SET[connection] = offset

    async def _async_handlers_pool(self) -> AsyncConnectionPool:
        loop = asyncio.get_running_loop()
        pool = self._async_handler_pools.get(loop)
        if pool is None:
            await asyncio.to_thread(self._pooled)  # connects once: says whether a pooler is in between

            async def set_up(connection: psycopg.AsyncConnection) -> None:
                OWN_POOLS.adopt(connection)
                if not self.behind_pooler:  # see _new_pool
                    await connection.execute(QUERIES["session_settings"])
                await connection.commit()

            kwargs = {key: value for key, value in self._connect_kwargs.items() if key != "row_factory"}
            pool = AsyncConnectionPool(self._url, min_size=0, max_size=HANDLER_CONNECTIONS, kwargs=kwargs,
                                       configure=set_up, timeout=POOL_TIMEOUT_SECONDS, name="leased-async-handlers",
                                       reconnect_timeout=RECONNECT_SECONDS, open=False)
            await pool.open()
            self._async_handler_pools[loop] = pool
        return pool

    async def close_async(self) -> None:
        pool = self._async_handler_pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    def _in_callers(self, connection: psycopg.Connection, work: Callable[[psycopg.Connection], T]) -> T:
        if isinstance(connection, BlockingConnection):  # an async handler's, of our own pool: set up already
            return work(connection)  # type: ignore[arg-type]
        if not isinstance(connection, psycopg.Connection):
            raise ConfigurationError(wrong_connection(connection, "psycopg.Connection", "PostgreSQL",
                                                      "for a psycopg.AsyncConnection use aenqueue()"))
        self._check_reach(callers.identity(connection, QUERIES["connection_identity"]))
        self._set_clock(connection)
        return work(connection)

    # The two steps of enqueue (leased.backends.sql.enqueue), on our connection or the caller's;
    # the row factory goes on the cursor, since the caller's connection may use any.
    def _insert_rows(self, connection: psycopg.Connection, jobs: Sequence[NewJob]) -> list[tuple[Any, ...]]:
        with connection.cursor(row_factory=tuple_row) as cursor:
            return cursor.execute(*insert_statement(QUERIES, jobs, _run_at)).fetchall()

    def _pending_with_key(self, connection: psycopg.Connection, key: str) -> dict[str, Any] | None:
        with connection.cursor(row_factory=dict_row) as cursor:
            return cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key}).fetchone()

    async def enqueue_async(self, jobs: Sequence[NewJob], connection: psycopg.AsyncConnection
                            ) -> list[tuple[Job, bool]]:
        if type_name(connection) == "asyncpg.Connection":  # e.g. under SQLAlchemy's AsyncSession
            self._check_reach(await asyncpg_identity(connection, QUERIES["connection_identity"]))
            return await enqueue_asyncpg(connection, QUERIES, jobs, self.clock.interval(), _utc)
        if not isinstance(connection, psycopg.AsyncConnection):
            raise ConfigurationError(wrong_connection(connection, "psycopg.AsyncConnection", "PostgreSQL",
                                                      "aenqueue() writes with an async connection"))
        self._check_reach(await callers.identity_async(connection, QUERIES["connection_identity"]))
        if _CLOCK_SET.get(connection, "") != self.clock.interval():
            await connection.execute(QUERIES["set_clock_offset"], {"offset": self.clock.interval()})
            _CLOCK_SET[connection] = self.clock.interval()
        return await self._insert_async(connection, jobs)

    async def _insert_rows_async(self, connection: psycopg.AsyncConnection, jobs: Sequence[NewJob]
                                 ) -> list[tuple[Any, ...]]:
        async with connection.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(*insert_statement(QUERIES, jobs, _run_at))
            return await cursor.fetchall()

    async def _pending_with_key_async(self, connection: psycopg.AsyncConnection, key: str
                                      ) -> dict[str, Any] | None:
        async with connection.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(QUERIES["pending_with_key"], {"idempotency_key": key})
            return await cursor.fetchone()

    def claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        params = {"worker_id": request.worker_id, "task_names": list(request.task_names),
                  "queue_names": None if request.queue_names is None else list(request.queue_names),
                  "limit": request.limit}
        if not self._due_set_mended:
            self._mend_due_set()
        with self._connection(for_claims=True) as connection:
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
                self._rotate_due(connection)
        if dropped:
            log.warning("dropped %d due rows whose jobs were gone or had moved (written by a TRUNCATE, an older "
                        "release of leased or writes with triggers off); claimed again at once", dropped)
        jobs = self._claimed(rows)
        for job in jobs:
            job.lease_from = lease_from
        return jobs

    def _claim_pass(self, connection: psycopg.Connection, params: dict[str, Any], reclaim: bool, lease_from: float
                    ) -> tuple[list[dict[str, Any]], int]:
        """One claim: the plain one, and the limited one while limited jobs wait. Returns the rows
        claimed and how many due rows that did not hold it deleted (see claim in queries.sql)."""
        if self._limits_in_use:
            return _split_stale(self._claim_limited(connection, params, reclaim))
        # Whether limited jobs wait: asked by a claim with slots to spare, and once a second by a
        # full one, which would otherwise never look.
        look = reclaim or lease_from >= self._look_for_limits_at
        plain, in_use = self._claim_plain(connection, params, reclaim, look)
        rows, stale = _split_stale(plain)
        if look:
            self._look_for_limits_at = lease_from + LOOK_FOR_LIMITS_SECONDS
        if len(rows) < params["limit"] and in_use is None:  # slots to spare: look for limited jobs
            in_use = connection.execute(QUERIES["limits_in_use"]).fetchone()["in_use"]
        if in_use:
            self._limits_in_use = True
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
        mended = self._fetch_one("mend_due")
        self._due_set_mended = True
        if mended["dropped"] or mended["added"]:
            log.warning("the due set was out of step with the jobs (a TRUNCATE, an older release of leased, or writes "
                        "with triggers off): dropped %d rows, added %d for pending jobs that had none",
                        mended["dropped"], mended["added"])

    def _rotate_due(self, connection: psycopg.Connection) -> None:
        """The due set's oldest generation truncated, if it may be (migration 0018), after each
        reclaim (once a second per worker, its turn or not), once the reclaim has committed: a
        rotation that fails costs its turn, never the jobs just reclaimed or claimed."""
        try:
            connection.execute(QUERIES["rotate_due"])
        except psycopg.Error as error:
            log.warning("the due set's rotation failed, to be tried again in a second: %s", described(error))

    @contextmanager
    def _claim_transaction(self, connection: psycopg.Connection) -> Iterator[None]:
        """A claim's statements as one transaction and one round trip. Behind a pooler the claim
        settings come first, scoped to the transaction: the session they would be set on is not ours."""
        with connection.pipeline(), connection.transaction():
            if self.behind_pooler:
                connection.execute(QUERIES["claim_settings"], {"for_transaction": True})
            yield

    def _claim_plain(self, connection: psycopg.Connection, params: dict[str, Any], reclaim: bool,
                     look_for_limits: bool) -> tuple[list[dict[str, Any]], bool | None]:
        """The claim of jobs no limit holds, after a reclaim if asked; and whether limited jobs wait,
        if asked (None when not)."""
        if not (reclaim or look_for_limits or self.behind_pooler):
            return connection.execute(QUERIES["claim"], params).fetchall(), None
        with self._claim_transaction(connection):
            reclaimed = _reclaim_first(connection) if reclaim else None
            claimed = connection.execute(QUERIES["claim"], params)
            in_use = connection.execute(QUERIES["limits_in_use"]) if look_for_limits else None
        self._steps_to_reclaim(reclaimed)
        return claimed.fetchall(), None if in_use is None else in_use.fetchone()["in_use"]

    def _steps_to_reclaim(self, reclaimed: psycopg.Cursor | None) -> None:
        """After a claim's reclaim: fail the steps it left (see reclaim_expired in queries.sql)."""
        if reclaimed is not None and reclaimed.fetchone()["steps_left"]:
            self._reclaim_expired_steps()

    def _claim_limited(self, connection: psycopg.Connection, params: dict[str, Any], reclaim: bool
                       ) -> list[dict[str, Any]]:
        """Claim limited and plain jobs alike, in claim order, under the lock that serializes
        claims of limited jobs (see queries.sql); one round trip."""
        with self._claim_transaction(connection):
            reclaimed = _reclaim_first(connection) if reclaim else None
            connection.execute(QUERIES["limited_claim_lock"])
            claimed = connection.execute(QUERIES["claim_limited"], params)
            in_use = connection.execute(QUERIES["limits_in_use"])
        self._steps_to_reclaim(reclaimed)
        self._limits_in_use = in_use.fetchone()["in_use"]
        return claimed.fetchall()

    def renew(self, leases: Sequence[Lease], wait_seconds: float | None = None,
              progress: Mapping[Lease, str] | None = None) -> set[Lease]:
        # wait_seconds bounds SQLite's wait for its one write lock; PostgreSQL has none to wait for.
        if not leases:
            return set()
        worker_id = leases[0].worker_id
        reported = progress or {}
        rows = self._rows("renew", **_lease_arrays(leases), progress=[reported.get(lease) for lease in leases])
        return {Lease(row["id"], row["attempt"], worker_id) for row in rows}

    def finish(self, ends: Sequence[AttemptEnd]) -> list[bool]:
        if not ends:
            return []
        params = _finish_params(ends)
        if any(end.workflow_id is not None for end in ends):
            # A step's end settles its children in the same transaction (sql/workflows.py); other
            # ends stay one statement in autocommit, one round trip.
            def work(connection: psycopg.Connection) -> list[dict[str, Any]]:
                ended = self._execute(connection, "finish", **params).fetchall()
                self._settle_rows(connection, ended)
                return ended

            rows = self._transact(work)
        else:
            rows = self._rows("finish", **params)
            if any(row["workflow_id"] is not None for row in rows):  # a caller that did not say (not the engine)
                self._transact(lambda connection: self._settle_rows(connection, rows))
        written = {(row["id"], row["attempt"]) for row in rows}
        return [(end.lease.job_id, end.lease.attempt) in written for end in ends]

    def _finish_on(self, connection: psycopg.Connection, ends: Sequence[AttemptEnd], prepared: Any = None,
                   held: Any = None, counted_as: str | None = None) -> tuple[list[bool], set[str]]:
        """finish() in a transactional handler's transaction (store.finish_in), timed by the
        statement's clock: leased_now() there is when the handler's transaction began."""
        with connection.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(FINISH_AT_STATEMENT_TIME, _finish_params(ends, counted_as)).fetchall()
        released = self._settle_rows(connection, rows) if any(row["workflow_id"] is not None for row in rows) \
            else set()
        written = {(row["id"], row["attempt"]) for row in rows}
        return [(end.lease.job_id, end.lease.attempt) in written for end in ends], released

    def release(self, leases: Sequence[Lease], outcome: Outcome, message: str, explains_expiry: bool = False) -> None:
        if leases:
            self._run("release", **_lease_arrays(leases), outcome=outcome.value, message=message)
        if leases and explains_expiry:
            self._run("explain_expired", **_lease_arrays(leases), message=message)

    def reclaim_expired(self, skip_if_done_within: float | None = None) -> int:
        with self._connection() as connection:
            reclaimed = connection.execute(QUERIES["reclaim_expired"],
                                           _reclaim_params(steps=False, spacing=skip_if_done_within)).fetchone()
            self._rotate_due(connection)
        return reclaimed["n"] + (self._reclaim_expired_steps() if reclaimed["steps_left"] else 0)

    def bury_workers(self, id_prefix: str, how: str) -> int:
        def work(connection: psycopg.Connection) -> Any:
            self._execute(connection, "bury_workers", prefix=id_prefix, silent_after=WORKER_GONE_AFTER)
            reclaimed = connection.execute(QUERIES["reclaim_expired"],
                                           _reclaim_params(steps=False, buried=(id_prefix, how))).fetchone()
            # A step this crash quarantined (lapsed could not know its worker was buried) settles here.
            self._settle_rows(connection, reclaimed["failed_steps"])
            return reclaimed

        reclaimed = self._transact(work)
        # A workflow's step that this crash fails settles its children in a transaction of its own.
        return reclaimed["n"] + (self._reclaim_expired_steps() if reclaimed["steps_left"] else 0)

    def _reclaim_expired_steps(self) -> int:
        """Fail the workflow steps whose last lease expired, and settle their children, in one
        transaction (the claim's reclaim leaves them: it runs in one round trip)."""
        def work(connection: psycopg.Connection) -> int:
            reclaimed = connection.execute(QUERIES["reclaim_expired"], _reclaim_params(steps=True)).fetchone()
            self._settle_rows(connection, reclaimed["failed_steps"])
            return reclaimed["n"]

        return self._transact(work)

    # Inspection and administration.
    def retry_failed(self, task_name: str | None, queue_name: str | None) -> int:
        def work(connection: psycopg.Connection) -> int:
            retried = self._execute(connection, "retry_failed", task_name=task_name, queue_name=queue_name).fetchone()
            self._retried_steps(connection, retried["steps"])
            return retried["n"]

        return self._transact(work)

    def retry(self, job_id: int) -> Job:
        def work(connection: psycopg.Connection) -> dict[str, Any] | None:
            row = self._execute(connection, "retry", job_id=job_id).fetchone()
            if row is not None and row["workflow_id"] is not None:
                self._retried_steps(connection, [job_id])
            return row

        try:
            row = self._transact(work)
        except errors.UniqueViolation:
            raise InvalidTransition(
                f"job {job_id} cannot be retried: another pending job holds its idempotency key") from None
        return self._changed_or_explain(row, job_id, "retry", "failed or cancelled")

    def cancel(self, job_id: int) -> Job:
        def work(connection: psycopg.Connection) -> dict[str, Any] | None:
            row = self._execute(connection, "cancel", job_id=job_id).fetchone()
            if row is not None:
                self._settle_rows(connection, [row])
            return row

        return self._changed_or_explain(self._transact(work), job_id, "cancel", "waiting, pending or running")

    def cancel_pending(self, task_name: str | None, queue_name: str | None) -> int:
        def work(connection: psycopg.Connection) -> int:
            cancelled = self._execute(connection, "cancel_pending", task_name=task_name,
                                      queue_name=queue_name).fetchone()
            self._settle_rows(connection, cancelled["steps"])
            return cancelled["n"]

        return self._transact(work)

    # How rows hold times and JSON, for the shared reads.
    _to_time = staticmethod(_utc)
    _from_json = staticmethod(_decoded)

    @contextmanager
    def _snapshot(self) -> Iterator[Callable[..., list[dict[str, Any]]]]:
        with self._connection() as connection, connection.transaction():
            connection.execute(QUERIES["why_snapshot"])  # one snapshot, and now() is one instant
            yield lambda name, **params: connection.execute(QUERIES[name], params).fetchall()

    def _check_reach(self, theirs: callers.Identity) -> None:
        """A caller's connection must reach our jobs table; ours is read again before blaming theirs
        (a server restart changes its start time)."""
        for fresh in (False, True):
            if fresh:
                self._identity = None
            problem = callers.mismatch(theirs, self._reached(), self._where)
            if problem is None:
                return
        raise ConfigurationError(problem)

    # Periodic jobs: the shared ScheduleStore. A tick's NOTIFY goes out when its transaction commits.

    @contextmanager
    def _transaction(self, wait_seconds: float | None = None, one_statement: bool = False
                     ) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        # wait_seconds bounds SQLite's wait for its one write lock; PostgreSQL has none to wait for.
        # Our connections autocommit: one statement is its own transaction.
        with self._connection() as connection:
            if one_statement:
                yield connection
            else:
                with connection.transaction():
                    yield connection

    @contextmanager
    def _migration_connection(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A transaction to apply a version in, whose lock waits are short (migration_lock_timeout):
        a DDL statement waiting for its lock holds up every claim, enqueue and renewal queued behind
        it, so it gives way and the runner tries again (SQLStore._apply_up_to)."""
        with self._transaction() as connection:
            connection.execute(QUERIES["migration_lock_timeout"])
            yield connection

    def _time_in(self, value: datetime) -> datetime:
        return value

    # Limits per queue.
    def set_queue_limit(self, limit: QueueLimit) -> None:
        super().set_queue_limit(limit)
        if not limit.is_empty:
            self._limits_in_use = True  # claims look for limited jobs from now on

    # Pausing queues, and pruning finished jobs (migration 0003).
    def pause_queue(self, queue_name: str) -> bool:
        return self._fetch_one("pause_queue", queue_name=queue_name) is not None

    def resume_queue(self, queue_name: str) -> bool:
        return self._fetch_one("resume_queue", queue_name=queue_name) is not None  # NOTIFYs at commit

    def _list_param(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def prune_batch(self, rule: PruneRule, limit: int) -> int:
        def work(connection: psycopg.Connection) -> int:
            pruned = self._execute(connection, "prune_batch", **self._rule_params(rule), limit=limit).fetchone()
            if pruned["workflow_ids"]:  # a run goes once the last of its steps has
                self._execute(connection, "delete_empty_workflows", workflow_ids=pruned["workflow_ids"])
            return pruned["n"]

        return self._transact(work)

    def fold_throughput(self, older_than_seconds: float) -> int:
        return self._fetch_one("fold_throughput", older_than=older_than_seconds)["n"]

    @contextmanager
    def pruning(self) -> Iterator[bool]:
        """Holds the pruners' advisory lock on a connection of the pass's own, closed after it.
        Taken from a pool, the lock would hold a pooled connection for the whole pass: the worker
        pool's one, which the worker's other writers then wait for (or, in a pool that grows, a
        connection more, kept idle for 10 minutes while passes come every 5)."""
        try:
            connection = psycopg.connect(self._url, **self._connect_kwargs)
        except psycopg.OperationalError as error:
            raise DatabaseUnavailable(f"cannot connect to {self._where}: {described(error)}") from None
        with connection:
            if self._pooled():
                # A session lock would stay with a server connection that is not ours: the lock is
                # the transaction's, held open for the pass (taking no snapshot, so holding back no
                # vacuum), and the batches take pooled connections.
                with connection.transaction():
                    yield connection.execute(QUERIES["try_prune_lock_in_transaction"]).fetchone()["locked"]
                return
            self._prune_pass.connection = connection  # _checked_out hands it to this thread's calls
            try:
                with self._connection() as pinned:  # the pass's batches, each still its own transaction
                    _set_up(pinned)
                    locked = pinned.execute(QUERIES["try_prune_lock"]).fetchone()["locked"]
                yield locked
                if locked:
                    with self._connection() as pinned:
                        pinned.execute(QUERIES["prune_unlock"])
            finally:
                self._prune_pass.connection = None

    # Schema: the shared runner (MIGRATOR), serialized by an advisory lock, in a transaction of
    # ours. A caller's open transaction (`callers_connection`) holds no lock of ours, so a missing
    # schema is created meanwhile on a connection of our own.
    _migrator = MIGRATOR

    def _execute(self, connection: psycopg.Connection, name: str, /, **params: Any) -> psycopg.Cursor:
        # Rows as mappings on the caller's connection too, whatever its row factory.
        return connection.cursor(row_factory=dict_row).execute(QUERIES[name], params)

    def _is_duplicate_key(self, error: BaseException) -> bool:
        return isinstance(error, errors.UniqueViolation)

    def _is_missing_table(self, error: BaseException) -> bool:
        return isinstance(error, errors.UndefinedTable) and '"leased_' in str(error)


class _StalePlan(DatabaseConflict):
    """A statement this connection had prepared returns a table whole, and a migration changed the
    table's columns since: nothing was written, and the connection has forgotten its statements."""


# A connection per try, at most: the pool's connections each may hold the stale statement once.
STALE_PLAN_TRIES = 12

# What PostgreSQL says when a prepared statement's result would change shape (a column added to a
# table it reads whole): psycopg prepares a statement run five times, so a worker holds such plans.
_STALE_PLAN = "cached plan must not change result type"


def _forget_prepared_statements(connection: psycopg.Connection[Any]) -> None:
    """Drop the session's prepared statements; psycopg, seeing DEALLOCATE ALL, forgets its own."""
    try:
        if connection.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            connection.rollback()
        connection.execute("DEALLOCATE ALL")
    except psycopg.Error:  # a connection that cannot say it is broken: the pool replaces it
        pass
