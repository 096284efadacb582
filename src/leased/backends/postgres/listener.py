"""Push wake-ups: a connection of its own that LISTENs for jobs that became due.

Polling stays the fallback: a missed notification costs at most one poll interval. A lost
connection, or a server in recovery that refuses the LISTEN, is an outage the worker waits out
while the listener reconnects (once a second at most). A connection that died quietly (no RST
from a vanished host) would simply stop delivering, so the listener pings it after a stretch of
silence and reconnects when that fails.

Behind a pooler the listener has a direct URL of its own (`listen_url`), which must reach the
jobs table the pooled connections write: it is checked on every connect, since a wrong one would
only ever be silent.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from leased.backends.postgres.outages import described, is_outage
from leased.errors import ConfigurationError, DatabaseUnavailable

PING_AFTER_SILENT_SECONDS = 10.0


class Listener:
    port = None  # NOTIFY wakes it: producers send no datagram (ports.Listener)

    def __init__(self, url: str, connect_kwargs: dict[str, Any], channel_query: str, where: str, *,
                 expected: Callable[[], tuple] | None = None, identity_query: str = ""):
        self._url = url
        self._expected = expected  # what connection_identity (identity_query) must read, if checked
        self._identity_query = identity_query
        self._connect_kwargs = connect_kwargs
        self._channel_query = channel_query
        self._where = where
        self._connection: psycopg.Connection | None = None
        self._heard_at = time.monotonic()

    def wait(self, timeout: float) -> list[str]:
        """Queue names of jobs that became due, waiting at most `timeout` seconds for the first."""
        try:
            connection = self._connection or self._connect()
            queues = [notice.payload for notice in connection.notifies(timeout=timeout, stop_after=1)]
            # Take whatever else arrived meanwhile without waiting again.
            queues += [notice.payload for notice in connection.notifies(timeout=0)]
            now = time.monotonic()
            if queues:
                self._heard_at = now
            elif now - self._heard_at > PING_AFTER_SILENT_SECONDS:
                connection.execute("SELECT 1")
                self._heard_at = now
            return queues
        except psycopg.Error as error:
            # A standby in recovery accepts the connection and refuses the LISTEN: an outage too.
            if not is_outage(error):
                raise
            self.close()
            raise DatabaseUnavailable(f"wake-up listener lost {self._where}: {described(error)}") from None

    def _connect(self) -> psycopg.Connection:
        connection = psycopg.connect(self._url, **self._connect_kwargs)
        try:
            self._listen(connection)
        except BaseException:
            connection.close()  # e.g. a standby in recovery refused the LISTEN: try a new one next time
            raise
        self._connection = connection
        self._heard_at = time.monotonic()
        return connection

    def _listen(self, connection: psycopg.Connection) -> None:
        if self._expected is not None:
            with connection.cursor(row_factory=tuple_row) as cursor:
                reached = tuple(cursor.execute(self._identity_query).fetchone())
            if reached != self._expected():
                raise ConfigurationError(
                    f"listen_url reaches another database, schema or server than the database URL (its "
                    f"search_path finds {'no' if reached[3] is None else 'another'} leased_jobs table, or port "
                    f"{reached[1]}, database {reached[2]!r}): wake-ups would never come. Give listen_url the same "
                    "database, user and search_path, connecting directly instead of through the pooler")
        channel = connection.execute(self._channel_query).fetchone()["channel"]
        connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None
