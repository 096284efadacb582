"""Push wake-ups: a connection of its own that LISTENs for jobs that became due.

Polling stays the fallback: a missed notification costs at most one poll interval. A connection
that died quietly (no RST from a vanished host) would simply stop delivering, so the listener
pings it after a stretch of silence and reconnects when that fails.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import sql

from leased.errors import DatabaseUnavailable

PING_AFTER_SILENT_SECONDS = 10.0


class Listener:
    def __init__(self, url: str, connect_kwargs: dict[str, Any], channel_query: str, where: str):
        self._url = url
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
        except psycopg.OperationalError as error:
            self.close()
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise DatabaseUnavailable(f"wake-up listener lost {self._where}: {first_line}") from None

    def _connect(self) -> psycopg.Connection:
        connection = psycopg.connect(self._url, **self._connect_kwargs)
        channel = connection.execute(self._channel_query).fetchone()["channel"]
        connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self._connection = connection
        self._heard_at = time.monotonic()
        return connection

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None
