"""SQLite's one write lock: wait for it within a bound, and when it is not had, say so in a
leased error that names the likely holder and the fix, never a bare "database is locked"."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from leased.errors import DatabaseLocked

SQLITE_BUSY, SQLITE_LOCKED = 5, 6


def is_lock_error(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)  # extended codes keep the primary in the low byte
    return "locked" in str(error)


def lock_message(path: str, doing: str, waited: float | None = None) -> str:
    held = "" if waited is None else f" for {waited:.1f} s"
    return (f"could not {doing} SQLite database {path!r}: another connection held its write lock{held} "
            "(a transaction left open, in another process or in this one, e.g. on a connection passed as "
            "connection=); commit or roll back that transaction, and keep transactions that write short")


@contextmanager
def translated_lock_errors(path: str, doing: str = "write to", started: float | None = None) -> Iterator[None]:
    started = time.monotonic() if started is None else started
    try:
        yield
    except sqlite3.OperationalError as error:
        if not is_lock_error(error):
            raise
        raise DatabaseLocked(lock_message(path, doing, time.monotonic() - started)) from None


@contextmanager
def write_lock(thread_lock: threading.Lock, connection: sqlite3.Connection, path: str,
               wait_seconds: float | None, busy_timeout_ms: int, begin: bool = True) -> Iterator[None]:
    """This process's write lock, then SQLite's (BEGIN IMMEDIATE), waiting at most `wait_seconds`
    for both (None: the connection's busy timeout). The caller commits or rolls back. Without
    `begin`, SQLite's lock is the caller's one statement's, taken and released by it."""
    wait = busy_timeout_ms / 1000 if wait_seconds is None else max(wait_seconds, 0.0)
    started = time.monotonic()
    if not thread_lock.acquire(timeout=wait):  # another thread of ours waits for, or holds, the lock
        raise DatabaseLocked(lock_message(path, "write to", time.monotonic() - started))
    try:
        with translated_lock_errors(path, started=started):
            if begin and wait_seconds is None:
                connection.execute("BEGIN IMMEDIATE")
            elif begin:  # a shorter (or longer) wait for this call only
                remaining_ms = max(int((wait - (time.monotonic() - started)) * 1000), 0)
                connection.execute(f"PRAGMA busy_timeout = {remaining_ms}")
                try:
                    connection.execute("BEGIN IMMEDIATE")
                finally:
                    connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            yield
    finally:
        thread_lock.release()
