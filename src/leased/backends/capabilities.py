"""What each database can do, declared once: the rest of leased (and its tests) asks a capability,
never a database's name, so a fourth database declares its own and edits nothing else.

Each capability is a difference some code outside the backends branches on; a capability nothing
reads does not belong here. The table of databases that holds these (backends.DIALECTS) is in
backends/__init__.py; this module is a leaf, so that each backend class can name its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Capabilities:
    # One writer at a time for the whole database (SQLite's write lock): a transaction that writes
    # holds every other writer back, a transactional handler's included, so a user's cancel of a
    # running transactional job waits for its end, and a Django connection must take the lock up
    # front (transaction_mode IMMEDIATE) rather than fail to upgrade a read lock.
    single_writer: bool
    # A commit itself wakes listening workers (PostgreSQL's LISTEN/NOTIFY). Without it, workers
    # record a UDP port in their row and a producer sends a datagram to each (backends/sql/wakeups.py).
    listen_notify: bool
    # A migration's DDL commits or rolls back with its transaction. Without it (MariaDB) each
    # statement commits on its own, and a framework must not run migrations inside atomic().
    transactional_ddl: bool
    # An async transactional handler gets an async connection in its transaction (psycopg's
    # AsyncConnection, or aiosqlite's); without it, such a handler is refused at its declaration.
    async_transactions: bool
    # Times are stored as the database's timestamp type (timestamptz), not epoch seconds; JSON as
    # its json type, not text. What a framework's model fields and an operator's SQL must read.
    typed_times_and_json: bool
    # The driver runs a script of many statements in one call; otherwise one statement a call.
    runs_whole_scripts: bool
    # old_transactions() reads the server's transactions that hold back the clean-up of old row
    # versions (PostgreSQL's xmin horizon); without it, it reads nothing and `why` names none.
    reports_old_transactions: bool
    # Pruners on several processes take turns on a lock of the database's own (pruning() says
    # False to all but one); without it, the single writer serializes them batch by batch.
    pruning_lock: bool
    # The URL names a file on this machine (SQLite): opening it creates the file, so a path to
    # nothing is refused before it is opened, and every worker must run where it can open the file.
    file_database: bool
    # A URL may name a schema (PostgreSQL's search_path) as well as a database.
    schemas_in_url: bool
    # Its URL is a libpq connection URI: a Unix socket directory and libpq's options (sslmode...)
    # go in its query. Otherwise a URL names a host and port, never a socket.
    libpq_url: bool
    # Its sessions read at REPEATABLE READ unless told otherwise (MariaDB): a framework's connection
    # that enqueues in its transactions must be set to READ COMMITTED.
    repeatable_read_by_default: bool
    # The claim shares a queue's starts between fairness keys by weight (migration 0029's key
    # table and claim_fair); without it, a job with a fairness key is refused at its enqueue's
    # declaration rather than served in plain order.
    fair_claims: bool


SQLITE = Capabilities(
    single_writer=True, listen_notify=False, transactional_ddl=True, async_transactions=True,
    typed_times_and_json=False, runs_whole_scripts=False, reports_old_transactions=False, pruning_lock=False,
    file_database=True, schemas_in_url=False, libpq_url=False, repeatable_read_by_default=False,
    fair_claims=True)

POSTGRES = Capabilities(
    single_writer=False, listen_notify=True, transactional_ddl=True, async_transactions=True,
    typed_times_and_json=True, runs_whole_scripts=True, reports_old_transactions=True, pruning_lock=True,
    file_database=False, schemas_in_url=True, libpq_url=True, repeatable_read_by_default=False,
    fair_claims=False)

MARIADB = Capabilities(
    single_writer=False, listen_notify=False, transactional_ddl=False, async_transactions=False,
    typed_times_and_json=False, runs_whole_scripts=False, reports_old_transactions=False, pruning_lock=True,
    file_database=False, schemas_in_url=False, libpq_url=False, repeatable_read_by_default=True,
    fair_claims=True)
