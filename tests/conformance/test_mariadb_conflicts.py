"""MariaDB breaks off transactions to settle conflicts (a deadlock, a lock wait timeout): the claim
runs again, and a conflict that does not go away is DatabaseConflict, never a driver's error; a claim
broken off after its reclaim wrote nothing of either.

Two real connections: the claim's, on a thread, and the test's own, which holds row locks. Where
the claim waits is read from the server (information_schema.INNODB_TRX), not guessed by sleeping.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

from conftest import callers_connection, wait_for
from leased import Leased
from leased.backends.ports import ClaimRequest
from leased.backends.sql import database
from leased.backends.mariadb import connections as mariadb_connections
from leased.backends.mariadb import driver
from leased.errors import DatabaseConflict

pytestmark = pytest.mark.parametrize("backend_name", ["mariadb"], indirect=True)
CLAIM = ClaimRequest("claimer", ("sync",), None, 2)


def _two_keyed_jobs(app: Leased) -> tuple[int, int]:
    """Two due jobs the limited claim takes together: `first` (higher priority) locked before `second`."""

    @app.task(name="sync", concurrency=1, concurrency_key="{customer}")
    def sync(customer): ...

    first = sync.using(priority=10).enqueue("a").id
    second = sync.enqueue("b").id
    return first, second


def _count_conflicts(app: Leased) -> list[DatabaseConflict]:
    """Every conflict that broke off one of the backend's transactions (the real one, wrapped)."""
    conflicts: list[DatabaseConflict] = []
    transaction = app.backend.database.transaction

    @contextmanager
    def counted(wait_seconds: float | None = None, one_statement: bool = False) -> Iterator[Any]:
        try:
            with transaction(wait_seconds, one_statement) as connection:
                yield connection
        except DatabaseConflict as conflict:
            conflicts.append(conflict)
            raise

    app.backend.database.transaction = counted
    return conflicts


def _claim_on_a_thread(app: Leased) -> Future:
    result: Future = Future()

    def claim() -> None:
        try:
            result.set_result(app.backend.claim(CLAIM))
        except BaseException as error:
            result.set_exception(error)

    threading.Thread(target=claim, name="claimer", daemon=True).start()
    return result


def _lock_waits(app: Leased) -> int:
    connection = callers_connection(app, autocommit=True)
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT count(*) FROM information_schema.INNODB_TRX AS trx"
                       " JOIN information_schema.PROCESSLIST AS session ON session.ID = trx.trx_mysql_thread_id"
                       " WHERE trx.trx_state = 'LOCK WAIT' AND session.DB = DATABASE()")
        return cursor.fetchone()[0]
    finally:
        connection.close()


def _deadlocks(cursor) -> int:
    cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
    return int(cursor.fetchone()["Value"])


def test_a_claim_chosen_as_a_deadlock_victim_runs_again_and_claims(app):
    first, second = _two_keyed_jobs(app)
    conflicts = _count_conflicts(app)
    holder = callers_connection(app)
    cursor = driver.dict_cursor(holder)
    deadlocks_before = _deadlocks(cursor)
    # The holder's transaction weighs more (many undo records) than the claim's: InnoDB rolls
    # back the lighter one, the claim.
    cursor.execute("CREATE TEMPORARY TABLE ballast (n INT) ENGINE = InnoDB")
    cursor.execute("INSERT INTO ballast SELECT seq FROM seq_1_to_500")
    cursor.execute("SELECT id FROM leased_jobs WHERE id = %s FOR UPDATE", (second,))

    claimed = _claim_on_a_thread(app)
    # The claim has taken `first` and waits for `second`; asking for `first` closes the circle.
    # InnoDB refreshes INNODB_TRX only when it was last read over 100 ms ago: faster polling freezes it.
    wait_for(lambda: claimed.done() or _lock_waits(app) == 1, message="the claim to wait for the holder's row",
             interval=0.2)
    assert not claimed.done(), claimed.result()
    cursor.execute("SELECT id FROM leased_jobs WHERE id = %s FOR UPDATE", (first,))
    holder.commit()
    jobs = claimed.result(timeout=60)

    assert sorted(job.id for job in jobs) == sorted([first, second])
    assert _deadlocks(cursor) == deadlocks_before + 1
    assert len(conflicts) == 1 and "Deadlock" in str(conflicts[0])
    holder.close()


def test_a_conflict_that_persists_is_database_conflict_after_the_retries(app, monkeypatch):
    monkeypatch.setattr(mariadb_connections, "LOCK_WAIT_SECONDS", 1)  # the server's own timer, for new sessions
    monkeypatch.setattr(database, "CONFLICT_RETRIES", 2)
    app.backend.close()  # sessions made from here on wait one second for a lock
    _, second = _two_keyed_jobs(app)
    conflicts = _count_conflicts(app)
    holder = callers_connection(app)
    holder.cursor().execute("SELECT id FROM leased_jobs WHERE id = %s FOR UPDATE", (second,))

    with pytest.raises(DatabaseConflict, match="Lock wait timeout.*nothing was written") as raised:
        app.backend.claim(CLAIM)
    assert len(conflicts) == 2
    assert not isinstance(raised.value.__cause__, DatabaseConflict)  # the driver's error, kept as the cause

    holder.rollback()  # the conflict gone, the next claim takes both jobs, the limited-claim lock free
    assert len(app.backend.claim(CLAIM)) == 2
    holder.close()


def test_a_claim_that_reclaims_does_both_in_one_transaction(app):
    """The port's promise (ClaimRequest.reclaim_expired): the reclaim is part of the claim's
    transaction. Broken off after the reclaim (the one method overridden fails), the claim leaves
    the expired lease as it was, its attempt not yet closed: nothing of it was written."""
    from leased.errors import DatabaseUnavailable
    from leased.jobs import JobStatus
    from leased.testing.conformance import claim, enqueue, new_job

    backend = app.backend
    (written,) = enqueue(backend, new_job(lease_seconds=5))
    claim(backend, "w1")
    backend.clock.advance(6)

    def cut_off(*args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailable("cut off between the reclaim and the lease")

    backend.claims.lease = cut_off
    with pytest.raises(DatabaseUnavailable, match="cut off"):
        claim(backend, "w2", reclaim_expired=True)
    del backend.claims.lease
    still = backend.get_job(written.id)
    assert (still.status, still.lease_owner, still.history[-1].outcome) == (JobStatus.RUNNING, "w1", None)
    (again,) = claim(backend, "w2", reclaim_expired=True)  # whole, the claim reclaims and takes it
    assert (again.id, again.attempt) == (written.id, 2)
