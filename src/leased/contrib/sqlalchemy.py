"""A SQLAlchemy Session for a transactional handler: its ORM writes commit with the job's end.

    from leased.contrib.sqlalchemy import session

    @app.task(name="credit", transactional=True, takes_context=True)
    def credit(context, account_id: int, cents: int) -> None:
        with session(context) as db:
            db.get(Account, account_id).balance += cents

The Session runs on `context.connection`, inside the transaction leased opened for the attempt
(engine/transactional.py), in a savepoint of it: its commit() releases the savepoint and its
rollback() rolls back to it. The one commit is leased's, with the job's end, and only while the
worker holds the lease; to give the attempt up, raise. SQLite (pysqlite), PostgreSQL (psycopg)
and MariaDB (PyMySQL, MySQLdb).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from leased.engine.context import TaskContext
from leased.errors import ConfigurationError

# SQLAlchemy's dialect for each driver's connection class, by the module it comes from.
_DIALECTS = {"sqlite3": "sqlite+pysqlite://", "psycopg": "postgresql+psycopg://",
             "pymysql": "mysql+pymysql://", "MySQLdb": "mysql+mysqldb://"}
_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()
_lending = threading.local()  # the driver connection the engine's creator hands over, during connect()


@contextmanager
def session(context: TaskContext, **options: Any) -> Iterator[Session]:
    """A Session on the attempt's connection, in a savepoint (options go to Session()); closed when
    the block ends."""
    with connection(context) as bound, \
            Session(bind=bound, join_transaction_mode="create_savepoint", **options) as orm_session:
        yield orm_session


@contextmanager
def connection(context: TaskContext) -> Iterator[Connection]:
    """A SQLAlchemy Connection on the attempt's connection, in its transaction, for Core statements."""
    raw = context.connection  # a clear error for a task that is not transactional
    engine = _engine_for(raw)
    _lending.connection = raw
    try:
        bound = engine.connect()
    finally:
        _lending.connection = None
    try:
        bound.begin()  # the attempt's transaction as SQLAlchemy sees it (nothing is sent: it is open already)
        yield bound
    finally:
        bound.close()  # its rollback and close are not sent to the lent connection


def _engine_for(raw: Any) -> Engine:
    module = type(raw).__module__.split(".")[0]
    if module not in _DIALECTS:
        raise ConfigurationError(f"leased.contrib.sqlalchemy has no SQLAlchemy dialect for a {type(raw).__name__} "
                                 f"connection (of {module})")
    with _engines_lock:
        if module not in _engines:
            # No pool: each connect() takes the connection being lent, and giving it back closes nothing.
            engine = create_engine(_DIALECTS[module], creator=_lent, poolclass=NullPool)
            dialect = engine.dialect
            # Replaced on this engine's own dialect object on purpose (leased ends the lent connection's
            # transaction); mypy refuses any assignment to a method.
            dialect.do_commit = dialect.do_rollback = dialect.do_close = _leave_it_to_leased  # type: ignore[method-assign]
            _engines[module] = engine
        return _engines[module]


def _lent() -> Any:
    raw = getattr(_lending, "connection", None)
    if raw is None:
        raise ConfigurationError("leased.contrib.sqlalchemy's engine lends only an attempt's connection: "
                                 "use session(context) or connection(context) inside a transactional handler")
    return raw


def _leave_it_to_leased(dbapi_connection: Any) -> None:
    """The lent connection's commit, rollback and close are leased's (the attempt's end commits it)."""
