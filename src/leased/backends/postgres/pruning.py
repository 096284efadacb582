"""The pruners' lock on PostgreSQL: one pruning pass at a time across every worker and host."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import psycopg

from leased.backends.postgres.connections import DictConnection, PostgresConnections, one
from leased.backends.postgres.outages import described
from leased.backends.postgres.pools import set_up
from leased.backends.postgres.queries import QUERIES
from leased.errors import DatabaseUnavailable


@contextmanager
def pruning_lock(connections: PostgresConnections) -> Iterator[bool]:
    """Holds the pruners' advisory lock on a connection of the pass's own, closed after it.
    Taken from a pool, the lock would hold a pooled connection for the whole pass: the worker
    pool's one, which the worker's other writers then wait for (or, in a pool that grows, a
    connection more, kept idle for 10 minutes while passes come every 5)."""
    try:
        connection: DictConnection = psycopg.connect(connections.url, **connections.connect_kwargs)
    except psycopg.OperationalError as error:
        raise DatabaseUnavailable(f"cannot connect to {connections.where}: {described(error)}") from None
    with connection:
        if connections.pools.pooled():
            # A session lock would stay with a server connection that is not ours: the lock is
            # the transaction's, held open for the pass (taking no snapshot, so holding back no
            # vacuum), and the batches take pooled connections.
            with connection.transaction():
                yield one(connection.execute(QUERIES["try_prune_lock_in_transaction"]))["locked"]
            return
        connections.prune_pass.connection = connection  # checked out to this thread's calls meanwhile
        try:
            with connections.connection() as pinned:  # the pass's batches, each still its own transaction
                set_up(pinned)
                locked = one(pinned.execute(QUERIES["try_prune_lock"]))["locked"]
            yield locked
            if locked:
                with connections.connection() as pinned:
                    pinned.execute(QUERIES["prune_unlock"])
        finally:
            connections.prune_pass.connection = None
