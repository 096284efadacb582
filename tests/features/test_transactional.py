"""Transactional handlers on every backend: what the handler writes through context.connection
commits with the attempt's end, fenced on the lease, or rolls back with nothing of it written."""

from __future__ import annotations

import threading

import pytest

from leased import ConfigurationError, InvalidTransition, TaskContext
from leased.jobs import JobStatus, Outcome
from leased.testing import advance

import connections
from conftest import raw_rows, raw_sql, running_worker, wait_for


@pytest.fixture
def effects(app):
    """The app's own table, beside leased's: a row per effect a handler wrote."""
    key = "BIGINT" if not app.database_url.startswith("sqlite") else "INTEGER"
    raw_sql(app, f"CREATE TABLE effects (job_id {key} NOT NULL, attempt INTEGER NOT NULL, note VARCHAR(100))")
    return lambda: sorted(raw_rows(app, "SELECT job_id, attempt, note FROM effects"))


def write_effect(context: TaskContext, note: str) -> None:
    connections.execute(context.connection, "INSERT INTO effects (job_id, attempt, note) VALUES (?, ?, ?)",
                        (context.job_id, context.attempt, note))


def test_the_handlers_writes_commit_with_its_end(app, effects):
    @app.task(name="credit", transactional=True, takes_context=True)
    def credit(context: TaskContext, note):
        write_effect(context, note)
        return {"written": note}

    job = credit.enqueue("paid")
    app.run_until_empty()

    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == {"written": "paid"}
    assert [attempt.outcome for attempt in done.history] == [Outcome.DONE]
    assert effects() == [(job.id, 1, "paid")]
    assert app.job_counts().by_queue["default"]["done"] == 1


def test_a_handler_that_raises_writes_nothing_and_is_retried(app, effects):
    @app.task(name="flaky", transactional=True, takes_context=True, max_attempts=2)
    def flaky(context: TaskContext):
        write_effect(context, f"attempt {context.attempt}")
        if context.attempt == 1:
            raise RuntimeError("the ledger is busy")

    job = flaky.enqueue()
    app.run_until_empty()
    advance(app, 60)  # past the retry's backoff
    app.run_until_empty()

    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE
    assert [attempt.outcome for attempt in done.history] == [Outcome.ERROR, Outcome.DONE]
    assert (done.history[0].error_type, done.history[0].error_message) == ("RuntimeError", "the ledger is busy")
    assert effects() == [(job.id, 2, "attempt 2")]


def test_a_lease_lost_while_the_handler_ran_writes_nothing(app, effects):
    """The lease expires (by the database's clock) before the handler returns: its transaction
    rolls back, the attempt is recorded as lost, and the next attempt's writes are the only ones."""
    @app.task(name="slow", transactional=True, takes_context=True, lease=30)
    def slow(context: TaskContext):
        write_effect(context, f"attempt {context.attempt}")
        if context.attempt == 1:
            advance(app, 3600)  # the lease runs out meanwhile, and nothing renews it
        return context.attempt

    job = slow.enqueue()
    app.run_until_empty()

    done = app.get_job(job.id)
    assert done.status is JobStatus.DONE and done.result == 2
    assert done.history[0].outcome in (Outcome.LEASE_LOST, Outcome.EXPIRED)
    assert effects() == [(job.id, 2, "attempt 2")]


def test_a_time_limit_rolls_the_handler_back(app, effects):
    @app.task(name="stuck", transactional=True, takes_context=True, timeout=0.5, max_attempts=1)
    def stuck(context: TaskContext):
        write_effect(context, "before the limit")
        context.cancelled.wait(60)  # told at its limit

    job = stuck.enqueue()
    app.run_until_empty()

    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED
    assert [attempt.outcome for attempt in failed.history] == [Outcome.TIMEOUT]
    assert effects() == []


def test_a_result_that_cannot_be_stored_rolls_back(app, effects):
    @app.task(name="odd", transactional=True, takes_context=True, max_attempts=1)
    def odd(context: TaskContext):
        write_effect(context, "odd")
        return {1, 2}

    job = odd.enqueue()
    app.run_until_empty()
    failed = app.get_job(job.id)
    assert failed.status is JobStatus.FAILED and "ResultNotStored" in failed.last_error
    assert effects() == []


def test_a_job_enqueued_in_the_handlers_transaction_exists_once_it_commits(app, effects):
    @app.task(name="receipt")
    def receipt(order):
        return order

    @app.task(name="checkout", transactional=True, takes_context=True, lease=30)
    def checkout(context: TaskContext, order):
        receipt.using(connection=context.connection).enqueue(f"{order} attempt {context.attempt}")
        if context.attempt == 1:
            advance(app, 3600)

    checkout.enqueue("order-7")
    app.run_until_empty()
    receipts = app.list_jobs(task_name="receipt")
    assert [job.result for job in receipts] == ["order-7 attempt 2"]


def test_a_cancel_while_the_handler_runs(app, effects, capabilities):
    """On PostgreSQL and MariaDB a user's cancel stops the handler and its writes roll back. On
    SQLite the handler holds the one write lock, so the cancel waits for its commit, and then
    finds the job done."""
    started = threading.Event()

    # A short lease: the worker learns of a cancel at its next renewal, a third of the lease on.
    @app.task(name="long", transactional=True, takes_context=True, max_attempts=1, lease=1.5)
    def long(context: TaskContext):
        write_effect(context, "long")
        started.set()
        if not capabilities.single_writer:  # a user's cancel waits for the handler's write lock
            assert context.cancelled.wait(60), "the cancel never reached the handler"

    job = long.enqueue()
    with running_worker(app):
        started.wait(30)
        if capabilities.single_writer:
            with pytest.raises(InvalidTransition, match="it is done"):
                app.cancel(job.id)
            assert effects() == [(job.id, 1, "long")]
        else:
            app.cancel(job.id)
            wait_for(lambda: app.get_job(job.id).history[0].outcome is not None, message="the attempt's end")
            assert effects() == []
            assert app.get_job(job.id).status is JobStatus.CANCELLED


def test_a_workflow_steps_end_releases_its_child_in_the_same_transaction(app, effects):
    @app.task(name="charge", transactional=True, takes_context=True)
    def charge(context: TaskContext):
        write_effect(context, "charged")
        return "charged"

    @app.task(name="ship", takes_context=True)
    def ship(context: TaskContext):
        return context.parent_results

    wf = app.workflow("order")
    first = wf.add(charge)
    wf.add(ship, after=[first])
    run = wf.enqueue()
    app.run_until_empty()
    assert app.get_job(run.job_ids["ship"]).result == {"charge": "charged"}
    assert len(effects()) == 1


def test_the_connection_is_the_drivers_own(app, backend_name):
    seen = []

    @app.task(name="look", transactional=True, takes_context=True)
    def look(context: TaskContext):
        seen.append(type(context.connection).__module__.split(".")[0])

    look.enqueue()
    app.run_until_empty()
    assert seen == [{"sqlite": "sqlite3", "postgres": "psycopg"}.get(backend_name, seen[0])]
    if backend_name == "mariadb":
        assert seen[0] in ("pymysql", "MySQLdb")


def test_bad_declarations_are_refused_with_the_fix(app):
    with pytest.raises(ConfigurationError, match="takes_context=True as well"):
        @app.task(name="no_context", transactional=True)
        def no_context():
            pass

    with pytest.raises(ConfigurationError, match="transactional must be True or False"):
        @app.task(name="odd_flag", transactional="yes", takes_context=True)
        def odd_flag(context):
            pass

    errors = []

    @app.task(name="plain", takes_context=True, max_attempts=1)
    def plain(context: TaskContext):
        try:
            context.connection
        except ConfigurationError as error:
            errors.append(str(error))

    plain.enqueue()
    app.run_until_empty()
    assert "only a task declared with @app.task(transactional=True, takes_context=True)" in errors[0]


def test_sqlite_a_transactional_handler_holds_the_write_lock_for_its_run(tmp_path):
    """SQLite's one write lock is the handler's from its start, before it writes anything, until
    its end commits: another writer is refused meanwhile (with no busy timeout), and not after."""
    import sqlite3

    from leased import Leased

    path = tmp_path / "jobs.db"
    app = Leased(f"sqlite:///{path}")
    inside, release = threading.Event(), threading.Event()

    @app.task(name="hold", transactional=True, takes_context=True)
    def hold(context: TaskContext):
        inside.set()
        release.wait(30)

    job = hold.enqueue()
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with running_worker(app):
        assert inside.wait(30)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
        release.set()
        wait_for(lambda: app.get_job(job.id).status is JobStatus.DONE, message="the job done")
    other.execute("BEGIN IMMEDIATE")
    other.execute("ROLLBACK")
    other.close()
    app.close()


def test_a_sqlalchemy_session_writes_with_the_attempt(app, effects):
    """leased.contrib.sqlalchemy.session(context): ORM writes commit with the end; its own commit()
    and rollback() are a savepoint's; a lost lease leaves none of them."""
    from sqlalchemy import Column, Integer, String
    from sqlalchemy.orm import declarative_base

    from leased.contrib.sqlalchemy import session

    Base = declarative_base()

    class Effect(Base):
        __tablename__ = "effects"
        job_id = Column(Integer, primary_key=True)
        attempt = Column(Integer, primary_key=True)
        note = Column(String(100))

    @app.task(name="orm", transactional=True, takes_context=True, lease=30)
    def orm(context: TaskContext):
        with session(context) as db:
            db.add(Effect(job_id=context.job_id, attempt=context.attempt, note="kept"))
            db.commit()  # a savepoint released: leased commits with the end
            db.add(Effect(job_id=context.job_id, attempt=context.attempt + 100, note="undone"))
            db.flush()
            db.rollback()  # back to the savepoint: the second row goes, the first stays
        if context.attempt == 1:
            advance(app, 3600)

    job = orm.enqueue()
    app.run_until_empty()
    assert app.get_job(job.id).status is JobStatus.DONE
    assert effects() == [(job.id, 2, "kept")]
