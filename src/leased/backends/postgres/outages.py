"""What a failover looks like from the PostgreSQL backend, and how it says so in one line.

A promoted standby shows three kinds of trouble, each an outage to wait out, never a bug:
- the old primary's connections break: SQLSTATE class 08 or 57P01-57P03, or none at all (the
  client saw the socket close);
- until the standby is promoted, a URL without target_session_attrs=read-write reaches a server in
  recovery, which refuses every write with SQLSTATE 25006 (`read_only_sql_transaction`, also
  "cannot execute LISTEN during recovery");
- a multi-host URL's connect fails once per host, each for its own reason: the one-line error names
  every host's, where the exception's first line names only the last host tried.
"""

from __future__ import annotations

import logging
from typing import Any
import re
import select
import weakref

import psycopg
from psycopg import errors, pq


def is_connection_failure(error: psycopg.Error) -> bool:
    # OperationalError also covers serialization failures, deadlocks and cancelled queries, which
    # are not an unreachable database: only client-side failures and SQLSTATE 08/57P0x are.
    if not isinstance(error, psycopg.OperationalError):
        return False
    state = error.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def is_read_only(error: BaseException) -> bool:
    """A standby in recovery (or a server an operator made read-only) refused a write."""
    return isinstance(error, errors.ReadOnlySqlTransaction)


def is_outage(error: BaseException) -> bool:
    return isinstance(error, psycopg.Error) and (is_connection_failure(error) or is_read_only(error))


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


_HOST_FAILED = re.compile(r'connection to server (?:at "(?P<host>[^"]*)", port (?P<port>\d+)'
                          r'|on socket "(?P<socket>[^"]*)")'
                          r" failed: (?P<reason>[^\n]*)")
_ALL_FAILURES = "All failures were:"


def reason(error: BaseException) -> str:
    """One line: each host's reason when a multi-host URL failed on several, else the first line."""
    text = str(error)
    if _ALL_FAILURES in text:  # psycopg lists every attempt after this line, in the URL's order
        text = text.split(_ALL_FAILURES, 1)[1]
    reasons: dict[str, str] = {}
    for found in _HOST_FAILED.finditer(text):
        where = found["socket"] or f"{found['host']}:{found['port']}"
        reasons.setdefault(where, found["reason"].strip())
    if len(reasons) < 2:
        return first_line(error)
    return "; ".join(f"{where}: {why}" for where, why in reasons.items())


def described(error: BaseException) -> str:
    """The reason an outage gives, with what a read-only server means."""
    if is_read_only(error):
        return (f"{first_line(error)} (a standby in recovery? add target_session_attrs=read-write to a "
                "multi-host URL to reach the primary only)")
    return reason(error)


def is_stale(connection: psycopg.Connection) -> bool:
    """Whether an idle pooled connection was closed by its server meanwhile (a crash, a restart, a
    failover), at no round trip: an idle connection that is not LISTENing has nothing to read
    unless the server said goodbye or the socket ended."""
    pgconn = connection.pgconn
    if pgconn.status != pq.ConnStatus.OK:
        return True
    try:
        readable, _, _ = select.select([pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return bool(readable)


class OwnPoolWarnings(logging.Filter):
    """psycopg_pool warns on every failed reconnection of its pools, and on every broken connection
    given back to them; for leased's own pools the outage is leased's to report (once per loop, with
    each host's reason), not the pool's. Its records name the pool, or the connection."""

    def __init__(self, pool_names: tuple[str, ...]):
        super().__init__()
        self._pool_names = pool_names
        self._connections: weakref.WeakSet[psycopg.Connection[Any] | psycopg.AsyncConnection[Any]] = weakref.WeakSet()

    def adopt(self, connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        """A connection one of leased's pools made."""
        self._connections.add(connection)

    def filter(self, record: logging.LogRecord) -> bool:
        subject = record.args[0] if isinstance(record.args, tuple) and record.args else None
        ours = (subject in self._pool_names if isinstance(subject, str)
                else isinstance(subject, psycopg.Connection) and subject in self._connections)
        return not (ours and record.levelno <= logging.WARNING)
