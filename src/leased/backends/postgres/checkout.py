"""A connection for one call: a pooled one its server has not closed, or, through an outage, a
direct one.

After a crash, a restart or a failover every pooled connection is dead, and psycopg_pool replaces
them on its own time. So once a connection was found lost, or a wait for one ran out, a call waits
only a moment for a pooled connection, then connects directly: it reaches the new primary as soon
as that answers. The first pooled connection that works again ends that.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from leased.backends.postgres.outages import described, is_connection_failure, is_stale
from leased.errors import DatabaseUnavailable

# How long a call waits for a free pooled connection: well below a lease, since a claim or a
# renewal that waited longer would be worth little.
POOL_TIMEOUT_SECONDS = 5
# Through an outage, how long a call waits for a pooled connection before connecting directly.
OUTAGE_POOL_WAIT_SECONDS = 0.05

log = logging.getLogger("leased.postgres")


class Checkout:
    def __init__(self, url: str, connect_kwargs: dict[str, Any], where: str):
        self._url = url
        self._connect_kwargs = connect_kwargs  # the backend's: it may change them once it finds a pooler
        self._where = where
        # Set when a connection was found lost (or a pool wait ran out), until a pooled one works again.
        self.reconnecting = False

    @contextmanager
    def connection(self, pool: ConnectionPool, configure: Callable[[psycopg.Connection], None] | None
                   ) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A pooled connection, else a direct one set up by `configure` (as the pool sets up its own)."""
        connection = self._from_pool(pool)
        if connection is None:
            try:
                direct = psycopg.connect(self._url, **self._connect_kwargs)
            except psycopg.OperationalError as error:
                raise DatabaseUnavailable(f"cannot connect to {self._where}: {described(error)}") from None
            with direct:
                if configure is not None:
                    configure(direct)
                yield direct
            return
        try:
            with connection:  # as pool.connection() does: the pool's own connection stays open
                yield connection
        except psycopg.Error as error:
            if is_connection_failure(error):
                self.reconnecting = True
            raise
        else:
            if self.reconnecting:
                self.reconnecting = False
                log.info("pooled connections to %s work again", self._where)
        finally:
            pool.putconn(connection)

    def _from_pool(self, pool: ConnectionPool) -> psycopg.Connection[dict[str, Any]] | None:
        """A pooled connection its server has not closed; None if the pool has none ready in time.
        A closed one is given back (the pool replaces it) at no round trip, before it can fail a
        call: the first enqueue after a failover, say."""
        for _ in range(pool.max_size + 1):
            try:
                connection = pool.getconn(OUTAGE_POOL_WAIT_SECONDS if self.reconnecting else POOL_TIMEOUT_SECONDS)
            except PoolTimeout:
                # Every connection busy for that long, or the database unreachable: a direct
                # connection tells which (one line with each host's reason), and serves meanwhile.
                if not self.reconnecting:
                    self.reconnecting = True
                    log.warning("no pooled connection to %s within %g s: connecting directly meanwhile",
                                self._where, POOL_TIMEOUT_SECONDS)
                return None
            if not is_stale(connection):
                return connection
            if not self.reconnecting:  # its server closed it: the others are likely gone too
                self.reconnecting = True
                log.warning("%s closed pooled connections (a restart, a failover?): connecting anew", self._where)
            connection.close()
            pool.putconn(connection)
        return None
